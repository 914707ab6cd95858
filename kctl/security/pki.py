"""A local certificate authority and per-node certificates, with the ``cryptography`` package.

The CA signs one certificate per container; its subject alternative names are the
container's hostname (the INTERNAL listener and the other brokers use it) and
``localhost``/``127.0.0.1`` (the EXTERNAL listener, published on 127.0.0.1).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

CA_DAYS = 3650
CERT_DAYS = 825


@dataclass(frozen=True)
class KeyPair:
    key_pem: bytes  # unencrypted PKCS8: written 0600 only
    cert_pem: bytes


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def new_ca(cluster: str, label: str | None = None) -> KeyPair:
    """A self-signed CA for one cluster; ``label`` tells a later one apart (`kctl cert rotate-ca`: a truststore that
    holds two CAs of one name may take the wrong one for a certificate's issuer)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kctl"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"kctl CA {cluster}" + (f" {label}" if label else ""))])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def sans_of(hostname: str, address: str | None = None) -> tuple[str, ...]:
    """A node certificate's names: its hostname, localhost and 127.0.0.1, and the address clients reach it on
    where that is another (engine hosts and swarm: ``nodes[].advertised_host``)."""
    base = (hostname, "localhost", "127.0.0.1")
    return base if address in (None, *base) else (*base, str(address))


def node_cert(ca: KeyPair, hostname: str, address: str | None = None) -> KeyPair:
    """A server certificate for ``hostname`` (and localhost, 127.0.0.1, ``address``), signed by ``ca``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    key = _key()
    now = _now()
    names: list[x509.GeneralName] = []
    for san in sans_of(hostname, address):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kctl"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[arg-type]
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return KeyPair(_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def cert_sans(cert_pem: bytes) -> tuple[str, ...]:
    """The subject alternative names of a PEM certificate, as strings."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return tuple(str(n.value) for n in ext)


def pkcs12(pair: KeyPair, ca_pem: bytes, alias: str, password: str) -> bytes:
    """A PKCS12 keystore (key, certificate and the CA) for a JVM, encrypted with ``password``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.serialization import pkcs12 as p12

    key = serialization.load_pem_private_key(pair.key_pem, None)
    enc = (serialization.PrivateFormat.PKCS12.encryption_builder().kdf_rounds(50000)
           .key_cert_algorithm(p12.PBES.PBESv2SHA256AndAES256CBC).hmac_hash(hashes.SHA256())
           .build(password.encode()))
    return p12.serialize_key_and_certificates(
        alias.encode(), key, x509.load_pem_x509_certificate(pair.cert_pem),  # type: ignore[arg-type]
        [x509.load_pem_x509_certificate(ca_pem)], enc)
