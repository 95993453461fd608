"""A connector's TLS to its provider: ml-commons' ``skip_ssl_verification`` and mutual TLS
(``mutual_tls_enabled``, ``keystore_type`` PEM or PKCS12, the certificates in the
credential), checked when the connector is created or updated, as ml-commons'
CertificateProcessor checks them:

- ``keystore_type``: PEM (the default when absent) or PKCS12, any case;
- PEM needs ``client_cert_pem`` (the leaf first, then its intermediates, in order) and
  ``client_key_pem`` (PKCS#8, ``-----BEGIN PRIVATE KEY-----``); PKCS12 needs
  ``client_cert_pkcs12`` (base64) and, when it has one, ``keystore_password``;
- ``ca_cert_pem`` (one or more certificates) is what the provider's certificate must chain
  to; without it, the system's trust store;
- a PEM field may be given base64-encoded (no PEM headers, over 100 characters);
- mutual TLS with ``skip_ssl_verification``, or with a non-empty ``api_key`` in the
  credential, is refused; a file path given for a certificate is refused.

Every error names the field, never its content. The material is held as PEM text; the
upstream client builds one ``ssl.SSLContext`` per distinct material.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Mapping

from ..errors import BadRequest

CLIENT_CERT_PEM = "client_cert_pem"
CLIENT_KEY_PEM = "client_key_pem"
CLIENT_CERT_PKCS12 = "client_cert_pkcs12"
CA_CERT_PEM = "ca_cert_pem"
KEYSTORE_PASSWORD = "keystore_password"
KEYSTORE_TYPES = ("PEM", "PKCS12")

_CERT = re.compile(r"-----BEGIN CERTIFICATE-----[^\r\n]*\s*([A-Za-z0-9+/\s=]+?)\s*-----END CERTIFICATE-----",
                   re.DOTALL)
_KEY = re.compile(r"-----BEGIN PRIVATE KEY-----[^\r\n]*\s*([A-Za-z0-9+/\s=]+?)\s*-----END PRIVATE KEY-----",
                  re.DOTALL)
_PATH_PREFIX = re.compile(r"^(?:[A-Za-z]:[\\/]|~[/\\]|\.{1,2}[/\\]|/).*")
_PATH_EXTENSION = re.compile(r".*\.(pem|crt|cer|key|p12|pfx|der)$", re.IGNORECASE)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """What a connector's TLS needs beyond the defaults. Hashable: it keys the pools."""

    verify: bool = True                 # False: skip_ssl_verification
    ca_pem: str | None = None           # the provider's certificate must chain to these
    cert_pem: str | None = None         # the client's chain, leaf first (mutual TLS)
    key_pem: str | None = None          # its PKCS#8 private key, unencrypted

    def __repr__(self) -> str:  # never the key in a log line or a traceback
        return (f"TlsMaterial(verify={self.verify}, ca={self.ca_pem is not None}, "
                f"client_certificate={self.cert_pem is not None})")


