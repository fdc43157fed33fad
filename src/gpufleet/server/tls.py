"""TLS for `gpufleet server --ssl`: the operator's certificate, or one we make and keep."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpufleet.errors import ConfigurationError

VALID_DAYS = 825  # the longest lifetime browsers accept for a server certificate


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    fingerprint: str  # SHA-256 of the certificate, colon-separated hex
    created: bool


def fingerprint(cert_pem: bytes) -> str:
    cert = x509.load_pem_x509_certificate(cert_pem)
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def _names(host: str) -> tuple[list[str], list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    dns = {"localhost", socket.gethostname(), socket.getfqdn()}
    ips: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    candidates = [host]
    with contextlib.suppress(OSError):
        candidates += [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)]
    for value in candidates:
        try:
            address = ipaddress.ip_address(str(value).split("%")[0])
        except ValueError:
            if value:
                dns.add(str(value))
            continue
        if not address.is_unspecified:
            ips.add(address)
    return sorted(n for n in dns if n), sorted(ips, key=str)


def _make_self_signed(cert_path: Path, key_path: Path, host: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    dns, ips = _names(host)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpufleet {dns[0]}")])
    now = dt.datetime.now(dt.UTC)
    san = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ip) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    # Replaced whole, after the key: a worker or client reading the certificate while the
    # server starts (`--ca-cert` on this file) never finds it empty or cut.
    partial = cert_path.with_name(f"{cert_path.name}.{os.getpid()}.tmp")
    partial.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(partial, cert_path)


def prepare(data_dir: Path, host: str, cert: Path | None, key: Path | None) -> TlsFiles:
    """The certificate to serve: the one given, else the data folder's, made on first use."""
    if (cert is None) != (key is None):
        raise ConfigurationError("pass both --ssl-cert and --ssl-key, or neither")
    created = False
    if cert is None or key is None:
        cert, key = data_dir / "tls" / "cert.pem", data_dir / "tls" / "key.pem"
        if not (cert.is_file() and key.is_file()):
            _make_self_signed(cert, key, host)
            created = True
    for path, flag in ((cert, "--ssl-cert"), (key, "--ssl-key")):
        if not path.is_file():
            raise ConfigurationError(f"{flag} {path}: no such file")
    try:
        print_ = fingerprint(cert.read_bytes())
    except ValueError as exc:
        raise ConfigurationError(f"--ssl-cert {cert} is not a PEM certificate") from exc
    return TlsFiles(cert=cert, key=key, fingerprint=print_, created=created)
