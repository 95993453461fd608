"""Request body content codings and Accept-Encoding, pure: tables and a bomb. No sockets."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from mlstream.wire.framing import MAX_GZIP_MEMBERS, accepts_gzip, decode_content

LIMIT = 1000
BODY = b'{"parameters": {"inputs": "hello"}}'


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize("encoding, data", [
    ("gzip", gzip.compress(BODY)),
    ("GZip", gzip.compress(BODY)),
    ("x-gzip", gzip.compress(BODY)),
    ("deflate", zlib.compress(BODY)),                 # RFC 9110: the zlib format
    ("deflate", raw_deflate(BODY)),                   # what some clients send instead
    ("identity", BODY),
    ("", BODY),
    ("gzip, identity", gzip.compress(BODY)),
    ("deflate, gzip", gzip.compress(zlib.compress(BODY))),  # undone last first
    ("gzip", gzip.compress(BODY[:10]) + gzip.compress(BODY[10:])),  # two members
], ids=["gzip", "case", "x-gzip", "deflate-zlib", "deflate-raw", "identity", "empty", "gzip-identity",
        "stacked", "members"])
def test_decoded(encoding: str, data: bytes) -> None:
    assert decode_content(data, encoding, LIMIT) == BODY


@pytest.mark.parametrize("encoding, data, error", [
    ("br", BODY, UnsupportedMediaType),
    ("compress", BODY, UnsupportedMediaType),
    ("gzip", BODY, BadRequest),                                  # not gzip at all
    ("gzip", gzip.compress(BODY)[:-6], BadRequest),              # truncated
    ("gzip", gzip.compress(BODY) + b"junk", BadRequest),         # trailing garbage
    ("deflate", b"\x00\x01\x02 not deflate", BadRequest),
    ("deflate", zlib.compress(BODY) + b"x", BadRequest),
    ("gzip", gzip.compress(b"x" * (LIMIT + 1)), PayloadTooLarge),  # one byte over
    ("gzip", gzip.compress(b"x") * (MAX_GZIP_MEMBERS + 1), BadRequest),
], ids=["br", "compress", "not-gzip", "truncated", "trailing", "not-deflate", "deflate-trailing", "over-limit",
        "too-many-members"])
def test_refused(encoding: str, data: bytes, error: type) -> None:
    with pytest.raises(error):
        decode_content(data, encoding, LIMIT)


def test_exactly_the_limit_is_accepted() -> None:
    assert decode_content(gzip.compress(b"x" * LIMIT), "gzip", LIMIT) == b"x" * LIMIT


def test_a_bomb_is_refused_without_inflating_it() -> None:
    """1 GiB of zeros in about 1 MB: refused after producing at most limit + 1 bytes."""
    compressor = zlib.compressobj(wbits=31)
    block = b"\0" * (1 << 20)
    bomb = b"".join(compressor.compress(block) for _ in range(1024)) + compressor.flush()
    assert len(bomb) < 2 << 20
    with pytest.raises(PayloadTooLarge):
        decode_content(bomb, "gzip", 10 * 1024 * 1024)


def test_members_count_together_against_the_limit() -> None:
    data = gzip.compress(b"x" * 600) + gzip.compress(b"y" * 600)
    with pytest.raises(PayloadTooLarge):
        decode_content(data, "gzip", LIMIT)


@given(st.binary(max_size=2000), st.sampled_from(["gzip", "deflate"]))
def test_any_bytes_decode_or_fail_cleanly(data: bytes, encoding: str) -> None:
    try:
        decode_content(data, encoding, LIMIT)
    except (BadRequest, PayloadTooLarge):
        pass


@given(st.binary(max_size=LIMIT))
def test_round_trip(data: bytes) -> None:
    assert decode_content(gzip.compress(data), "gzip", LIMIT) == data
    assert decode_content(zlib.compress(data), "deflate", LIMIT) == data


@pytest.mark.parametrize("header, expected", [
    (None, False),
    ("", False),
    ("gzip", True),
    ("gzip, deflate", True),
    ("deflate", False),
    ("identity", False),
    ("GZIP", True),
    ("x-gzip", True),
    ("*", True),
    ("gzip;q=0", False),
    ("gzip; q=0.5", True),
    ("gzip;q=0, *", False),          # a named coding wins over *
    ("*;q=0, gzip", True),
    ("br, gzip;q=0.1", True),
    ("gzip;q=oops", False),
], ids=["none", "empty", "gzip", "list", "deflate-only", "identity", "case", "x-gzip", "star", "q0", "q-half",
        "named-beats-star", "star-refused", "low-q", "bad-q"])
def test_accepts_gzip(header, expected) -> None:
    assert accepts_gzip(header) is expected


def test_more_stacked_codings_than_the_bound_are_refused_before_any_work() -> None:
    from mlstream.errors import UnsupportedMediaType
    from mlstream.wire.framing import MAX_CONTENT_CODINGS

    data = BODY
    for _ in range(MAX_CONTENT_CODINGS):
        data = gzip.compress(data)
    assert decode_content(data, ", ".join(["gzip"] * MAX_CONTENT_CODINGS), LIMIT) == BODY
    with pytest.raises(UnsupportedMediaType, match="stacks more than"):
        decode_content(gzip.compress(data), ", ".join(["gzip"] * (MAX_CONTENT_CODINGS + 1)), LIMIT)
