"""aws_sigv4 connectors without static keys: botocore's credential chain, and roles
assumed through a fake STS on loopback, refreshed before they expire."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock
from mlstream.testing.fake_sts import FakeSTS

from ..support.aws import isolate_aws_environment
from ..support.clients import Client
from ..support.connectors import bedrock_connector, maps
from ..support.connectors import bedrock_stream as stream

ROLE = "arn:aws:iam::123456789012:role/mlstream-bedrock"
TEMPORARY = ("ASIAFAKEROLE0001", "fake-role-secret-0123456789", "FwoGZXIvYXdzEFAKEROLETOKEN")
SOURCE = ("AKIDFAKESOURCE", "fake-source-secret-0123456789")
IDENTITY_TOKEN = "eyJfake.web.identity"


@pytest.fixture(autouse=True)
def _isolated_aws_environment(monkeypatch, tmp_path):
    isolate_aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def role_bedrock() -> Iterator[FakeBedrock]:
    """Bedrock accepting only the role's temporary credentials."""
    access_key, secret_key, token = TEMPORARY
    with FakeBedrock(access_key=access_key, secret_key=secret_key, session_token=token) as fake:
        yield fake


def keyless_connector(fake: FakeBedrock, **credential: str) -> dict:
    connector = bedrock_connector(fake)
    connector["credential"] = credential
    return connector


def assert_streams(client: Client, model_id: str) -> None:
    response = stream(client, model_id)
    assert response.status == 200, response.body
    assert "".join(m["content"] for m in maps(response)) == DEFAULT_TEXT


def test_keys_from_the_environment(monkeypatch, client, token_bedrock):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", token_bedrock.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", token_bedrock.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token_bedrock.session_token)
    model_id = client.model_for(keyless_connector(token_bedrock))
    assert_streams(client, model_id)
    assert token_bedrock.stats.signature_failures == 0
    # the connector as clients see it says nothing of the server's credentials
    connector_id = client.ok("GET", f"/_plugins/_ml/models/{model_id}")["connector_id"]
    assert token_bedrock.secret_key not in json.dumps(client.ok("GET", f"/_plugins/_ml/connectors/{connector_id}"))


def test_keys_from_a_profile_in_the_shared_credentials_file(monkeypatch, tmp_path, client, bedrock):
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n"
                           f"[bedrock-user]\naws_access_key_id = {bedrock.access_key}\n"
                           f"aws_secret_access_key = {bedrock.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "bedrock-user")
    assert_streams(client, client.model_for(keyless_connector(bedrock)))
    assert bedrock.stats.signature_failures == 0


def test_web_identity_token_file_as_on_kubernetes(monkeypatch, tmp_path, client, role_bedrock):
    token_file = tmp_path / "token"
    token_file.write_text(IDENTITY_TOKEN)
    with FakeSTS(issued=TEMPORARY, web_identity_token=IDENTITY_TOKEN) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        assert_streams(client, client.model_for(keyless_connector(role_bedrock)))
        [form] = sts.stats.requests
        assert form["Action"] == "AssumeRoleWithWebIdentity" and form["RoleArn"] == ROLE
    assert role_bedrock.stats.signature_failures == 0


def test_role_assumed_from_static_keys_and_reused_until_near_expiry(monkeypatch, client, role_bedrock):
    with FakeSTS(issued=TEMPORARY, source_access_key=SOURCE[0], source_secret_key=SOURCE[1],
                 roles=frozenset({ROLE})) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        model_id = client.model_for(keyless_connector(role_bedrock, access_key=SOURCE[0], secret_key=SOURCE[1],
                                                      roleArn=ROLE, externalId="ext-42"))
        assert_streams(client, model_id)
        assert_streams(client, model_id)
        [form] = sts.stats.requests  # an hour of validity: assumed once
        assert (form["Action"], form["RoleArn"], form["ExternalId"]) == ("AssumeRole", ROLE, "ext-42")
        assert form["RoleSessionName"] == "mlstream"
        assert sts.stats.refusals == 0
    assert role_bedrock.stats.signature_failures == 0
    assert role_bedrock.stats.requests[-1].headers["x-amz-security-token"] == TEMPORARY[2]


