"""TLS to the provider: ml-commons' mutual TLS (PEM and PKCS12 client certificates, a CA
of the connector's own) and skip_ssl_verification, against fake providers on loopback
that speak HTTPS, one of them demanding a client certificate. Certificates are made
here with `cryptography`; nothing is checked in."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
from dataclasses import dataclass

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mlstream.testing.fake_openai import FakeOpenAI, fake_tokens, Scenario

from ..support.clients import Client
from ..support.streams import SEED_MESSAGES
from ..support.wire import raw_request

ML = "/_plugins/_ml"
TRUST_LOOPBACK_HTTPS = (r"^https://127\.0\.0\.1:\d+/.*$",)


@dataclass(frozen=True)
class Issued:
    cert_pem: str
    key_pem: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def issue(subject: str, issuer: Issued | None, *, ca: bool = False, usage=ExtendedKeyUsageOID.SERVER_AUTH) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(issuer.cert.subject if issuer else _name(subject)).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                        critical=False)
    cert = builder.sign(issuer.key if issuer else key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem, cert, key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = issue("mlstream test CA", None, ca=True)
    server = issue("provider", ca)
    client = issue("mlstream client", ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    directory = tmp_path_factory.mktemp("pki")
    (directory / "server.pem").write_text(server.cert_pem + ca.cert_pem)
    (directory / "server.key").write_text(server.key_pem)
    return {"ca": ca, "server": server, "client": client, "dir": directory}


def server_context(pki, *, demand_client: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["dir"] / "server.pem", pki["dir"] / "server.key")
    if demand_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=pki["ca"].cert_pem)
    return context


@pytest.fixture
def mtls_fake(pki):
    with FakeOpenAI(tls=server_context(pki, demand_client=True)) as fake:
        yield fake


@pytest.fixture
def tls_fake(pki):
    with FakeOpenAI(tls=server_context(pki, demand_client=False)) as fake:
        yield fake


def connector(fake: FakeOpenAI, credential: dict, client_config: dict, model: str = "gpt-4o") -> dict:
    return {
        "name": "TLS chat", "protocol": "http", "parameters": {"model": model},
        "credential": {"openAI_key": fake.api_key, **credential},
        "client_config": client_config,
        "actions": [{"action_type": "predict", "method": "POST", "url": f"{fake.url}/v1/chat/completions",
                     "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                     "request_body": '{ "model": "${parameters.model}", "messages": ${parameters.messages} }'}],
    }


def pem_credential(pki) -> dict:
    return {"client_cert_pem": pki["client"].cert_pem, "client_key_pem": pki["client"].key_pem,
            "ca_cert_pem": pki["ca"].cert_pem}


def predict(client: Client, model_id: str):
    return client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})


@pytest.fixture
def tls_server(make_server):
    return make_server(trusted_endpoints=TRUST_LOOPBACK_HTTPS)


def test_mutual_tls_with_pem_certificates_predicts_and_streams(tls_server, mtls_fake, pki):
    client = Client(tls_server.url)
    model_id = client.model_for(connector(mtls_fake, pem_credential(pki), {"mutual_tls_enabled": True},
                                          model=Scenario(chunks=20).to_model()))
    reply = predict(client, model_id)
    assert reply.status == 200, reply.body
    # Streamed over TLS through the readiness loop: every chunk whole, in order.
    response = raw_request(tls_server.url, "POST", f"{ML}/models/{model_id}/_predict/stream", json.dumps(
        {"parameters": {"messages": SEED_MESSAGES, "_llm_interface": "openai/v1/chat/completions"}}).encode())
    events = response.events()
    text = "".join(e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events[:-1])
    assert text == "".join(fake_tokens(Scenario(chunks=20)))


def test_mutual_tls_with_a_pkcs12_keystore(tls_server, mtls_fake, pki):
    issued = pki["client"]
    keystore = pkcs12.serialize_key_and_certificates(
        b"client", issued.key, issued.cert, None, serialization.BestAvailableEncryption(b"s3cret"))
    credential = {"client_cert_pkcs12": base64.b64encode(keystore).decode(), "keystore_password": "s3cret",
                  "ca_cert_pem": pki["ca"].cert_pem}
    client = Client(tls_server.url)
    model_id = client.model_for(connector(mtls_fake, credential, {"mutual_tls_enabled": True,
                                                                  "keystore_type": "pkcs12"}))
    assert predict(client, model_id).status == 200


def test_without_the_client_certificate_the_provider_refuses_the_handshake(tls_server, mtls_fake, pki):
    client = Client(tls_server.url)
    # Trust the provider (skip verification) but present no certificate: the provider says no.
    model_id = client.model_for(connector(mtls_fake, {}, {"skip_ssl_verification": True}))
    reply = predict(client, model_id)
    assert reply.status == 502 and "provider" in json.dumps(reply.body)


def test_skip_ssl_verification_lets_an_untrusted_provider_through_and_the_default_refuses(tls_server, tls_fake):
    client = Client(tls_server.url)
    trusted = client.model_for(connector(tls_fake, {}, {"skip_ssl_verification": True}))
    assert predict(client, trusted).status == 200
    default = client.model_for(connector(tls_fake, {}, {}))
    refused = predict(client, default)
    assert refused.status == 502 and "TLS" in json.dumps(refused.body)


@pytest.mark.parametrize("change, message", [
    (lambda c, cc: cc.update(skip_ssl_verification=True), "cannot be enabled together"),
    (lambda c, cc: c.pop("client_key_pem"), "provide both client_cert_pem and client_key_pem"),
    (lambda c, cc: c.update(api_key="sk-mixed"), "Mixed authentication"),
    (lambda c, cc: c.update(client_cert_pem="/etc/ssl/client.pem"), "file paths are not supported"),
    (lambda c, cc: c.update(client_key_pem="-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"),
     "only PKCS#8"),
    (lambda c, cc: c.update(client_cert_pem="not a certificate"), "invalid PEM certificate"),
    (lambda c, cc: cc.update(keystore_type="JKS"), "Unsupported keystore type"),
    (lambda c, cc: cc.update(keystore_type="PKCS12"), "provide client_cert_pkcs12"),
    (lambda c, cc: cc.update(mutual_tls_enabled="yes"), "must be true or false"),
])
def test_a_bad_tls_configuration_is_a_400_at_create_and_changes_nothing(tls_server, mtls_fake, pki, change, message):
    client = Client(tls_server.url)
    credential, client_config = pem_credential(pki), {"mutual_tls_enabled": True}
    change(credential, client_config)
    before = client.call("POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}}).body
    reply = client.call("POST", f"{ML}/connectors/_create", connector(mtls_fake, credential, client_config))
    assert reply.status == 400, reply.body
    text = json.dumps(reply.body)
    assert message in text
    for secret in (pki["client"].key_pem, pki["client"].cert_pem):  # no key or certificate material echoed
        assert secret.splitlines()[1] not in text
    after = client.call("POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}}).body
    assert after["hits"]["total"] == before["hits"]["total"]


def test_a_key_that_is_not_the_certificates_is_refused(tls_server, mtls_fake, pki):
    other = issue("someone else", pki["ca"], usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    credential = {**pem_credential(pki), "client_key_pem": other.key_pem}
    reply = Client(tls_server.url).call("POST", f"{ML}/connectors/_create",
                                        connector(mtls_fake, credential, {"mutual_tls_enabled": True}))
    assert reply.status == 400 and "is not the key" in json.dumps(reply.body)


def test_certificates_and_keys_never_leave_the_server(tls_server, mtls_fake, pki):
    client = Client(tls_server.url)
    created = client.call("POST", f"{ML}/connectors/_create",
                          connector(mtls_fake, pem_credential(pki), {"mutual_tls_enabled": True}))
    assert created.status == 200, created.body
    shown = client.call("GET", f"{ML}/connectors/{created.body['connector_id']}")
    text = json.dumps(shown.body)
    assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text
    assert shown.body["client_config"]["mutual_tls_enabled"] is True
    assert "keystore_type" not in shown.body["client_config"]  # not given: not written back


def test_base64_encoded_pem_is_accepted_as_ml_commons_accepts_it(tls_server, mtls_fake, pki):
    credential = {name: base64.b64encode(value.encode()).decode() for name, value in pem_credential(pki).items()}
    client = Client(tls_server.url)
    model_id = client.model_for(connector(mtls_fake, credential, {"mutual_tls_enabled": True}))
    assert predict(client, model_id).status == 200
