"""The answer both fake providers stream, and how it is cut into tokens.

One rule for both, so one scenario streamed through either provider relays the same
answer (``tests/integration/test_fake_bedrock.py`` checks they agree).
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_TEXT", "split_answer"]

#: The answer when a scenario sets neither ``text`` nor ``chunks``: one token per word.
DEFAULT_TEXT = (
    "Hamlet, the Prince of Denmark, returns home to find his father dead and his "
    "mother married to his uncle Claudius; urged by his father's ghost to seek "
    "revenge, he feigns madness, stages a play, and hesitates until tragedy "
    "consumes the whole court."
)

_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit "
_WORDS = re.compile(r"\s*\S+")


def split_answer(chunks: int | None, text: str | None, chunk_bytes: int | None) -> tuple[str, ...]:
    """The content tokens of an answer, in order; their concatenation is the answer.

    - ``chunk_bytes=B``: ``chunks`` tokens (default: one per word of
      :data:`DEFAULT_TEXT`), token *i* being exactly B ASCII characters:
      ``f"c{i} "`` followed by lorem-ipsum filler, cut to B.
    - ``chunks=N`` without ``text``: ``["w0", " w1", " w2", ...]`` (N tokens, the
      answer is ``"w0 w1 ... w{N-1}"``).
    - ``chunks=N`` with ``text``: the text cut into N pieces of near-equal length
      (the first ``len % N`` pieces one character longer; pieces are empty when
      N exceeds the length).
    - otherwise one token per word of the text (default :data:`DEFAULT_TEXT`),
      OpenAI-style: each word carries the whitespace before it, the last also
      any trailing whitespace.
    """
    if chunk_bytes is not None:
        count = chunks if chunks is not None else len(_words(DEFAULT_TEXT))
        filler = _FILLER * (chunk_bytes // len(_FILLER) + 1)
        return tuple((f"c{i} " + filler)[:chunk_bytes] for i in range(count))
    if chunks is not None and text is None:
        return tuple(f"w{i}" if i == 0 else f" w{i}" for i in range(chunks))
    text = DEFAULT_TEXT if text is None else text
    if chunks is None:
        return _words(text)
    if chunks == 0:
        return ()
    size, longer = divmod(len(text), chunks)
    pieces, start = [], 0
    for i in range(chunks):
        end = start + size + (1 if i < longer else 0)
        pieces.append(text[start:end])
        start = end
    return tuple(pieces)


def _words(text: str) -> tuple[str, ...]:
    words = _WORDS.findall(text)
    tail = text[sum(map(len, words)):]
    if tail:  # trailing whitespace, or a text that is only whitespace
        if words:
            words[-1] += tail
        else:
            words = [tail]
    return tuple(words)
