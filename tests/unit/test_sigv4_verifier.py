"""The SigV4 verifier, against AWS's published vectors and against botocore's signer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from urllib.parse import quote, urlsplit

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from mlstream.testing.sigv4 import canonical_query, canonical_uri, verify

# -- AWS's own test suite (aws-sig-v4-test-suite), independent of botocore ----------------

EXAMPLE_KEY = "AKIDEXAMPLE"
EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
EXAMPLE_TIME = datetime(2015, 8, 30, 12, 36, tzinfo=timezone.utc)
EXAMPLE_SCOPE = "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date"

PUBLISHED = [
    pytest.param("GET", "/", "", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31", id="get-vanilla"),
    pytest.param(
        "GET",
        "/",
        "Param2=value2&Param1=value1",
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        id="get-vanilla-query-order-key-case",
    ),
    pytest.param("POST", "/", "", "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b", id="post-vanilla"),
    pytest.param("GET", "/ሴ", "", "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85", id="get-utf8"),
]


@pytest.mark.parametrize("method, path, query, signature", PUBLISHED)
def test_accepts_the_published_aws_vectors(method, path, query, signature):
    headers = {
        "Host": "example.amazonaws.com",
        "X-Amz-Date": "20150830T123600Z",
        "Authorization": f"AWS4-HMAC-SHA256 {EXAMPLE_SCOPE}, Signature={signature}",
    }
    result = verify(
        method,
        path,
        query,
        headers,
        b"",
        access_key=EXAMPLE_KEY,
        secret_key=EXAMPLE_SECRET,
        region="us-east-1",
        service="service",
        now=EXAMPLE_TIME,
    )
    assert result.ok, result.reason
    assert result.reason == ""


CANONICAL_URIS = [
    pytest.param("", "/", id="empty"),
    pytest.param("/", "/", id="root"),
    pytest.param(
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
        "/model/anthropic.claude-3-haiku-20240307-v1%253A0/converse-stream",
        id="bedrock-model-id-encoded-twice",
    ),
    pytest.param("/model/a:0/converse", "/model/a%3A0/converse", id="bare-colon-encoded-once"),
    pytest.param("/a b/c+d", "/a%20b/c%2Bd", id="space-and-plus"),
    pytest.param("/-_.~AZaz09", "/-_.~AZaz09", id="unreserved-kept"),
    pytest.param("/a/./b/../c", "/a/c", id="dot-segments"),
    pytest.param("//a//b/", "/a/b/", id="empty-segments-trailing-slash"),
    pytest.param("/ሴ", "/%E1%88%B4", id="utf8"),
]


@pytest.mark.parametrize("raw, expected", CANONICAL_URIS)
def test_canonical_uri(raw, expected):
    assert canonical_uri(raw) == expected


CANONICAL_QUERIES = [
    pytest.param("", "", id="empty"),
    pytest.param("b=2&a=1&A=0", "A=0&a=1&b=2", id="sorted-by-name"),
    pytest.param("a=2&a=1", "a=1&a=2", id="repeats-sorted-by-value"),
    pytest.param("k=a%20b&x=%7e", "k=a%20b&x=~", id="re-encoded"),
    pytest.param("flag", "flag=", id="no-value"),
]


@pytest.mark.parametrize("raw, expected", CANONICAL_QUERIES)
def test_canonical_query(raw, expected):
    assert canonical_query(raw) == expected


# -- requests signed by botocore ------------------------------------------------------

ACCESS_KEY = "AKIDFAKEBEDROCK"
SECRET_KEY = "fake-secret-key"
REGION = "us-east-1"
MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
SIGNED_AT = datetime(2024, 3, 7, 12, 0, 0, tzinfo=timezone.utc)
HOST = "127.0.0.1:8443"
BODY = json.dumps({"messages": [{"role": "user", "content": [{"text": "Who is Hamlet?"}]}]}).encode()


class _HostlessSigV4(SigV4Auth):
    """A signer that leaves ``host`` out of the signed headers (a real signer bug)."""

    def headers_to_sign(self, request):
        headers = super().headers_to_sign(request)
        del headers["host"]
        return headers


@dataclass
class Signed:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    request: AWSRequest = field(repr=False)


def sign(
    *,
    monkeypatch: pytest.MonkeyPatch,
    path: str | None = None,
    query: str = "",
    body: bytes = BODY,
    secret_key: str = SECRET_KEY,
    access_key: str = ACCESS_KEY,
    token: str | None = None,
    region: str = REGION,
    service: str = "bedrock",
    signer: type[SigV4Auth] = SigV4Auth,
    extra_headers: dict[str, str] | None = None,
) -> Signed:
    """Sign a Bedrock-style request with botocore at SIGNED_AT and return it as it
    would arrive: the path as sent on the wire, plus the Host header the HTTP client adds."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: SIGNED_AT.replace(tzinfo=None))
    if path is None:
        path = f"/model/{quote(MODEL_ID, safe='')}/converse-stream"
    url = f"http://{HOST}{path}" + (f"?{query}" if query else "")
    headers = {"Content-Type": "application/json", **(extra_headers or {})}
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    signer(Credentials(access_key, secret_key, token), service, region).add_auth(request)
    wire_headers = {"Host": HOST, **dict(request.headers.items())}
    return Signed("POST", urlsplit(url).path, query, wire_headers, body, request)