def tls_material(skip_verification: bool, mutual: bool, keystore_type: str | None,
                 credential: Mapping[str, str]) -> TlsMaterial | None:
    """The connector's TLS material, or None for the defaults; BadRequest as ml-commons."""
    if keystore_type is not None and keystore_type.strip().upper() not in KEYSTORE_TYPES:
        raise BadRequest(f"Unsupported keystore type: {keystore_type}. Supported types are: PEM, PKCS12")
    if not mutual:
        return TlsMaterial(verify=False) if skip_verification else None
    if skip_verification:
        raise BadRequest("skip_ssl_verification cannot be enabled together with mutual_tls_enabled: provide a "
                         f"trusted CA certificate ({CA_CERT_PEM}) instead of skipping SSL verification")
    if not credential:
        raise BadRequest("Credentials are required when mutual TLS is enabled")
    kind = (keystore_type or "PEM").strip().upper()
    if kind == "PEM" and not (CLIENT_CERT_PEM in credential and CLIENT_KEY_PEM in credential):
        raise BadRequest(f"For PEM keystore, provide both {CLIENT_CERT_PEM} and {CLIENT_KEY_PEM}")
    if kind == "PKCS12" and CLIENT_CERT_PKCS12 not in credential:
        raise BadRequest(f"For PKCS12 keystore, provide {CLIENT_CERT_PKCS12}")
    if (credential.get("api_key") or "").strip():
        raise BadRequest("Mixed authentication methods are not allowed: remove 'api_key' from the credential "
                         "when 'mutual_tls_enabled' is true")
    ca_text = _content(credential, CA_CERT_PEM)
    ca_pem = _pem_certificates(ca_text, CA_CERT_PEM) if ca_text is not None else None
    if kind == "PEM":
        cert_pem = _pem_certificates(_content(credential, CLIENT_CERT_PEM) or "", CLIENT_CERT_PEM, chain=True)
        key_pem = _pem_key(_content(credential, CLIENT_KEY_PEM) or "")
        _check_pair(cert_pem, key_pem)
    else:
        cert_pem, key_pem = _from_pkcs12(credential[CLIENT_CERT_PKCS12], credential.get(KEYSTORE_PASSWORD))
    return TlsMaterial(verify=True, ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


def _content(credential: Mapping[str, str], name: str) -> str | None:
    """A PEM field's text: as given, or decoded when given as base64 of PEM."""
    value = credential.get(name)
    if value is None or not value.strip():
        return None
    text = value.strip()
    if "-----BEGIN" in text or "-----END" in text:
        return text
    stripped = re.sub(r"\s", "", text)
    if len(stripped) > 100 and _BASE64.match(stripped):
        try:
            decoded = base64.b64decode(stripped, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise BadRequest(f"Certificate field '{name}' appears to be base64 encoded but contains invalid "
                             "base64 data") from None
        if "-----BEGIN" not in decoded:
            raise BadRequest(f"Certificate field '{name}' appears to be base64 encoded but does not contain valid "
                             "PEM content after decoding. Expected PEM headers (-----BEGIN...).")
        return decoded
    return text


def _looks_like_path(text: str) -> bool:
    text = text.strip()
    return "-----BEGIN" not in text and bool(_PATH_PREFIX.match(text) or _PATH_EXTENSION.match(text))


def _pem_certificates(text: str, name: str, *, chain: bool = False) -> str:
    from cryptography import x509

    bodies = [re.sub(r"\s", "", match.group(1)) for match in _CERT.finditer(text)]
    if not bodies:
        if _looks_like_path(text):
            raise BadRequest(f"[credential.{name}]: file paths are not supported for certificate fields; provide "
                             "the certificate content itself (PEM text or base64-encoded PEM)")
        raise BadRequest(f"[credential.{name}]: invalid PEM certificate format, expected a "
                         "-----BEGIN CERTIFICATE----- block")
    try:
        certificates = [x509.load_der_x509_certificate(base64.b64decode(body)) for body in bodies]
    except (ValueError, binascii.Error):
        raise BadRequest(f"[credential.{name}]: a certificate cannot be read") from None
    if chain:
        for index in range(len(certificates) - 1):
            if certificates[index].issuer != certificates[index + 1].subject:
                raise BadRequest(f"[credential.{name}]: the certificate chain is not ordered correctly: the "
                                 f"certificate at index {index} is not issued by the one at index {index + 1}; list "
                                 "the leaf certificate first, followed by its issuing intermediates in order")
    return "".join(_pem("CERTIFICATE", base64.b64decode(body)) for body in bodies)


def _pem_key(text: str) -> str:
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    match = _KEY.search(text)
    if match is None:
        if _looks_like_path(text):
            raise BadRequest(f"[credential.{CLIENT_KEY_PEM}]: file paths are not supported for certificate fields; "
                             "provide the private key content itself (PEM text or base64-encoded PEM)")
        raise BadRequest(f"[credential.{CLIENT_KEY_PEM}]: invalid PEM private key format; only PKCS#8 "
                         "(-----BEGIN PRIVATE KEY-----) is supported (convert a PKCS#1 key with "
                         "openssl pkcs8 -topk8 -nocrypt)")
    der = base64.b64decode(re.sub(r"\s", "", match.group(1)))
    try:
        load_der_private_key(der, password=None)
    except (ValueError, TypeError):
        raise BadRequest(f"[credential.{CLIENT_KEY_PEM}]: unable to parse the private key (RSA, EC, DSA)") from None
    return _pem("PRIVATE KEY", der)


def _check_pair(cert_pem: str, key_pem: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

    leaf = x509.load_pem_x509_certificate(cert_pem.encode())
    key = load_pem_private_key(key_pem.encode(), password=None)
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if leaf.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise BadRequest(f"[credential.{CLIENT_KEY_PEM}] is not the key of the first certificate of "
                         f"[credential.{CLIENT_CERT_PEM}]")


def _from_pkcs12(value: str, password: str | None) -> tuple[str, str]:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    try:
        data = base64.b64decode(re.sub(r"\s", "", value), validate=True)
        key, leaf, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except (ValueError, binascii.Error, TypeError):
        raise BadRequest(f"[credential.{CLIENT_CERT_PKCS12}]: cannot be read (base64 of a PKCS12 keystore, with "
                         f"its [credential.{KEYSTORE_PASSWORD}])") from None
    if key is None or leaf is None:
        raise BadRequest(f"[credential.{CLIENT_CERT_PKCS12}] holds no private key and certificate")
    chain = [leaf, *extra]
    cert_pem = "".join(cert.public_bytes(Encoding.PEM).decode() for cert in chain)
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return cert_pem, key_pem


def _pem(label: str, der: bytes) -> str:
    body = base64.b64encode(der).decode()
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"

