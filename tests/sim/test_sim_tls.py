# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator serves HTTPS with SGLang's --ssl-* flags (uvicorn's) and, with --enable-ssl-refresh, picks up a new
certificate without a restart (TEST DOUBLE; certificates made with the cryptography library, as fleet_tls does)."""

from __future__ import annotations

import datetime
import ssl
import socket
import urllib.request

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sim_helpers import wait_for


def _ca(name):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca, ca_key):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'sim')]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(__import__('ipaddress').ip_address('127.0.0.1'))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    return cert, key


def _write(path, cert=None, key=None):
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


def _served_serial(port, cafile):
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(('127.0.0.1', port), timeout=5) as sock:
        with context.wrap_socket(sock, server_hostname='127.0.0.1') as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


@pytest.fixture
def tls_files(tmp_path):
    ca, ca_key = _ca('sim CA')
    cert, key = _leaf(ca, ca_key)
    files = {'ca': tmp_path / 'ca.crt', 'cert': tmp_path / 'sim.crt', 'key': tmp_path / 'sim.key',
             'other': tmp_path / 'other.crt'}
    _write(files['ca'], cert=ca)
    _write(files['cert'], cert=cert)
    _write(files['key'], key=key)
    _write(files['other'], cert=_ca('another CA')[0])
    files['issuer'] = (ca, ca_key)
    return files


def test_serves_https_with_the_ssl_flags_and_reloads_with_refresh(start_sim, tls_files):
    sim = start_sim('--ssl-certfile', str(tls_files['cert']), '--ssl-keyfile', str(tls_files['key']),
                    '--ssl-ca-certs', str(tls_files['ca']), '--enable-ssl-refresh')
    assert 'Uvicorn running on https://' in sim.log()
    url = 'https://127.0.0.1:%d/health' % sim.port
    good = ssl.create_default_context(cafile=str(tls_files['ca']))
    assert urllib.request.urlopen(url, context=good, timeout=5).status == 200
    # a client that does not hold the CA refuses the server (as the router does with another --ca-cert-paths)
    with pytest.raises(urllib.error.URLError, match='CERTIFICATE_VERIFY_FAILED'):
        urllib.request.urlopen(url, context=ssl.create_default_context(cafile=str(tls_files['other'])), timeout=5)
    # rotation: a new certificate and key on disk, served without a restart
    before = _served_serial(sim.port, str(tls_files['ca']))
    cert, key = _leaf(*tls_files['issuer'])
    _write(tls_files['key'], key=key)
    _write(tls_files['cert'], cert=cert)
    wait_for(lambda: _served_serial(sim.port, str(tls_files['ca'])) == cert.serial_number, 10, what='new certificate')
    assert before != cert.serial_number and sim.proc.poll() is None


def test_without_refresh_the_certificate_stays_until_a_restart(start_sim, tls_files):
    sim = start_sim('--ssl-certfile', str(tls_files['cert']), '--ssl-keyfile', str(tls_files['key']))
    before = _served_serial(sim.port, str(tls_files['ca']))
    cert, key = _leaf(*tls_files['issuer'])
    _write(tls_files['key'], key=key)
    _write(tls_files['cert'], cert=cert)
    __import__('time').sleep(2.5)
    assert _served_serial(sim.port, str(tls_files['ca'])) == before
