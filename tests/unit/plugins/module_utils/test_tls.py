# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet CA and host certificates, the TLS flags of the servers and the router."""

from __future__ import annotations

import datetime
import json
import os
import ssl
import socket
import threading

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints, _router, _server_plan, _server_role, _sglang_args, _tls

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'releases', 'fixtures')


@pytest.fixture(scope='module')
def ca():
    return _tls.make_ca()


def test_a_host_certificate_is_signed_by_its_ca_and_names_the_host(ca):
    cert, key = _tls.make_host_cert(ca[0], ca[1], 'gpu-01', ['10.0.0.11', 'gpu-01.example.com', '127.0.0.1'])
    info = _tls.cert_info(cert)
    assert set(info['names']) >= {'gpu-01', 'gpu-01.example.com', '10.0.0.11', '127.0.0.1'}
    assert _tls.signed_by(cert, ca[0]) and _tls.key_matches(cert, key)
    assert _tls.renewal_reason(cert, key, ca[0], ['gpu-01', '10.0.0.11'], 30) is None
    other = _tls.make_ca('another CA')
    assert not _tls.signed_by(cert, other[0])
    assert _tls.renewal_reason(cert, key, other[0], ['gpu-01'], 30) == 'not signed by the CA'
    assert _tls.renewal_reason(cert, key, ca[0], ['10.0.0.99'], 30) == 'names missing: 10.0.0.99'
    assert _tls.renewal_reason(cert, other[1], ca[0], ['gpu-01'], 30) == "the key is not the certificate's"
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=820)
    assert _tls.renewal_reason(cert, key, ca[0], ['gpu-01'], 30, now=later).startswith('expires in')


def test_pythons_ssl_trusts_the_fleet_ca_and_refuses_another(ca, tmp_path):
    """A TLS handshake with the standard library: a client holding the fleet CA accepts the host's certificate at
    127.0.0.1; a client holding another CA refuses it (what the router does with --ca-cert-paths)."""
    cert, key = _tls.make_host_cert(ca[0], ca[1], 'gpu-01', ['127.0.0.1'])
    for name, text in (('host.crt', cert), ('host.key', key), ('ca.crt', ca[0]), ('other.crt', _tls.make_ca('x')[0])):
        (tmp_path / name).write_text(text)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(tmp_path / 'host.crt'), str(tmp_path / 'host.key'))
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    def serve():
        for _attempt in range(2):
            conn = listener.accept()[0]
            try:
                server_ctx.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    good = ssl.create_default_context(cafile=str(tmp_path / 'ca.crt'))
    with socket.create_connection(('127.0.0.1', port)) as sock:
        with good.wrap_socket(sock, server_hostname='127.0.0.1') as tls:
            assert tls.version()
    bad = ssl.create_default_context(cafile=str(tmp_path / 'other.crt'))
    with socket.create_connection(('127.0.0.1', port)) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            bad.wrap_socket(sock, server_hostname='127.0.0.1')
    thread.join(5)
    listener.close()


def test_the_argv_serves_https_with_the_hosts_files():
    spec = {'model_path': '/m', 'host': '0.0.0.0', 'port': 30000, 'ssl_certfile': '/etc/llmops/sglang-main.tls.crt',
            'ssl_keyfile': '/etc/llmops/sglang-main.tls.key', 'ssl_ca_certs': '/etc/llmops/sglang-main.ca.crt',
            'enable_ssl_refresh': True}
    argv = _sglang_args.build_argv(spec)
    assert argv[argv.index('--ssl-certfile') + 1] == '/etc/llmops/sglang-main.tls.crt'
    assert argv[argv.index('--ssl-keyfile') + 1] == '/etc/llmops/sglang-main.tls.key'
    assert argv[argv.index('--ssl-ca-certs') + 1] == '/etc/llmops/sglang-main.ca.crt'
    assert '--enable-ssl-refresh' in argv
    assert '--ssl-certfile' not in _sglang_args.build_argv({'model_path': '/m'})
    with pytest.raises(_sglang_args.LaunchArgsError, match='sglang_server_tls_cert is set but sglang_server_tls_key is not'):
        _sglang_args.build_argv({'model_path': '/m', 'ssl_certfile': '/c'})
    with pytest.raises(_sglang_args.LaunchArgsError, match='sglang_server_tls_refresh needs a certificate'):
        _sglang_args.build_argv({'model_path': '/m', 'enable_ssl_refresh': True})