def test_role_is_refreshed_before_it_expires(monkeypatch, client, role_bedrock):
    # Five minutes left is inside botocore's mandatory refresh window (ten): every use refreshes.
    with FakeSTS(issued=TEMPORARY, source_access_key=SOURCE[0], source_secret_key=SOURCE[1],
                 lifetime_seconds=300) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        model_id = client.model_for(keyless_connector(role_bedrock, access_key=SOURCE[0], secret_key=SOURCE[1],
                                                      roleArn=ROLE))
        assert_streams(client, model_id)
        assert_streams(client, model_id)
        assert sts.stats.assume_role_calls >= 2


def test_role_from_the_chain_and_a_refused_role(monkeypatch, client, role_bedrock):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SOURCE[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SOURCE[1])
    with FakeSTS(issued=TEMPORARY, source_access_key=SOURCE[0], source_secret_key=SOURCE[1],
                 roles=frozenset({ROLE})) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        assert_streams(client, client.model_for(keyless_connector(role_bedrock, role_arn=ROLE)))
        other = "arn:aws:iam::123456789012:role/not-mine"
        refused = stream(client, client.model_for(keyless_connector(role_bedrock, role_arn=other)))
        assert refused.status == 403
        reason = json.loads(refused.body)["error"]["reason"]
        assert "AccessDenied" in reason and other in reason
        for secret in (SOURCE[1], *TEMPORARY[1:]):
            assert secret.encode() not in refused.body


def test_no_credentials_anywhere_is_a_clear_error(client, bedrock):
    model_id = client.model_for(keyless_connector(bedrock))
    response = stream(client, model_id)
    assert response.status == 502
    assert "no AWS credentials" in json.loads(response.body)["error"]["reason"]
    assert bedrock.stats.requests == []


def test_one_key_without_the_other_is_a_400(client, bedrock):
    reply = client.call("POST", "/_plugins/_ml/connectors/_create",
                        keyless_connector(bedrock, access_key=bedrock.access_key))
    assert reply.status == 400 and "go together" in reply.body["error"]["reason"]


def test_an_sts_error_echoing_the_signed_request_is_redacted(monkeypatch, client, role_bedrock):
    # AWS's SignatureDoesNotMatch message quotes the canonical request, and with it the
    # source credentials' session token; nor may any other secret of the connector pass.
    source_token = "FwoGZXIvYXdzSOURCESESSIONTOKEN0123456789"
    with FakeSTS(issued=TEMPORARY, source_access_key=SOURCE[0], source_secret_key="not-the-connector-secret",
                 source_session_token=source_token, echo_canonical_request=True) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        refused = stream(client, client.model_for(keyless_connector(
            role_bedrock, access_key=SOURCE[0], secret_key=SOURCE[1], session_token=source_token, roleArn=ROLE)))
        assert sts.stats.refusals >= 1
    assert refused.status == 403
    reason = json.loads(refused.body)["error"]["reason"]
    assert "InvalidSignatureException" in reason and "Canonical String" in reason
    assert "x-amz-security-token:***" in reason
    for secret in (source_token, SOURCE[1]):
        assert secret[:8].encode() not in refused.body


def test_the_sts_region_may_come_from_the_credential(monkeypatch, client):
    # AwsConnector.java: the region is the parameters', else the credential's.
    access_key, secret_key, token = TEMPORARY
    with FakeBedrock(access_key=access_key, secret_key=secret_key, session_token=token, region="eu-west-1") as fake, \
            FakeSTS(issued=TEMPORARY, source_access_key=SOURCE[0], source_secret_key=SOURCE[1],
                    region="eu-west-1") as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        connector = keyless_connector(fake, access_key=SOURCE[0], secret_key=SOURCE[1], roleArn=ROLE,
                                      region="eu-west-1")
        del connector["parameters"]["region"]
        assert_streams(client, client.model_for(connector))
        assert sts.stats.refusals == 0 and sts.stats.assume_role_calls == 1
