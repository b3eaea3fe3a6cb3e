# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TLS on the wire between clients, the router and the servers: a fleet CA and per-host certificates
made with the ``cryptography`` library (every ansible-core installation has it: ansible-core depends on
it), what each SGLang release and sglang-router take for TLS, and where a host keeps its TLS files.

Why ``cryptography`` and not community.crypto: community.crypto would reach these machines only inside the
``ansible`` package of the package index (the Galaxy server is not reachable here), a 40 MB dependency for
four calls; the virtualenvs of this project carry ansible-core alone. community.crypto itself is built on
``cryptography``. Pure helpers; ``cryptography`` is imported lazily so that a module that does not make
certificates runs without it."""

from __future__ import annotations

import datetime
import ipaddress

# SGLang's TLS flags (uvicorn's), in the order of the launch command: every release 0.5.11-0.5.23 has all four
# (tests/releases/fixtures/sglang-<version>.json, the real argparse table of each release). A release outside
# that range is checked against its --help (``options``) when the installed server's is known.
SERVER_TLS_FLAGS = (('--ssl-certfile', 'ssl_certfile'), ('--ssl-keyfile', 'ssl_keyfile'),
                    ('--ssl-ca-certs', 'ssl_ca_certs'))
SERVER_TLS_REFRESH_FLAG = '--enable-ssl-refresh'
SERVER_TLS_SINCE = {'--ssl-certfile': (0, 5, 11), '--ssl-keyfile': (0, 5, 11), '--ssl-ca-certs': (0, 5, 11),
                    '--enable-ssl-refresh': (0, 5, 11)}
# sglang-router 0.3.2 (router_args.py, tls_group): its own listener, the CA(s) it verifies workers with, and
# the client certificate it presents to them (mTLS).
ROUTER_TLS_FLAGS = (('--tls-cert-path', 'tls_cert'), ('--tls-key-path', 'tls_key'),
                    ('--ca-cert-paths', 'ca_cert'), ('--client-cert-path', 'client_cert'),
                    ('--client-key-path', 'client_key'))

DEFAULT_CA_NAME = 'llmops.serving fleet CA'
DEFAULT_DAYS = 825
DEFAULT_CA_DAYS = 3650


class TLSError(ValueError):
    """TLS material that cannot be used; the message says why."""


def server_tls_files(config_dir, name):
    """Where the server ``name`` keeps its certificate, key and the fleet CA on its host."""
    base = '%s/sglang-%s' % (config_dir, name)
    return {'ssl_certfile': base + '.tls.crt', 'ssl_keyfile': base + '.tls.key', 'ssl_ca_certs': base + '.ca.crt'}


def router_tls_files(config_dir, name):
    """Where the router ``name`` keeps its listener's certificate and key, its client certificate and key, and the CA."""
    base = '%s/sglang-router-%s' % (config_dir, name)
    return {'tls_cert': base + '.tls.crt', 'tls_key': base + '.tls.key', 'client_cert': base + '.client.crt',
            'client_key': base + '.client.key', 'ca_cert': base + '.ca.crt'}


def scheme(tls):
    return 'https' if tls else 'http'


# ---------------------------------------------------------------- certificates (cryptography)

def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:  # pragma: no cover - ansible-core depends on cryptography
        raise TLSError('the Python library cryptography is missing on the controller (ansible-core installs it)')
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key):
    serialization = _crypto()[2]
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode('ascii')


def _cert_pem(cert):
    serialization = _crypto()[2]
    return cert.public_bytes(serialization.Encoding.PEM).decode('ascii')


def _names(names):
    """``x509.GeneralName``s of ``names``: IP addresses and DNS names."""
    x509 = _crypto()[0]
    result = []
    for name in dict.fromkeys(str(n) for n in names if n):
        try:
            result.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            result.append(x509.DNSName(name))
    return result


def make_ca(common_name=DEFAULT_CA_NAME, days=DEFAULT_CA_DAYS, now=None):
    """``(cert_pem, key_pem)`` of a new self-signed CA (ECDSA P-256) valid ``days``."""
    x509, hashes, ec, NameOID = _crypto()[0], _crypto()[1], _crypto()[3], _crypto()[5]
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _cert_pem(cert), _key_pem(key)


def make_host_cert(ca_cert_pem, ca_key_pem, common_name, names, days=DEFAULT_DAYS, now=None):
    """``(cert_pem, key_pem)`` of a new certificate for ``common_name`` with the subject alternative names
    ``names`` (addresses and DNS names), signed by the CA, good for a server and a client (mTLS)."""
    x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID = _crypto()
    now = now or _now()
    ca_cert = load_cert(ca_cert_pem)
    try:
        ca_key = serialization.load_pem_private_key(ca_key_pem.encode('ascii'), password=None)
    except (ValueError, TypeError):
        raise TLSError('the CA key is not an unencrypted PEM private key')
    key = ec.generate_private_key(ec.SECP256R1())
    sans = _names([common_name] + list(names))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return _cert_pem(cert), _key_pem(key)


