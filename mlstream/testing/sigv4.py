"""Verify AWS Signature Version 4 on a received request, as an AWS front end would.

Written from the AWS SigV4 documentation with ``hashlib``/``hmac`` only, never by
calling botocore, so that checking a request signed by botocore (or by our own gateway)
is a real test of the signer rather than the signer agreeing with itself.

The steps, for a non-S3 service such as ``bedrock``::

    Authorization: AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/bedrock/aws4_request,
                   SignedHeaders=content-type;host;x-amz-date, Signature=<64 hex>

    canonical request = METHOD \\n
                        canonical URI    (the path as received, normalised, URI-encoded AGAIN)
                        canonical query  (pairs URI-encoded, sorted) \\n
                        canonical headers (signed ones: lower-case name ':' trimmed value \\n) \\n
                        signed headers   \\n
                        payload hash     (x-amz-content-sha256, else hex sha256 of the body)
    string to sign    = "AWS4-HMAC-SHA256" \\n x-amz-date \\n scope \\n hex sha256(canonical request)
    signing key       = HMAC chain over "AWS4"+secret: date, region, service, "aws4_request"
    signature         = hex HMAC(signing key, string to sign)

The double encoding is the trap this module exists to catch: a Bedrock model id such as
``anthropic.claude-3-haiku-20240307-v1:0`` goes on the wire as ``...v1%3A0`` and is
signed as ``...v1%253A0``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote, unquote_to_bytes

__all__ = [
    "ALGORITHM",
    "SIGNATURE_MISMATCH_MESSAGE",
    "VerifyResult",
    "canonical_query",
    "canonical_uri",
    "verify",
]

ALGORITHM = "AWS4-HMAC-SHA256"
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
#: What AWS answers when the recomputed signature differs from the one sent.
SIGNATURE_MISMATCH_MESSAGE = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)

# Error codes AWS front ends put in x-amzn-ErrorType for authentication failures.
MISSING_TOKEN = "MissingAuthenticationTokenException"
INCOMPLETE_SIGNATURE = "IncompleteSignatureException"
UNRECOGNIZED_CLIENT = "UnrecognizedClientException"
INVALID_SIGNATURE = "InvalidSignatureException"

_SIGNATURE_RE = re.compile(r"[0-9a-f]{64}")
_HEX_SHA256_RE = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of :func:`verify`.

    ``reason`` is a human sentence saying what failed ("" when ``ok``). ``error_type``
    is the AWS error code a real front end would answer with. ``canonical_request`` and
    ``string_to_sign`` are what the verifier computed (set once parsing got that far),
    for comparing with a signer's debug log.
    """

    ok: bool
    reason: str
    error_type: str = ""
    canonical_request: str = ""
    string_to_sign: str = ""


