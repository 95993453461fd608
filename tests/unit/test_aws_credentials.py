"""The credential chain's answer is kept: found credentials for good (botocore refreshes
them), none found for NO_CREDENTIALS_RECHECK_SECONDS, so a host without AWS setup does not
wait for the metadata service's timeout on every call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from botocore.credentials import Credentials

from mlstream.upstream import aws_credentials
from mlstream.upstream.aws_credentials import (
    MAX_ASSUMED_ROLES,
    NO_CREDENTIALS_RECHECK_SECONDS,
    AwsCredentials,
)
from mlstream.models.connectors import Connector, parse_connector
from mlstream.errors import UpstreamError

CONNECTOR = parse_connector({
    "name": "keyless", "protocol": "aws_sigv4", "credential": {},
    "parameters": {"region": "us-east-1", "service_name": "bedrock"},
    "actions": [{"action_type": "predict", "method": "POST",
                 "url": "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse",
                 "request_body": "{}"}],
})


class CountingSession:
    """botocore's session as the chain lookup uses it: ``get_credentials`` counted."""

    def __init__(self) -> None:
        self.lookups = 0
        self.found: Credentials | None = None

    def get_credentials(self) -> Credentials | None:
        self.lookups += 1
        return self.found


def test_no_credentials_is_remembered_for_a_while_then_looked_up_again(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(aws_credentials.time, "monotonic", lambda: now[0])
    credentials = AwsCredentials()
    session = CountingSession()
    credentials._session = session
    for _ in range(3):
        with pytest.raises(UpstreamError, match="no AWS credentials"):
            credentials.for_connector(CONNECTOR)
    assert session.lookups == 1
    session.found = Credentials("AKIDLATER", "later-secret")
    now[0] += NO_CREDENTIALS_RECHECK_SECONDS
    assert credentials.for_connector(CONNECTOR).access_key == "AKIDLATER"
    now[0] += 10 * NO_CREDENTIALS_RECHECK_SECONDS
    assert credentials.for_connector(CONNECTOR).access_key == "AKIDLATER"
    assert session.lookups == 2  # found credentials are kept: botocore refreshes them itself


def role_connector(secret_key: str) -> Connector:
    return parse_connector({
        "name": "role", "protocol": "aws_sigv4",
        "credential": {"access_key": "AKIDSOURCE", "secret_key": secret_key, "roleArn": "arn:aws:iam::1:role/r"},
        "parameters": {"region": "us-east-1", "service_name": "bedrock"},
        "actions": [{"action_type": "predict", "method": "POST",
                     "url": "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", "request_body": "{}"}],
    })


def test_assumed_roles_are_a_bounded_lru_keyed_without_secrets():
    # Nothing is fetched: a role is assumed (from STS) only when its credentials are first used.
    credentials = AwsCredentials()
    first = role_connector("source-secret-first")
    kept = credentials._role(first, credentials._source(first))
    for number in range(MAX_ASSUMED_ROLES + 10):
        connector = role_connector(f"source-secret-{number:04d}")
        credentials._role(connector, credentials._source(connector))
        assert credentials._role(first, credentials._source(first)) is kept  # recently used: kept
    assert len(credentials._roles) == MAX_ASSUMED_ROLES
    assert "source-secret" not in repr(list(credentials._roles))
    connector = role_connector("source-secret-0000")  # the least recently used: dropped, assumed anew
    assert credentials._role(connector, credentials._source(connector)) is not None
    assert len(credentials._roles) == MAX_ASSUMED_ROLES


class OverlapDetectingSession:
    """botocore's session as STS roles use it: ``create_client`` notes whether two
    threads were ever inside it at once (botocore's session is not thread-safe)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()  # guards inside and overlapped
        self.inside = 0
        self.overlapped = False
        self.second_entered = threading.Event()

    def create_client(self, service_name: str, **options: object) -> StsStandIn:
        with self._guard:
            self.inside += 1
            if self.inside > 1:
                self.overlapped = True
                self.second_entered.set()
        # Held open long enough for another thread to come in, if nothing stops it.
        self.second_entered.wait(timeout=0.5)
        with self._guard:
            self.inside -= 1
        return StsStandIn()


class StsStandIn:
    def assume_role(self, **request: object) -> dict:
        expiration = datetime.now(UTC) + timedelta(hours=1)
        return {"Credentials": {"AccessKeyId": "ASIAROLE", "SecretAccessKey": "role-secret",
                                "SessionToken": "role-token", "Expiration": expiration}}


def test_sts_clients_are_never_created_by_two_threads_at_once():
    credentials = AwsCredentials()
    session = OverlapDetectingSession()
    credentials._session = session
    connectors = [role_connector(f"source-secret-{number}") for number in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = list(pool.map(credentials.for_connector, connectors))
    assert [each.access_key for each in found] == ["ASIAROLE", "ASIAROLE"]
    assert not session.overlapped
