"""HTTPS with --tls-cert/--tls-key, tested with a throwaway self-signed certificate.

The certificate and key are made here with `cryptography` (SAN 127.0.0.1); clients
trust exactly that certificate.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mlstream.errors import MLStreamError
from mlstream.testing.fake_openai import Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.timeouts import HANG_GUARD

ML = "/_plugins/_ml"


# --- a throwaway certificate -------------------------------------------------------------

def make_certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mlstream test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.fixture
def tls_files(tmp_path) -> tuple[Path, Path]:
    directory = tmp_path / "tls"
    directory.mkdir()
    return make_certificate(directory)


@pytest.fixture
def tls_server(make_server, tls_files):
    cert, key = tls_files
    return make_server(tls_cert=cert, tls_key=key)


def trusting(cert: Path, **versions: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert))
    for name, value in versions.items():
        setattr(context, name, value)
    return context


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].split(":")
    return host, int(port)


def https_get(url: str, context: ssl.SSLContext, path: str = "/healthz") -> tuple[int, Any, str]:
    """(status, parsed body, negotiated TLS version)."""
    host, port = address(url)
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=HANG_GUARD)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), connection.sock.version()
    finally:
        connection.close()


def tls_client(url: str, cert: Path) -> Client:
    client = Client(url)
    client.http = urllib3.PoolManager(retries=False, timeout=HANG_GUARD, ca_certs=str(cert))
    return client


@pytest.fixture
def quiet_log(caplog):
    """No ERROR record and no traceback may be logged by the server during the test."""
    caplog.set_level(logging.DEBUG)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, "\n".join(f"{r.name} {r.levelname} {r.getMessage()}" for r in bad)


# --- tests -------------------------------------------------------------------------------

def test_the_server_speaks_https(tls_server, tls_files, quiet_log):
    assert tls_server.url.startswith("https://127.0.0.1:")
    status, body, version = https_get(tls_server.url, trusting(tls_files[0]))
    assert status == 200 and body == {"status": "ok"}
    assert version in ("TLSv1.2", "TLSv1.3")
    # TLS 1.2 exactly is accepted too
    status, _, version = https_get(tls_server.url, trusting(tls_files[0], maximum_version=ssl.TLSVersion.TLSv1_2))
    assert status == 200 and version == "TLSv1.2"


def test_a_client_that_does_not_trust_the_certificate_is_refused_by_itself(tls_server):
    with pytest.raises(ssl.SSLCertVerificationError):
        https_get(tls_server.url, ssl.create_default_context())


def test_a_full_streamed_prediction_over_https(tls_server, tls_files, fake, quiet_log):
    cert = tls_files[0]
    client = tls_client(tls_server.url, cert)
    model_id = client.model_for(openai_connector(fake))
    whole = client.ok("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
    assert whole["inference_results"][0]["status_code"] == 200

    host, port = address(tls_server.url)
    connection = http.client.HTTPSConnection(host, port, context=trusting(cert), timeout=HANG_GUARD)
    try:
        connection.request("POST", f"{ML}/models/{model_id}/_predict/stream", body=json.dumps(stream_body()),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type").startswith("text/event-stream")
        assert response.getheader("Transfer-Encoding") == "chunked"
        text = response.read().decode("utf-8")  # de-chunked by http.client
    finally:
        connection.close()
    events = [json.loads(block[len("data: "):]) for block in text.split("\n\n") if block.startswith("data: ")]
    assert text.endswith("\n\n")
    data = [event["inference_results"][0]["output"][0]["dataAsMap"] for event in events]
    assert data[-1]["is_last"] is True and data[-1]["finish_reason"] == "stop"
    assert all(item["is_last"] is False for item in data[:-1]) and len(data) > 2
    assert "".join(item["content"] for item in data) == "".join(fake_tokens(Scenario()))


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_1_1_is_refused(tls_server, tls_files, quiet_log):
    context = trusting(tls_files[0])
    # let this client offer TLS 1.1 at all (OpenSSL's default security level forbids it)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError) as refused:
        https_get(tls_server.url, context)
    # the server's protocol_version alert, not this client declining to try
    assert "PROTOCOL_VERSION" in str(refused.value).upper().replace(" ", "_"), refused.value
    status, _, _ = https_get(tls_server.url, trusting(tls_files[0]))
    assert status == 200


def test_plain_http_to_the_tls_port_does_no_harm(tls_server, tls_files, quiet_log):
    with socket.create_connection(address(tls_server.url), timeout=HANG_GUARD) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        received = b""
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionError:
            pass
    assert b'{"status":"ok"}' not in received  # nothing was served in the clear
    for _ in range(3):
        status, body, _ = https_get(tls_server.url, trusting(tls_files[0]))
        assert status == 200 and body == {"status": "ok"}


def test_a_client_that_never_starts_the_handshake_is_cut_after_the_header_timeout(make_server, tls_files,
                                                                                  quiet_log):
    cert, key = tls_files
    server = make_server(tls_cert=cert, tls_key=key, header_timeout=1.0)
    with socket.create_connection(address(server.url), timeout=HANG_GUARD) as silent:
        started = time.monotonic()
        try:
            assert silent.recv(1) == b""
        except ConnectionError:
            pass
        elapsed = time.monotonic() - started
    assert 0.8 <= elapsed <= 5.0, elapsed
    status, _, _ = https_get(server.url, trusting(cert))
    assert status == 200


def test_a_handshake_in_progress_does_not_block_other_clients(tls_server, tls_files):
    # a client that sends half a ClientHello and stops: the accept loop must not wait for it
    with socket.create_connection(address(tls_server.url), timeout=HANG_GUARD) as stuck:
        stuck.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        started = time.monotonic()
        status, _, _ = https_get(tls_server.url, trusting(tls_files[0]))
        assert status == 200 and time.monotonic() - started < 2.0


def test_a_bad_certificate_file_is_a_clear_error(make_server, tls_files, tmp_path):
    cert, key = tls_files
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    for cert_path, key_path in ((garbage, key), (cert, garbage), (tmp_path / "missing.pem", key)):
        with pytest.raises(MLStreamError, match="TLS"):
            make_server(tls_cert=cert_path, tls_key=key_path)
