"""Server-Sent Events: encode outgoing events, decode an upstream event stream.

Pure and I/O-free in the h11 manner: ``encode_*`` turn text into the exact bytes
to write, and ``SSEDecoder.feed`` takes byte chunks as they arrive off the wire
and returns the complete events they finish. Decoding follows the WHATWG
"event stream interpretation" rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ProtocolError

__all__ = ["SSEEvent", "SSEDecoder", "encode_data", "encode_comment"]

_BOM = b"\xef\xbb\xbf"
# The framing of a one-line data event: b"data: " + payload + b"\n\n". A writer whose
# payload is always one line (JSON text never holds a raw line break) may put these
# around it itself, as encode_data's fast path does.
DATA_FIELD = b"data: "
EVENT_END = b"\n\n"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``id`` is the stream's *last event ID* at dispatch time (it persists across
    events, as WHATWG specifies), ``None`` if the stream never sent one.
    ``retry`` is the reconnection time in milliseconds from a ``retry`` field
    seen since the previous dispatched event, else ``None``.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_data(data: str | bytes) -> bytes:
    """The bytes of one ``data`` event: ``b"data: <data>\\n\\n"``.

    Each line of ``data`` (split at ``\\r\\n``, ``\\r`` or ``\\n``, the endings a
    decoder recognises) becomes its own ``data:`` line, so the receiver re-joins
    them into the same text. Text is encoded as UTF-8, lone surrogates (which
    UTF-8 cannot carry) replaced by ``?``; bytes are taken as they are.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    # Hot path: once per relayed token, whose JSON is always one line: one concatenation.
    if b"\n" not in data and b"\r" not in data:
        return DATA_FIELD + data + EVENT_END
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def encode_comment(text: str = "ping") -> bytes:
    """The bytes of a comment block, ``b": <text>\\n\\n"``; receivers ignore it.

    Used as a keep-alive so proxies do not time out an idle stream. A
    multi-line ``text`` becomes one ``:`` line per line.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return ("".join(f": {line}\n" for line in lines) + "\n").encode("utf-8", "replace")


class SSEDecoder:
    """Incremental decoder: feed() arbitrary byte chunks, get complete events back.

    Chunk boundaries may fall anywhere: inside a line, inside a ``\\r\\n`` pair,
    or inside a multi-byte UTF-8 character. Text is decoded per complete line
    with ``errors="replace"``, so bad UTF-8 never raises. Only the two size
    limits below raise (``ProtocolError``); after that the decoder is spent and
    must not be fed again.
    """

    # The longest line accepted, counted in bytes without its line ending. An
    # OpenAI chunk line is a few hundred bytes and even a whole non-streamed
    # answer fits in well under this; a peer that sends more without a line
    # break is broken or hostile, and we must not buffer it without bound.
    MAX_LINE_BYTES: int = 1024 * 1024

    # The most ``data`` one event may accumulate, in bytes: the sum of its data
    # values plus the newlines joining them. Bounds memory against a stream of
    # short ``data:`` lines that never sends the blank line ending the event.
    MAX_EVENT_BYTES: int = 4 * 1024 * 1024

    __slots__ = ("_pending", "_bom_checked", "_skip_lf", "_data", "_data_bytes",
                 "_event", "_last_id", "_retry", "_in_event")

    def __init__(self) -> None:
        self._pending = bytearray()     # bytes of the current, unterminated line
        self._bom_checked = False
        self._skip_lf = False           # previous chunk ended in "\r": drop a leading "\n"
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._event: bytes = b""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._in_event = False          # a field line was seen since the last blank line

    @property
    def has_pending(self) -> bool:
        """True if bytes of an unfinished event are buffered.

        That is: part of a line without its line ending, or field lines not
        yet closed by a blank line. A stream that ends while this is true
        ended mid-event.
        """
        return bool(self._pending) or self._in_event

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream; return the events they complete, in order."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
                if not chunk:
                    return []
        if not self._bom_checked:
            self._pending += chunk
            if len(self._pending) < 3 and _BOM.startswith(self._pending):
                return []       # could still be the start of a BOM
            self._bom_checked = True
            chunk = bytes(self._pending)
            self._pending.clear()
            if chunk.startswith(_BOM):
                chunk = chunk[3:]

        if b"\n" not in chunk and b"\r" not in chunk:
            # No line ends here: just grow the partial line. A bytearray append
            # keeps a long line arriving in many small chunks linear, not quadratic.
            self._pending += chunk
            if len(self._pending) > self.MAX_LINE_BYTES:
                raise ProtocolError(
                    f"SSE line longer than {self.MAX_LINE_BYTES} bytes")
            return []

        buf = bytes(self._pending) + chunk if self._pending else chunk
        if b"\r" in buf:
            # Every "\r" in the buffer ends a line (the partial line we keep never
            # holds one), so normalising to "\n" is exact. A final "\r" may be
            # the first half of a "\r\n" split across chunks.
            if buf[-1] == 0x0D:
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop()
        if len(buf) > self.MAX_LINE_BYTES and (
                len(rest) > self.MAX_LINE_BYTES
                or max(map(len, lines)) > self.MAX_LINE_BYTES):
            raise ProtocolError(f"SSE line longer than {self.MAX_LINE_BYTES} bytes")
        self._pending = bytearray(rest)
        return self._process(lines)

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """As ``feed``, but only each event's data, as the bytes it came as (UTF-8 not
        decoded: a JSON decoder takes bytes; event names, ids and retry are kept track
        of as ``feed`` does, and not returned).

        Hot path, once per provider read: when no event is under way and the bytes have
        no CR, each complete event of the common shape (one ``data:`` line) is cut out
        with a split, not parsed line by line; any other event, and an unfinished one
        at the end, goes through ``feed``. The data of such an event is its bytes as
        they came, which may not be valid UTF-8 (``feed`` would have replaced what is
        not): a caller that needs text decodes it with ``errors="replace"``.
        """
        if self._skip_lf or not self._bom_checked or b"\r" in chunk:
            return [_data_bytes(event) for event in self.feed(chunk)]
        out: list[bytes] = []
        if self._pending or self._in_event:
            # The event under way (a read often ends inside one) ends at the first blank
            # line: the first "\n\n" here, since what is pending holds no line break, or
            # a leading "\n" when a whole line of it is already in. ``feed`` finishes it.
            if not self._pending and chunk[:1] == b"\n":
                cut = 1
            else:
                end = chunk.find(b"\n\n")
                if end < 0:  # it does not end here
                    return [_data_bytes(event) for event in self.feed(chunk)]
                cut = end + 2
            out = [_data_bytes(event) for event in self.feed(chunk[:cut])]
            chunk = chunk[cut:]
        blocks = chunk.split(b"\n\n")
        rest = blocks.pop()
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                if len(block) > self.MAX_LINE_BYTES:
                    raise ProtocolError(f"SSE line longer than {self.MAX_LINE_BYTES} bytes")
                if len(block) - 6 > self.MAX_EVENT_BYTES:
                    raise ProtocolError(f"SSE event data longer than {self.MAX_EVENT_BYTES} bytes")
                out.append(block[6:])
                self._event, self._retry = b"", None  # as a dispatch leaves them
            elif block:
                lines = block.split(b"\n")
                if len(block) > self.MAX_LINE_BYTES and max(map(len, lines)) > self.MAX_LINE_BYTES:
                    raise ProtocolError(f"SSE line longer than {self.MAX_LINE_BYTES} bytes")
                lines.append(b"")  # the blank line that ended it
                out.extend(_data_bytes(event) for event in self._process(lines))
            else:
                self._event = b""  # a blank line with no event: as _process does
        if rest:
            out.extend(_data_bytes(event) for event in self.feed(rest))
        return out

    def _process(self, lines: list[bytes]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    self._event = b""
                self._in_event = False
                continue
            if line[0] == 0x3A:     # ":" starts a comment
                continue
            self._in_event = True
            colon = line.find(b":")
            if colon < 0:
                name, value = line, b""
            else:
                name = line[:colon]
                value = line[colon + 1:]
                if value[:1] == b" ":
                    value = value[1:]
            if name == b"data":
                # The joining "\n" counts too, so many empty data lines are bounded.
                self._data_bytes += len(value) + (1 if self._data else 0)
                if self._data_bytes > self.MAX_EVENT_BYTES:
                    raise ProtocolError(
                        f"SSE event data longer than {self.MAX_EVENT_BYTES} bytes")
                self._data.append(value)
            elif name == b"event":
                self._event = value
            elif name == b"id":
                if b"\x00" not in value:
                    self._last_id = value.decode("utf-8", "replace")
            elif name == b"retry":
                # bytes.isdigit() is ASCII-only, exactly WHATWG's "ASCII digits".
                if value.isdigit():
                    self._retry = int(value)
            # Any other field name is ignored, as WHATWG requires.
        return events

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = SSEEvent(
            data=data.decode("utf-8", "replace"),
            event=self._event.decode("utf-8", "replace") if self._event else "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._data_bytes = 0
        self._event = b""
        self._retry = None
        return event


def _data_bytes(event: SSEEvent) -> bytes:
    # "replace" decoding made it valid text; encoding it again gives UTF-8 bytes.
    return event.data.encode("utf-8")