def load_cert(pem):
    x509 = _crypto()[0]
    try:
        return x509.load_pem_x509_certificate(pem.encode('ascii') if isinstance(pem, str) else pem)
    except (ValueError, TypeError):
        raise TLSError('not a PEM certificate')


def cert_info(pem):
    """``{subject, issuer, names, not_after, ca}`` of a PEM certificate (no secret in it)."""
    x509 = _crypto()[0]
    cert = load_cert(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in sans.get_values_for_type(x509.DNSName)] + [
            str(v) for v in sans.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    try:
        ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        ca = False
    return {'subject': cert.subject.rfc4514_string(), 'issuer': cert.issuer.rfc4514_string(), 'names': names,
            'not_after': cert.not_valid_after_utc.isoformat(), 'ca': ca}


def signed_by(cert_pem, ca_cert_pem):
    """Whether the CA's key signed the certificate."""
    cert, ca = load_cert(cert_pem), load_cert(ca_cert_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # ValueError, TypeError or InvalidSignature
        return False
    return True


def key_matches(cert_pem, key_pem):
    """Whether ``key_pem`` is the private key of the certificate."""
    serialization = _crypto()[2]
    try:
        key = serialization.load_pem_private_key(key_pem.encode('ascii'), password=None)
    except (ValueError, TypeError):
        return False
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.PEM
    return key.public_key().public_bytes(enc, pub) == load_cert(cert_pem).public_key().public_bytes(enc, pub)


def renewal_reason(cert_pem, key_pem, ca_cert_pem, names, renew_days, now=None):
    """Why the host certificate must be made again (None where it is good): not signed by the CA, a key that is
    not its own, a name missing, or less than ``renew_days`` left."""
    try:
        info = cert_info(cert_pem)
    except TLSError as exc:
        return str(exc)
    if not signed_by(cert_pem, ca_cert_pem):
        return 'not signed by the CA'
    if not key_matches(cert_pem, key_pem):
        return 'the key is not the certificate\'s'
    have = set(info['names'])
    missing = [str(n) for n in names if n and str(_normal(n)) not in have]
    if missing:
        return 'names missing: %s' % ', '.join(missing)
    left = load_cert(cert_pem).not_valid_after_utc - (now or _now())
    if left < datetime.timedelta(days=renew_days):
        return 'expires in %d days' % max(left.days, 0)
    return None


def _normal(name):
    try:
        return ipaddress.ip_address(str(name))
    except ValueError:
        return name


# ---------------------------------------------------------------- flags

def server_tls_problem(host, version, options=None, refresh=False):
    """Why the SGLang release ``version`` (its --help ``options`` where known) cannot serve TLS as asked, naming the
    host, the variable and the release; None where it can."""
    from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version
    flags = [pair[0] for pair in SERVER_TLS_FLAGS] + ([SERVER_TLS_REFRESH_FLAG] if refresh else [])
    if options:
        missing = [flag for flag in flags if flag not in options]
    else:
        try:
            have = parse_version(version)
        except ValueError:
            return None
        missing = [flag for flag in flags if have < SERVER_TLS_SINCE[flag]]
    if not missing:
        return None
    variable = 'sglang_server_tls_refresh' if missing == [SERVER_TLS_REFRESH_FLAG] else 'sglang_server_tls_cert'
    return ('%s: %s is set but SGLang %s has no %s; unset it or install a release that has them'
            % (host, variable, version, ', '.join(missing)))


# ---------------------------------------------------------------- fleet preflight

# The TLS variables of a server host and of a router host: (certificate, key) pairs that go together, and the
# switches that need a certificate.
SERVER_TLS_PAIRS = (('sglang_server_tls_cert', 'sglang_server_tls_key'),)
ROUTER_TLS_PAIRS = (('sglang_router_tls_cert', 'sglang_router_tls_key'),
                    ('sglang_router_client_cert', 'sglang_router_client_key'))


def material_problems(host, variables, pairs, readable, needs_cert=()):
    """What the TLS settings ``variables`` ({name: value}) of ``host`` lack, naming the host and the variable: a
    certificate without its key or the other way round, a path the controller cannot read (``readable(path)``), a
    switch of ``needs_cert`` ((switch, certificate variable)) set without the certificate. [] where nothing is asked
    or everything is there."""
    problems = []
    for cert, key in pairs:
        have_cert, have_key = bool(variables.get(cert)), bool(variables.get(key))
        if have_cert != have_key:
            missing, present = (key, cert) if have_cert else (cert, key)
            problems.append('%s: %s is set but %s is not (TLS needs both)' % (host, present, missing))
    for switch, cert in needs_cert:
        if variables.get(switch) and not variables.get(cert):
            problems.append('%s: %s is true but %s is not set (no TLS material)' % (host, switch, cert))
    for name in sorted(variables):
        path = variables[name]
        if isinstance(path, str) and path and not readable(path):
            problems.append('%s: %s is %s, which does not exist or cannot be read on the controller' % (host, name, path))
    return problems
