"""A fake AWS STS on loopback: ``AssumeRole`` over the query protocol, SigV4 checked, and
``AssumeRoleWithWebIdentity`` (unsigned; its token checked), as botocore calls them.

It hands out the temporary credentials it was given (so a fake provider that accepts
those can check that a role's credentials, not the source's, signed its calls), each
valid for ``lifetime_seconds``. botocore's STS client works against it unchanged when
pointed at it (``AWS_ENDPOINT_URL_STS``, or ``endpoint_url``)::

    with FakeSTS(issued=("ASIAFAKE", "secret", "token")) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        ...
        assert sts.stats.assume_role_calls == 1

Errors are STS's XML (``AccessDenied`` 403 for a role not in ``roles``, when given).
With ``echo_canonical_request`` a signature mismatch's message carries the canonical
request, as AWS's ``SignatureDoesNotMatch`` does: the signed headers, among them
``x-amz-security-token``.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from . import sigv4
from .fake_server import BadBody, FakeHandler, FakeServer
from .stats import CounterStats

__all__ = ["FakeSTS", "FakeSTSStats"]

_NAMESPACE = "https://sts.amazonaws.com/doc/2011-06-15/"


class FakeSTSStats(CounterStats):
    """``assume_role_calls`` (answered with credentials), ``refusals`` (signature or role),
    and the requests' parsed forms (``requests``)."""

    COUNTERS = ("assume_role_calls", "refusals", "client_disconnects", "connections_closed")


class _Handler(FakeHandler):
    server_version = "FakeSTS/1.0"
    fake: FakeSTS

    def serve(self) -> None:
        fake = self.fake
        try:
            raw = self.read_body()
        except BadBody as error:
            self._error(error.status, "InvalidParameterValue", error.reason)
            return
        form = {name: values[0] for name, values in parse_qs(raw.decode("utf-8", "replace")).items()}
        fake.stats._record(form)
        path, _, query = self.path.partition("?")
        headers = {name.lower(): value for name, value in self.headers.items()}
        if form.get("Action") == "AssumeRoleWithWebIdentity":  # unsigned: the token is the proof
            if fake.web_identity_token is None or form.get("WebIdentityToken") != fake.web_identity_token:
                fake.stats._add(refusals=1)
                self._error(400, "InvalidIdentityToken", "The web identity token that was passed is not valid")
                return
            self._credentials("AssumeRoleWithWebIdentity", form)
            return
        result = sigv4.verify(self.command, path, query, headers, raw, access_key=fake.source_access_key,
                              secret_key=fake.source_secret_key, region=fake.region, service="sts",
                              session_token=fake.source_session_token)
        if not result.ok:
            fake.stats._add(refusals=1)
            reason = result.reason
            if fake.echo_canonical_request and result.canonical_request:
                reason += f" The Canonical String for this request should have been '{result.canonical_request}'"
            self._error(403, result.error_type or "SignatureDoesNotMatch", reason)
            return
        if form.get("Action") != "AssumeRole":
            self._error(400, "InvalidAction", f"Could not find operation {form.get('Action')}")
            return
        self._credentials("AssumeRole", form)

    def _credentials(self, action: str, form: dict[str, str]) -> None:
        fake = self.fake
        role, session = form.get("RoleArn", ""), form.get("RoleSessionName", "")
        if fake.roles is not None and role not in fake.roles:
            fake.stats._add(refusals=1)
            self._error(403, "AccessDenied", f"User is not authorized to perform: sts:AssumeRole on resource: {role}")
            return
        access_key, secret_key, token = fake.issued
        expiration = datetime.now(timezone.utc) + timedelta(seconds=fake.lifetime_seconds)
        role_name = role.rsplit("/", 1)[-1]
        body = (
            f'<{action}Response xmlns="{_NAMESPACE}"><{action}Result>'
            f"<AssumedRoleUser><AssumedRoleId>AROAFAKE:{escape(session)}</AssumedRoleId>"
            f"<Arn>arn:aws:sts::123456789012:assumed-role/{escape(role_name)}/{escape(session)}</Arn>"
            f"</AssumedRoleUser><Credentials><AccessKeyId>{escape(access_key)}</AccessKeyId>"
            f"<SecretAccessKey>{escape(secret_key)}</SecretAccessKey><SessionToken>{escape(token)}</SessionToken>"
            f"<Expiration>{expiration.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration></Credentials>"
            f"</{action}Result><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            f"</{action}Response>"
        ).encode()
        fake.stats._add(assume_role_calls=1)  # either action
        self._send(200, body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, (
            f'<ErrorResponse xmlns="{_NAMESPACE}"><Error><Type>Sender</Type><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        ).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.send(body)


class FakeSTS(FakeServer):
    """STS on loopback. ``source_*``: the credentials a caller must sign with;
    ``issued``: the (access key, secret key, session token) handed out; ``roles``: the
    role ARNs that may be assumed (None: any); ``web_identity_token``: the token
    AssumeRoleWithWebIdentity accepts (None: none); ``echo_canonical_request``: a
    signature mismatch's message echoes the canonical request, as AWS's does."""

    handler = _Handler
    stats: FakeSTSStats

    def __init__(self, *, issued: tuple[str, str, str], source_access_key: str = "AKIDFAKESOURCE",
                 source_secret_key: str = "fake-source-secret", source_session_token: str | None = None,
                 roles: frozenset[str] | None = None, region: str = "us-east-1", lifetime_seconds: int = 3600,
                 web_identity_token: str | None = None, echo_canonical_request: bool = False, host: str = "127.0.0.1", port: int = 0) -> None:
        self.web_identity_token = web_identity_token
        self.echo_canonical_request = echo_canonical_request
        self.issued = issued
        self.source_access_key = source_access_key
        self.source_secret_key = source_secret_key
        self.source_session_token = source_session_token
        self.roles = roles
        self.region = region
        self.lifetime_seconds = lifetime_seconds
        super().__init__(host=host, port=port, stats=FakeSTSStats())