@pytest.mark.parametrize('fixture', sorted(f for f in os.listdir(FIXTURES) if f.endswith('.json')))
def test_every_recorded_release_has_the_tls_flags(fixture):
    with open(os.path.join(FIXTURES, fixture)) as handle:
        table = json.load(handle)
    flags = set(flag for option in table['options'] for flag in option['options'])
    version = fixture[len('sglang-'):-len('.json')]
    options = dict((flag, {}) for flag in flags)
    assert _tls.server_tls_problem('gpu-01', version, options, refresh=True) is None
    assert _tls.server_tls_problem('gpu-01', version, None, refresh=True) is None


def test_a_release_without_the_flags_is_refused_naming_host_variable_and_release():
    problem = _tls.server_tls_problem('gpu-01', '0.5.9', {'--ssl-certfile': {}, '--ssl-keyfile': {},
                                                          '--ssl-ca-certs': {}}, refresh=True)
    assert problem == ('gpu-01: sglang_server_tls_refresh is set but SGLang 0.5.9 has no --enable-ssl-refresh; '
                       'unset it or install a release that has them')
    assert 'sglang_server_tls_cert' in _tls.server_tls_problem('gpu-01', '0.5.9', {'--port': {}})


def test_the_plan_puts_the_tls_files_in_the_spec_and_the_url_is_https():
    options = dict((name, None) for name in _server_plan.OPTIONS)
    options.update({'sglang_server_model_path': '/m', 'sglang_server_config_dir': '/etc/llmops',
                    'sglang_server_name': 'main', 'sglang_server_tls_cert': '/ctl/a.crt',
                    'sglang_server_tls_key': '/ctl/a.key', 'sglang_server_tls_ca_cert': '/ctl/ca.crt'})
    spec = _server_plan.launch_spec(options, {'nnodes': 1, 'node_rank': 0, 'dist_init_addr': None})
    assert spec['ssl_certfile'] == '/etc/llmops/sglang-main.tls.crt'
    assert spec['ssl_keyfile'] == '/etc/llmops/sglang-main.tls.key'
    assert spec['ssl_ca_certs'] == '/etc/llmops/sglang-main.ca.crt'
    command = ['python', '-m', 'sglang.launch_server'] + _sglang_args.build_argv(spec)
    assert _server_role.tls_endpoint('http://127.0.0.1:30000', command, None, None) == {
        'url': 'https://127.0.0.1:30000', 'ca_path': '/etc/llmops/sglang-main.ca.crt', 'tls_reloaded': []}
    assert _server_role.tls_endpoint('http://127.0.0.1:30000', ['python'], None, None) == {
        'url': 'http://127.0.0.1:30000', 'ca_path': None, 'tls_reloaded': []}
    refresh = _server_role.tls_endpoint('http://127.0.0.1:30000', command + ['--enable-ssl-refresh'], None, None)
    assert refresh['tls_reloaded'] == ['/etc/llmops/sglang-main.tls.crt', '/etc/llmops/sglang-main.tls.key']


@pytest.mark.parametrize('changed, refresh, action', [
    (['/etc/llmops/sglang-main.tls.crt', '/etc/llmops/sglang-main.tls.key'], True, 'none'),
    (['/etc/llmops/sglang-main.tls.crt', '/etc/llmops/sglang-main.tls.key'], False, 'restart'),
    (['/etc/llmops/sglang-main.tls.crt', '/etc/llmops/sglang-main.sh'], True, 'restart'),
])
def test_a_renewed_certificate_restarts_the_server_only_without_refresh(changed, refresh, action):
    plan = {'launcher': 'process', 'tls_reloaded': ['/etc/llmops/sglang-main.tls.crt',
                                                    '/etc/llmops/sglang-main.tls.key'] if refresh else []}
    decided = _server_role.decision(plan, {'running': True, 'pid': 7}, {}, {'changed_files': changed}, False)
    assert decided['action'] == action and decided['files_changed']


def test_worker_urls_are_https_for_tls_servers():
    hostvars = {'a': {'sglang_server_host': '0.0.0.0', 'ansible_host': '10.0.0.1', 'sglang_server_tls_cert': '/c'},
                'b': {'sglang_server_host': '0.0.0.0', 'ansible_host': '10.0.0.2'}}
    assert _endpoints.worker_urls(['a', 'b'], hostvars) == {'a': 'https://10.0.0.1:30000', 'b': 'http://10.0.0.2:30000'}
    assert _endpoints.local_url('0.0.0.0', 30080, '/readiness', tls=True) == 'https://127.0.0.1:30080/readiness'


