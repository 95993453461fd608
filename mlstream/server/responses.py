"""JSON replies on the wire.

How a reply is written is OpenSearch's, asked for per request (``ReplyFormat``):
``filter_path``, ``pretty``, ``error_trace``, and gzip when ``Accept-Encoding``
admits it. A request that asks for none of them gets ``PLAIN``, and nothing here
runs for it.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, replace
from typing import Any

from ..wire.filterpath import FilterPath, parse_filter_path
from ..wire.framing import accepts_gzip
from ..speedups import dumps_json
from .routing import query_flag

# OpenSearch's http.compression_level default: most of the gain for a fraction of level 9's time.
GZIP_LEVEL = 3
GZIP_WBITS = 31  # zlib's gzip wrapper


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    """How the client asked its replies to be written."""

    pretty: bool = False
    filter_path: FilterPath | None = None
    error_trace: bool = False
    gzip: bool = False


PLAIN = ReplyFormat()


def without_filter(fmt: ReplyFormat) -> ReplyFormat:
    return replace(fmt, filter_path=None)


def reply_format(query: dict[str, str], accept_encoding: str | None) -> ReplyFormat:
    """The format a request's query parameters and ``Accept-Encoding`` ask for.

    ``human`` is accepted as OpenSearch accepts it; mlstream's documents hold no byte
    sizes or durations that it would spell out, so it changes nothing.
    """
    expression = query.get("filter_path")
    for name in ("human", "pretty", "error_trace"):
        query_flag(query, name)  # an invalid value is refused, as OpenSearch does
    return ReplyFormat(pretty=query_flag(query, "pretty"),
                       filter_path=parse_filter_path(expression) if expression else None,
                       error_trace=query_flag(query, "error_trace"),
                       gzip=accepts_gzip(accept_encoding))


def reply_payload(body: Any, fmt: ReplyFormat) -> bytes:
    """A JSON body as the client asked for it, before any content coding."""
    if fmt.filter_path is not None:
        body = fmt.filter_path.apply(body)
    return json_bytes(body, pretty=fmt.pretty)


def gzip_bytes(payload: bytes) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    return compressor.compress(payload) + compressor.flush()


def json_bytes(body: Any, *, pretty: bool = False) -> bytes:
    if pretty:  # OpenSearch's pretty printer: two spaces, " : " between key and value
        return utf8(json.dumps(body, indent=2, separators=(",", " : "), ensure_ascii=False)) + b"\n"
    return dumps_json(body)


def utf8(text: str) -> bytes:
    # A lone surrogate (JSON allows "\ud800") cannot be UTF-8; it can only sit inside a
    # JSON string, where backslashreplace writes exactly its JSON escape back.
    return text.encode("utf-8", "backslashreplace")
