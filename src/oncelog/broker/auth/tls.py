"""TLS for the SSL and SASL_SSL listeners (issue 18), from Kafka's ``ssl.*`` settings, PEM only.

``server_context(config)`` builds the listener's ``ssl.SSLContext`` (config is already the
listener's view: ``listener.name.<name>.ssl.*`` applied, see ``BrokerConfig.for_listener``):

* key and certificate chain: ``ssl.keystore.location`` (a PEM file holding the private key and
  the certificate chain, Kafka's PEM keystore) with ``ssl.key.password`` when the key is
  encrypted; or inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``.
* trusted CAs for client certificates: ``ssl.truststore.location`` (a PEM file) or inline
  ``ssl.truststore.certificates``.
* ``ssl.client.auth``: ``required`` (a client without a valid certificate fails the handshake),
  ``requested`` (asked for, verified if given) or ``none``.

Only ``ssl.keystore.type=PEM`` and ``ssl.truststore.type=PEM`` exist here (no JKS/PKCS12: no
JVM). Raises InvalidConfig on anything missing or unreadable, before the broker listens.

``principal_of(ssl_object)``: Kafka's default principal for SSL, ``User:`` + the client
certificate's subject as an RFC 2253 string (``User:CN=alice,O=test``: the last RDN first), or
``User:ANONYMOUS`` without a client certificate.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import TYPE_CHECKING, Any

from oncelog.protocol.errors import InvalidConfig

if TYPE_CHECKING:
    from oncelog.broker.configuration.config import BrokerConfig

__all__ = ["ANONYMOUS", "principal_of", "server_context"]

ANONYMOUS = "User:ANONYMOUS"
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
# RFC 2253 keywords (what Java's X500Principal.getName() prints) for the names Python gives
_KEYWORDS = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}


def server_context(cfg: "BrokerConfig", listener: str) -> ssl.SSLContext:
    """The TLS context of listener ``listener`` (named in errors). Raises InvalidConfig."""
    for key, value in (("ssl.keystore.type", cfg.ssl_keystore_type), ("ssl.truststore.type", cfg.ssl_truststore_type)):
        if value.upper() != "PEM":
            raise InvalidConfig(f"listener {listener}: {key}={value}: only PEM is supported")
    mode = _CLIENT_AUTH.get(cfg.ssl_client_auth.lower())
    if mode is None:
        raise InvalidConfig(f"listener {listener}: ssl.client.auth={cfg.ssl_client_auth}: expected required, requested or none")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cfg.ssl_keystore_location:
            ctx.load_cert_chain(cfg.ssl_keystore_location, password=cfg.ssl_key_password)
        elif cfg.ssl_keystore_key and cfg.ssl_keystore_certificate_chain:
            _load_inline(ctx, cfg.ssl_keystore_certificate_chain, cfg.ssl_keystore_key, cfg.ssl_key_password)
        else:
            raise InvalidConfig(f"listener {listener} uses TLS: set ssl.keystore.location (PEM key and certificate "
                                "chain) or ssl.keystore.key with ssl.keystore.certificate.chain")
        if cfg.ssl_truststore_location:
            ctx.load_verify_locations(cafile=cfg.ssl_truststore_location)
        elif cfg.ssl_truststore_certificates:
            ctx.load_verify_locations(cadata=cfg.ssl_truststore_certificates)
        elif mode != ssl.CERT_NONE:
            raise InvalidConfig(f"listener {listener}: ssl.client.auth={cfg.ssl_client_auth} needs a truststore "
                                "(ssl.truststore.location or ssl.truststore.certificates)")
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfig(f"listener {listener}: cannot load the TLS key or certificates: {exc}") from None
    ctx.verify_mode = mode
    return ctx


def _load_inline(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """``load_cert_chain`` reads files only: the inline PEM goes through a private temporary
    file (mode 0600, removed at once)."""
    fd, path = tempfile.mkstemp(prefix="oncelog-key-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def principal_of(ssl_object: Any) -> str:
    """``User:<subject DN, RFC 2253>`` of the verified client certificate, else ANONYMOUS."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or "subject" not in cert:
        return ANONYMOUS
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns) if rdns else ANONYMOUS


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;=' or (ch == "#" and i == 0) or (ch == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