def test_the_router_argv_has_the_tls_flags_of_its_files():
    options = _router.with_defaults({'workers': {}, 'tls_content': {'tls_cert': 'C', 'tls_key': 'K', 'ca_cert': 'A'}})
    argv = _router.router_argv(options, {'a': 'https://10.0.0.1:30000'}, _router.router_paths(options))
    assert argv[argv.index('--tls-cert-path') + 1] == '/etc/llmops/sglang-router-main.tls.crt'
    assert argv[argv.index('--tls-key-path') + 1] == '/etc/llmops/sglang-router-main.tls.key'
    assert argv[argv.index('--ca-cert-paths') + 1] == '/etc/llmops/sglang-router-main.ca.crt'
    assert '--client-cert-path' not in argv
    plain = _router.with_defaults({'workers': {}})
    assert '--ca-cert-paths' not in _router.router_argv(plain, {}, _router.router_paths(plain))
    found = _router.launch_endpoints('exec ' + ' '.join(argv))
    assert found['tls'] is True and found['ca_path'] == '/etc/llmops/sglang-router-main.ca.crt'


def test_the_preflight_refuses_a_tls_setting_without_its_material_naming_the_host():
    def readable(path):
        return path == '/ctl/a.crt'
    names = {'sglang_server_tls_cert': '/ctl/a.crt', 'sglang_server_tls_key': '', 'llmops_tls_ca_cert': '/ctl/ca.crt',
             'sglang_server_tls_refresh': False}
    assert _tls.material_problems('gpu-01', names, _tls.SERVER_TLS_PAIRS, readable) == [
        'gpu-01: sglang_server_tls_cert is set but sglang_server_tls_key is not (TLS needs both)',
        'gpu-01: llmops_tls_ca_cert is /ctl/ca.crt, which does not exist or cannot be read on the controller']
    assert _tls.material_problems('gpu-02', {'sglang_server_tls_refresh': True, 'sglang_server_tls_cert': ''}, (),
                                  readable, needs_cert=(('sglang_server_tls_refresh', 'sglang_server_tls_cert'),)) == [
        'gpu-02: sglang_server_tls_refresh is true but sglang_server_tls_cert is not set (no TLS material)']
    assert _tls.material_problems('gpu-03', {'sglang_server_tls_cert': '', 'sglang_server_tls_key': ''},
                                  _tls.SERVER_TLS_PAIRS, readable) == []


def test_the_router_shim_points_openssl_at_the_fleet_ca_only_with_one():
    """sglang-router 0.3.2's periodic health checks ignore --ca-cert-paths (seen: an HTTPS worker of the fleet CA
    turned unhealthy after two checks); the shim sets SSL_CERT_FILE to the CA. Without a CA the shim is unchanged."""
    options = _router.with_defaults({'workers': {}, 'tls_content': {'ca_cert': 'A'}})
    text = _router.shim_text(options, _router.router_paths(options))
    assert 'os.environ["SSL_CERT_FILE"] = "/etc/llmops/sglang-router-main.ca.crt"' in text
    compile(text, 'shim', 'exec')
    plain = _router.with_defaults({'workers': {}})
    assert 'SSL_CERT_FILE' not in _router.shim_text(plain, _router.router_paths(plain))


def test_router_worker_reads_the_routers_scheme_and_ca_from_its_launch_file():
    from ansible_collections.llmops.serving.plugins.modules import router_worker
    options = _router.with_defaults({'workers': {}, 'tls_content': {'tls_cert': 'C', 'tls_key': 'K', 'ca_cert': 'A'}})
    script = 'exec ' + ' '.join(_router.router_argv(options, {'a': 'https://10.0.0.1:30000'}, _router.router_paths(options)))
    ca = '/etc/llmops/sglang-router-main.ca.crt'
    params = dict((name, None) for name in router_worker.ARGUMENT_SPEC)
    resolved = router_worker.resolve(params, read=lambda path: script if path.endswith('.sh') else None,
                                     exists=lambda path: path == ca)
    assert resolved['url'] == 'https://127.0.0.1:30080' and resolved['ca_path'] == ca
    plain = router_worker.resolve(dict(params), read=lambda path: None, exists=lambda path: False)
    assert plain['url'] == 'http://127.0.0.1:30080' and plain['ca_path'] is None