def check(signed: Signed, **overrides):
    arguments = dict(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        service="bedrock",
        now=SIGNED_AT + timedelta(seconds=30),
    )
    arguments.update(overrides)
    return verify(signed.method, signed.path, signed.query, signed.headers, signed.body, **arguments)


def test_the_wire_path_carries_the_colon_encoded_once(monkeypatch):
    signed = sign(monkeypatch=monkeypatch)
    assert signed.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"


ACCEPTED = [
    pytest.param({}, {}, id="plain"),
    pytest.param({"query": "b=2&a=1"}, {}, id="query-string"),
    pytest.param({"token": "session-token"}, {"session_token": "session-token"}, id="session-token"),
    pytest.param({"body": b""}, {}, id="empty-body"),
    pytest.param({"extra_headers": {"X-Custom": "  spaced   value  "}}, {}, id="header-whitespace-trimmed"),
    pytest.param({"path": "/model/plain-model/converse"}, {}, id="model-id-without-colon"),
]


@pytest.mark.parametrize("sign_args, verify_args", ACCEPTED)
def test_accepts_requests_signed_by_botocore(monkeypatch, sign_args, verify_args):
    result = check(sign(monkeypatch=monkeypatch, **sign_args), **verify_args)
    assert result.ok, result.reason


class _RecordingSigV4(SigV4Auth):
    """botocore's signer, keeping the canonical request it signed."""

    signed_canonical_requests: list[str] = []

    def canonical_request(self, request):
        canonical = super().canonical_request(request)
        self.signed_canonical_requests.append(canonical)
        return canonical


def test_canonical_request_matches_the_one_botocore_signed(monkeypatch):
    monkeypatch.setattr(_RecordingSigV4, "signed_canonical_requests", [])
    signed = sign(monkeypatch=monkeypatch, signer=_RecordingSigV4)
    assert check(signed).canonical_request == _RecordingSigV4.signed_canonical_requests[-1]


def _replace(signed: Signed, **changes) -> Signed:
    values = {**signed.__dict__, **changes}
    return Signed(**values)


def _with_header(signed: Signed, name: str, value: str | None) -> Signed:
    headers = {k: v for k, v in signed.headers.items() if k.lower() != name.lower()}
    if value is not None:
        headers[name] = value
    return _replace(signed, headers=headers)