def verify(
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    session_token: str | None = None,
    now: datetime | None = None,
    max_skew_seconds: int = 300,
) -> VerifyResult:
    """Check the SigV4 ``Authorization`` header of one received request.

    ``raw_path`` and ``query`` are exactly as they arrived in the request line (still
    percent-encoded); ``headers`` as received (any case; duplicates joined with ``,``);
    ``body`` the bytes received. When ``session_token`` is given the request must carry
    it in a signed ``x-amz-security-token``; when it is None a token is refused, as
    AWS refuses a token that does not belong to the key. ``now`` defaults to the current
    UTC time (a naive value is taken as UTC).
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    authorization = lowered.get("authorization")
    if authorization is None:
        return _fail(MISSING_TOKEN, "missing Authorization header (the request is not signed)")
    fields = _parse_authorization(authorization)
    if isinstance(fields, str):
        return _fail(INCOMPLETE_SIGNATURE, fields)
    credential, signed_header_names, signature = fields

    scope_parts = credential.split("/")
    if len(scope_parts) != 5 or scope_parts[4] != "aws4_request":
        return _fail(
            INCOMPLETE_SIGNATURE,
            f"Credential {credential!r} is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request",
        )
    given_key, scope_date, scope_region, scope_service, _ = scope_parts
    if given_key != access_key:
        return _fail(UNRECOGNIZED_CLIENT, f"unknown access key {given_key!r}")
    if scope_region != region:
        return _fail(
            INVALID_SIGNATURE,
            f"credential scope region {scope_region!r} does not match {region!r}",
        )
    if scope_service != service:
        return _fail(
            INVALID_SIGNATURE,
            f"credential scope service {scope_service!r} does not match {service!r}",
        )

    if signed_header_names != sorted(set(signed_header_names)) or any(
        name != name.lower() for name in signed_header_names
    ):
        return _fail(
            INCOMPLETE_SIGNATURE,
            f"SignedHeaders {';'.join(signed_header_names)!r} must be lower-case, sorted, unique",
        )
    for required in ("host", "x-amz-date"):
        if required not in signed_header_names:
            return _fail(INVALID_SIGNATURE, f"the {required!r} header must be signed")
    for name in signed_header_names:
        if name not in lowered:
            return _fail(INVALID_SIGNATURE, f"signed header {name!r} is not in the request")

    token = lowered.get("x-amz-security-token")
    if session_token is not None:
        if token is None:
            return _fail(UNRECOGNIZED_CLIENT, "missing x-amz-security-token (session token)")
        if "x-amz-security-token" not in signed_header_names:
            return _fail(INVALID_SIGNATURE, "the 'x-amz-security-token' header must be signed")
        if not hmac.compare_digest(token.encode(), session_token.encode()):
            return _fail(UNRECOGNIZED_CLIENT, "the security token included in the request is invalid")
    elif token is not None:
        return _fail(UNRECOGNIZED_CLIENT, "unexpected x-amz-security-token for a long-term access key")

    amz_date = lowered["x-amz-date"].strip()
    try:
        signed_at = datetime.strptime(amz_date, AMZ_DATE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return _fail(INCOMPLETE_SIGNATURE, f"x-amz-date {amz_date!r} is not YYYYMMDDTHHMMSSZ")
    if scope_date != amz_date[:8]:
        return _fail(
            INVALID_SIGNATURE,
            f"credential scope date {scope_date!r} does not match x-amz-date {amz_date!r}",
        )
    current = now if now is not None else datetime.now(timezone.utc)
    if current.tzinfo is None:
        current = current.replace(tzinfo=timezone.utc)
    skew = (signed_at - current).total_seconds()
    if skew < -max_skew_seconds:
        return _fail(
            INVALID_SIGNATURE,
            f"Signature expired: {amz_date} is more than {max_skew_seconds} s before "
            f"{current.strftime(AMZ_DATE_FORMAT)}",
        )
    if skew > max_skew_seconds:
        return _fail(
            INVALID_SIGNATURE,
            f"Signature not yet current: {amz_date} is more than {max_skew_seconds} s after "
            f"{current.strftime(AMZ_DATE_FORMAT)}",
        )

    content_sha256 = lowered.get("x-amz-content-sha256")
    if content_sha256 is not None:
        payload_hash = content_sha256.strip()
        # A declared digest must be the body's (S3 answers XAmzContentSHA256Mismatch);
        # a non-digest value such as UNSIGNED-PAYLOAD is signed literally.
        if _HEX_SHA256_RE.fullmatch(payload_hash) and payload_hash.lower() != _sha256_hex(body):
            return _fail(INVALID_SIGNATURE, "x-amz-content-sha256 does not match the body received")
    else:
        payload_hash = _sha256_hex(body)

    if "?" in raw_path and not query:
        raw_path, _, query = raw_path.partition("?")
    canonical_request = "\n".join(
        [
            method.upper(),
            canonical_uri(raw_path),
            canonical_query(query),
            "".join(f"{name}:{_trim_all(lowered[name])}\n" for name in signed_header_names),
            ";".join(signed_header_names),
            payload_hash,
        ]
    )
    scope = f"{scope_date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join([ALGORITHM, amz_date, scope, _sha256_hex(canonical_request.encode("utf-8"))])
    key = _signing_key(secret_key, scope_date, region, service)
    expected = hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        return VerifyResult(
            ok=False,
            reason="signature mismatch (wrong secret key, or the request differs from what was signed)",
            error_type=INVALID_SIGNATURE,
            canonical_request=canonical_request,
            string_to_sign=string_to_sign,
        )
    return VerifyResult(
        ok=True,
        reason="",
        canonical_request=canonical_request,
        string_to_sign=string_to_sign,
    )


def canonical_uri(raw_path: str) -> str:
    """Return the canonical URI of a non-S3 request path as it arrived on the wire.

    Dot segments and empty segments are removed (RFC 3986 normalisation, which AWS
    applies to every service but S3), then each segment is percent-encoded as it
    stands, so an escape already in the path is encoded a second time (``%3A`` →
    ``%253A``). Characters outside ASCII are taken as UTF-8.
    """
    if not raw_path:
        return "/"
    segments: list[str] = []
    for segment in raw_path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    encoded = "/".join(_uri_encode(segment.encode("utf-8", "surrogateescape")) for segment in segments)
    trailing = "/" if raw_path.endswith("/") and segments else ""
    return "/" + encoded + trailing


def canonical_query(query: str) -> str:
    """Return the canonical query string: each name and value decoded, re-encoded
    with only unreserved characters left bare, and the pairs sorted by name then value."""
    pairs: list[tuple[str, str]] = []
    for item in query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((_uri_encode(unquote_to_bytes(name)), _uri_encode(unquote_to_bytes(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _parse_authorization(value: str) -> tuple[str, list[str], str] | str:
    """Split the Authorization header into (credential, signed header names, signature),
    or return the reason it cannot be."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return f"Authorization algorithm must be {ALGORITHM}, got {algorithm!r}"
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, field_value = part.strip().partition("=")
        if not sep:
            return f"malformed Authorization component {part.strip()!r}"
        fields[name] = field_value.strip()
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        return f"Authorization header is missing {', '.join(missing)}"
    signature = fields["Signature"]
    if not _SIGNATURE_RE.fullmatch(signature):
        return "Signature must be 64 lower-case hex digits"
    return fields["Credential"], fields["SignedHeaders"].split(";"), signature


def _uri_encode(raw: bytes) -> str:
    # Only RFC 3986 unreserved characters stay bare: ``quote`` always keeps letters,
    # digits and "_.-~", and safe="" adds nothing (not even "/").
    return quote(raw, safe="")


def _trim_all(value: str) -> str:
    # Trim the ends and collapse inner runs of whitespace to one space.
    return " ".join(value.split())


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _signing_key(secret_key: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret_key).encode("utf-8")
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def _fail(error_type: str, reason: str) -> VerifyResult:
    return VerifyResult(ok=False, reason=reason, error_type=error_type)
