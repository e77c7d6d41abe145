"""Certificates made on the spot (issue 18: tests and `python -m bench --security`), never checked in: a CA, a server certificate for
127.0.0.1/localhost and client certificates, as PEM files in a directory the test owns.
Built with the ``cryptography`` package (ECDSA P-256: fast to make)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path            # the CA certificate (PEM): clients' and the broker's truststore
    server: Path        # the broker's key + certificate chain in one PEM file (ssl.keystore.location)
    server_cert: Path   # the broker's certificate alone
    server_key: Path    # the broker's key alone
    client_cert: Path   # CN=alice,O=test
    client_key: Path
    other_ca: Path      # a CA the broker does not trust
    stranger_cert: Path  # CN=mallory, signed by other_ca
    stranger_key: Path


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = []
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
          *, ca: bool, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                          crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    ca_key, other_key = _key(), _key()
    ca_name, other_name = _name("oncelog test CA"), _name("untrusted CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    other = _cert(other_name, other_key, other_name, other_key, ca=True)
    s_key, c_key, m_key = _key(), _key(), _key()
    server = _cert(_name("localhost"), s_key, ca_name, ca_key, ca=False, server=True)
    client = _cert(_name("alice", "test"), c_key, ca_name, ca_key, ca=False)
    stranger = _cert(_name("mallory"), m_key, other_name, other_key, ca=False)
    files = {
        "ca.pem": pem(ca), "other-ca.pem": pem(other), "server.pem": _pem_key(s_key) + pem(server) + pem(ca),
        "server-cert.pem": pem(server), "server-key.pem": _pem_key(s_key), "client-cert.pem": pem(client),
        "client-key.pem": _pem_key(c_key), "stranger-cert.pem": pem(stranger), "stranger-key.pem": _pem_key(m_key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    d = directory
    return Pki(d / "ca.pem", d / "server.pem", d / "server-cert.pem", d / "server-key.pem", d / "client-cert.pem",
               d / "client-key.pem", d / "other-ca.pem", d / "stranger-cert.pem", d / "stranger-key.pem")