def _refusals(monkeypatch):
    good = sign(monkeypatch=monkeypatch)
    return {
        "wrong-secret": (sign(monkeypatch=monkeypatch, secret_key="not-the-secret"), {}),
        "altered-body": (_replace(good, body=good.body.replace(b"Hamlet", b"Ophelia")), {}),
        "altered-path-colon-not-encoded": (
            _replace(good, path="/model/anthropic.claude-3-haiku-20240307-v1:0/converse-stream"),
            {},
        ),
        "altered-path-other-operation": (
            _replace(good, path=good.path.replace("converse-stream", "converse")),
            {},
        ),
        "altered-signed-header": (_with_header(good, "Content-Type", "text/plain"), {}),
        "unsigned-host": (sign(monkeypatch=monkeypatch, signer=_HostlessSigV4), {}),
        "expired": (good, {"now": SIGNED_AT + timedelta(minutes=6)}),
        "from-the-future": (good, {"now": SIGNED_AT - timedelta(minutes=6)}),
        "wrong-region": (sign(monkeypatch=monkeypatch, region="us-west-2"), {}),
        "wrong-service-bedrock-runtime": (sign(monkeypatch=monkeypatch, service="bedrock-runtime"), {}),
        "unknown-access-key": (sign(monkeypatch=monkeypatch, access_key="AKIDSOMEONEELSE"), {}),
        "no-authorization": (_with_header(good, "Authorization", None), {}),
        "garbled-authorization": (_with_header(good, "Authorization", "AWS4-HMAC-SHA256 Credential"), {}),
        "session-token-missing": (good, {"session_token": "session-token"}),
        "session-token-wrong": (
            sign(monkeypatch=monkeypatch, token="other-token"),
            {"session_token": "session-token"},
        ),
        "session-token-unexpected": (sign(monkeypatch=monkeypatch, token="session-token"), {}),
        "content-sha256-lies": (
            sign(monkeypatch=monkeypatch, extra_headers={"X-Amz-Content-SHA256": "0" * 64}),
            {},
        ),
    }


REFUSED = [
    ("wrong-secret", "InvalidSignatureException", "signature mismatch"),
    ("altered-body", "InvalidSignatureException", "signature mismatch"),
    ("altered-path-colon-not-encoded", "InvalidSignatureException", "signature mismatch"),
    ("altered-path-other-operation", "InvalidSignatureException", "signature mismatch"),
    ("altered-signed-header", "InvalidSignatureException", "signature mismatch"),
    ("unsigned-host", "InvalidSignatureException", "'host' header must be signed"),
    ("expired", "InvalidSignatureException", "Signature expired"),
    ("from-the-future", "InvalidSignatureException", "not yet current"),
    ("wrong-region", "InvalidSignatureException", "region 'us-west-2' does not match 'us-east-1'"),
    (
        "wrong-service-bedrock-runtime",
        "InvalidSignatureException",
        "service 'bedrock-runtime' does not match 'bedrock'",
    ),
    ("unknown-access-key", "UnrecognizedClientException", "unknown access key 'AKIDSOMEONEELSE'"),
    ("no-authorization", "MissingAuthenticationTokenException", "missing Authorization"),
    ("garbled-authorization", "IncompleteSignatureException", "malformed Authorization"),
    ("session-token-missing", "UnrecognizedClientException", "missing x-amz-security-token"),
    ("session-token-wrong", "UnrecognizedClientException", "security token included in the request is invalid"),
    ("session-token-unexpected", "UnrecognizedClientException", "unexpected x-amz-security-token"),
    ("content-sha256-lies", "InvalidSignatureException", "x-amz-content-sha256 does not match"),
]


@pytest.mark.parametrize("case, error_type, reason", REFUSED, ids=[case for case, _, _ in REFUSED])
def test_refuses_with_a_clear_reason(monkeypatch, case, error_type, reason):
    signed, verify_args = _refusals(monkeypatch)[case]
    result = check(signed, **verify_args)
    assert not result.ok
    assert result.error_type == error_type
    assert reason in result.reason


def test_a_mismatch_reports_what_the_verifier_computed(monkeypatch):
    signed = sign(monkeypatch=monkeypatch, secret_key="not-the-secret")
    result = check(signed)
    assert "/model/anthropic.claude-3-haiku-20240307-v1%253A0/converse-stream" in result.canonical_request
    assert result.string_to_sign.startswith("AWS4-HMAC-SHA256\n20240307T120000Z\n20240307/us-east-1/bedrock/")


def test_skew_limit_is_configurable(monkeypatch):
    signed = sign(monkeypatch=monkeypatch)
    later = SIGNED_AT + timedelta(minutes=10)
    assert not check(signed, now=later).ok
    assert check(signed, now=later, max_skew_seconds=900).ok


def test_naive_now_is_taken_as_utc(monkeypatch):
    signed = sign(monkeypatch=monkeypatch)
    assert check(signed, now=SIGNED_AT.replace(tzinfo=None)).ok
