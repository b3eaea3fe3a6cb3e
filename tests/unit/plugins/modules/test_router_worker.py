"""Module router_worker against a fake sglang-router (worker API and /metrics) on a local port."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.modules import router_worker as module
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main

KEY = 'sk-router-key'
A = 'http://10.0.0.1:30000'
B = 'http://10.0.0.2:30000'


class FakeRouter:
    """Entries {id, url, is_healthy}; a new entry is healthy at once; breakers {url: code} on /metrics."""

    def __init__(self, *urls):
        self.entries = [{'id': 'w%d' % n, 'url': url, 'is_healthy': True, 'load': 0} for n, url in enumerate(urls)]
        self.breakers = {}
        self.key = KEY
        self.calls = []
        self.posted = []
        router = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def authorised(self):
                router.calls.append((self.command, self.path))
                if self.headers.get('Authorization') != 'Bearer ' + router.key:
                    self.answer(401, {'error': 'unauthorised'})
                    return False
                return True

            def do_GET(self):
                if self.path == '/metrics':
                    router.calls.append(('GET', '/metrics'))
                    return self.answer(200, ''.join('smg_worker_cb_state{worker="%s"} %d\n' % item
                                                    for item in router.breakers.items()))
                if self.authorised():
                    self.answer(200, {'workers': router.entries})

            def do_DELETE(self):
                if self.authorised():
                    router.entries = [e for e in router.entries if e['id'] != self.path.rsplit('/', 1)[1]]
                    self.answer(202, {})

            def do_POST(self):
                if self.authorised():
                    body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                    router.posted.append(body)
                    entry = {'id': 'w%d' % len(router.calls), 'url': body['url'], 'is_healthy': True, 'load': 0}
                    entry.update((k, body[k]) for k in ('worker_type', 'bootstrap_port') if k in body)
                    router.entries.append(entry)
                    router.breakers.pop(body['url'], None)
                    self.answer(202, {})

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def urls(self):
        return [e['url'] for e in self.entries]

    def changes(self):
        return [call for call in self.calls if call[0] != 'GET']


@pytest.fixture
def router():
    fake = FakeRouter(A, B)
    yield fake
    fake.server.shutdown()


def run(capsys, router, **args):
    params = dict(router='r1', url=router.url, metrics_url=router.url + '/metrics', api_key=KEY, worker=A,
                  workers={'a': A, 'b': B}, timeout=5)
    params.update(args)
    return run_main(module.main, capsys, **params)


def test_drain_removes_the_entry_then_changes_nothing(router, capsys):
    result, out = run(capsys, router, state='absent', max_unavailable=1, _ansible_diff=True)
    assert result['changed'] and result['action'] == 'remove' and router.urls() == [B]
    assert result['diff'] == {'before': {'listed': True}, 'after': {'listed': False}}
    assert KEY not in out
    again, dummy = run(capsys, router, state='absent', max_unavailable=1)
    assert not again['changed'] and again['action'] == 'none'


def test_drain_in_check_mode_changes_nothing(router, capsys):
    result, dummy = run(capsys, router, state='absent', max_unavailable=1, _ansible_check_mode=True)
    assert result['changed'] and router.urls() == [A, B] and router.changes() == []


def test_drain_refused_before_anything_changes(router, capsys):
    router.entries[1]['is_healthy'] = False
    result, dummy = run(capsys, router, state='absent', max_unavailable=1)
    assert result['failed'] and 'draining a would leave 2 of 2 servers out of router r1 (out already: b)' in result['msg']
    assert 'sglang_router_max_unavailable is 1' in result['msg'] and router.changes() == []
    batch, dummy = run(capsys, router, state='absent', max_unavailable=1, draining=[A, B])
    assert batch['failed'] and router.urls() == [A, B]


def test_register_adds_a_missing_server_then_changes_nothing(router, capsys):
    router.entries = router.entries[1:]
    result, dummy = run(capsys, router, state='present', _ansible_diff=True)
    assert result['changed'] and result['action'] == 'add' and sorted(router.urls()) == [A, B]
    assert result['diff'] == {'before': {'listed': False}, 'after': {'listed': True}}
    again, dummy = run(capsys, router, state='present')
    assert not again['changed'] and again['breaker'] == 'closed'


def test_register_re_adds_an_entry_whose_breaker_is_open(router, capsys):
    router.breakers[A] = 1
    result, dummy = run(capsys, router, state='present')
    assert result['changed'] and result['action'] == 're-add' and result['breaker'] == 'open'
    assert ('DELETE', '/workers/w0') in router.calls and sorted(router.urls()) == [A, B]


def test_register_in_check_mode_changes_nothing(router, capsys):
    router.entries = router.entries[1:]
    result, dummy = run(capsys, router, state='present', _ansible_check_mode=True)
    assert result['changed'] and result['action'] == 'add' and router.urls() == [B] and router.changes() == []


def test_register_fails_when_the_server_never_gets_healthy(router, capsys):
    router.entries[0]['is_healthy'] = False
    result, dummy = run(capsys, router, state='present', timeout=1)
    assert result['failed'] and result['msg'] == 'router r1 does not report healthy %s after 1 s' % A


def test_a_router_that_does_not_answer_is_left_alone(capsys):
    result, dummy = run_main(module.main, capsys, router='r9', url='http://127.0.0.1:9', metrics_url='http://127.0.0.1:9/m',
                             worker=A, state='present', request_timeout=2)
    assert result == dict(result, changed=False, answered=False, action='none')


def test_a_wrong_key_fails(router, capsys):
    result, dummy = run(capsys, router, state='absent', api_key='sk-wrong')
    assert result['failed'] and 'answered HTTP 401' in result['msg']


def test_the_control_plane_key_manages_workers_where_the_router_has_it(router, capsys):
    router.key = 'cp-operators'
    result, out = run(capsys, router, state='absent', max_unavailable=1, control_plane_api_key='cp-operators')
    assert result['changed'] and router.urls() == [B] and not result.get('warnings')
    assert 'cp-operators' not in out


def test_a_router_without_its_control_plane_key_yet_is_managed_with_the_api_key(router, capsys, monkeypatch):
    """An upgrade to split keys: the servers' rolling deploy runs before router.yml gives the router its control-plane
    key; its /workers takes the API key until then, and the drain and register use it (and say so)."""
    warnings = record_warnings(monkeypatch)
    result, out = run(capsys, router, state='absent', max_unavailable=1, control_plane_api_key='cp-operators')
    assert result['changed'] and router.urls() == [B]
    assert warnings == ['router r1 refused the control-plane key and took the API key on /workers: it runs without '
                        'sglang_router_control_plane_api_key yet (playbooks/router.yml gives it the key)']
    again, dummy = run(capsys, router, state='present', control_plane_api_key='cp-operators')
    assert again['changed'] and again['action'] == 'add' and sorted(router.urls()) == [A, B]
    assert 'cp-operators' not in out and KEY not in out
    # a key neither the router's control plane nor its API takes still fails
    router.key = 'sk-other'
    refused, dummy = run(capsys, router, state='absent', max_unavailable=1, control_plane_api_key='cp-operators')
    assert refused['failed'] and 'answered HTTP 401' in refused['msg']


def test_a_server_moving_to_tls_is_drained_and_registered_under_its_new_url(router, capsys):
    """The router lists http://A; the inventory now says https://A (sglang_server_tls_cert set): the drain removes the
    http:// entry (and counts the other, still HTTP, server as up), the register puts the https:// one in."""
    tls_a = A.replace('http:', 'https:')
    drained, dummy = run(capsys, router, state='absent', max_unavailable=1, worker=tls_a, workers={'a': tls_a, 'b': B})
    assert drained['changed'] and drained['action'] == 'remove' and router.urls() == [B]
    registered, dummy = run(capsys, router, state='present', worker=tls_a, workers={'a': tls_a, 'b': B})
    assert registered['action'] == 'add' and sorted(router.urls()) == [B, tls_a]
    # a server moved to TLS without a drain: its old entry is replaced
    router.entries.append({'id': 'old', 'url': 'https://10.0.0.3:30000', 'is_healthy': True, 'load': 0})
    moved, dummy = run(capsys, router, state='present', worker='http://10.0.0.3:30000')
    assert moved['action'] == 're-add' and ('DELETE', '/workers/old') in router.calls
    assert 'http://10.0.0.3:30000' in router.urls() and 'https://10.0.0.3:30000' not in router.urls()


def test_status_reads_the_router_even_in_check_mode(router, capsys):
    router.breakers[B] = 1
    result, out = run(capsys, router, state='status', worker=None, workers={'a': A, 'b': B, 'c': 'http://c:1'},
                      _ansible_check_mode=True)
    assert not result['changed'] and KEY not in out and router.changes() == []
    text = result['status'].pop('text')
    assert result['status'] == {'url': router.url, 'up': True, 'ready': True, 'missing': ['http://c:1'],
                                'workers': [{'url': A, 'healthy': True, 'load': 0, 'breaker': 'closed'},
                                            {'url': B, 'healthy': True, 'load': 0, 'breaker': 'open'}]}
    assert text == (' r1: router ready=True %s; r1: worker %s healthy=True breaker=closed load=0; r1: worker %s '
                    'healthy=True breaker=open load=0; r1: worker http://c:1 not in the router; ' % (router.url, A, B))


def test_status_of_a_router_that_does_not_answer_or_refuses_the_key(router, capsys):
    result, dummy = run_main(module.main, capsys, router='r9', url='http://127.0.0.1:9', metrics_url='http://127.0.0.1:9/m',
                             state='status', workers={'a': A}, request_timeout=2)
    assert not result.get('failed') and result['status'] == {'url': 'http://127.0.0.1:9', 'up': False, 'ready': False,
                                                             'workers': [], 'missing': [A],
                                                             'text': ' r9: router ready=False http://127.0.0.1:9; '
                                                                     'r9: worker %s not in the router; ' % A}
    refused, dummy = run(capsys, router, state='status', api_key='sk-wrong')
    assert not refused.get('failed') and refused['status']['up'] is False and refused['status']['missing'] == [A, B]


def test_server_and_draining_hosts_name_the_urls(router, capsys):
    """The server's URL from its host in workers; draining hosts (or URLs) outside workers do not count."""
    result, dummy = run(capsys, router, state='absent', worker=None, server='a', draining=['a', 'b', 'elsewhere'],
                        max_unavailable=1, _ansible_check_mode=True)
    assert result['failed'] and 'draining a, b would leave 2 of 2 servers out of router r1' in result['msg']
    result, dummy = run(capsys, router, state='absent', worker=None, server='a', draining=['a', 'elsewhere'],
                        max_unavailable=1, _ansible_check_mode=True)
    assert not result.get('failed') and result['worker'] == A and result['action'] == 'remove'


def test_router_urls_from_its_launch_script(tmp_path):
    (tmp_path / 'sglang-router-main.sh').write_text(
        '#!/bin/sh\nexec /v/bin/python /etc/llmops/shim.py --host 10.0.0.9 --port 31000 --prometheus-host 0.0.0.0 '
        '--prometheus-port 29100 --worker-urls http://a:1\n')
    params = dict.fromkeys(module.ARGUMENT_SPEC)
    params.update(config_dir=str(tmp_path), port=30080)
    resolved = module.resolve(params)
    assert resolved['url'] == 'http://10.0.0.9:31000' and resolved['metrics_url'] == 'http://127.0.0.1:29100/metrics'
    params.update(config_dir=str(tmp_path / 'none'), host='0.0.0.0', port=30081)
    assert module.resolve(params)['url'] == 'http://127.0.0.1:30081'
    params.update(url='http://r:1', metrics_url='http://r:2/metrics')
    assert module.resolve(params)['url'] == 'http://r:1'


class LoadServer:
    """A server whose /get_load reports ``load`` requests."""

    def __init__(self, load):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = json.dumps([{'num_reqs': server.load, 'num_waiting_reqs': 0}]).encode()
                self.send_response(200 if self.path == '/get_load' else 404)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.load = load
        self.http = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.mark.parametrize('load, fail_on_timeout, failed, msg', [
    (0, True, False, 'ns1: idle '),
    (1, False, False, 'WARNING: ns1 still had 1 running or queued requests 0.3 s after it left the router; stopping it '
                      'anyway'),
    (1, True, True, 'ns1 still had 1 running or queued requests 0.3 s after it left the router; it keeps running, out '
                    'of the router.'),
])
def test_idle_waits_and_judges_the_wait(capsys, load, fail_on_timeout, failed, msg):
    server = LoadServer(load)
    try:
        result, dummy = run_main(module.main, capsys, state='idle', server='ns1', workers={'ns1': server.url},
                                 timeout=0.3, fail_on_timeout=fail_on_timeout, version='')
    finally:
        server.http.shutdown()
    assert bool(result.get('failed')) is failed and result['msg'].startswith(msg) and result['source'] == 'get_load'
    assert result['idle'] is (load == 0)


def test_idle_of_a_server_moving_to_tls_reads_it_where_it_serves_now(capsys):
    """Drained before its restart onto HTTPS, the server still serves plain HTTP: the wait reads it there."""
    server = LoadServer(0)
    try:
        result, dummy = run_main(module.main, capsys, state='idle', server='ns1', timeout=1, version='',
                                 workers={'ns1': server.url.replace('http:', 'https:')})
    finally:
        server.http.shutdown()
    assert not result.get('failed') and result['idle'] and result['worker'] == server.url


def test_idle_is_skipped_in_check_mode(capsys):
    result, dummy = run_main(module.main, capsys, state='idle', worker='http://127.0.0.1:9', _ansible_check_mode=True)
    assert result['msg'] == '' and result['idle'] is None and not result['changed']


def test_register_adds_a_prefill_with_its_type_and_bootstrap_port(router, capsys):
    router.entries = router.entries[1:]
    workers = {'a': {'url': A, 'worker_type': 'prefill', 'bootstrap_port': 9000},
               'b': {'url': B, 'worker_type': 'decode', 'bootstrap_port': None}}
    result, dummy = run(capsys, router, state='present', worker=None, server='a', workers=workers)
    assert result['changed'] and result['action'] == 'add' and result['worker'] == A
    assert result['decodes'] == {}  # the router lists B as a plain worker: no decode to check
    assert router.posted == [{'url': A, 'worker_type': 'prefill', 'bootstrap_port': 9000}]
    again, dummy = run(capsys, router, state='present', worker=None, server='a', workers=workers)
    assert not again['changed']
    # The same server as a decode now: its entry is added afresh with the new type.
    workers['a'] = {'url': A, 'worker_type': 'decode', 'bootstrap_port': None}
    moved, dummy = run(capsys, router, state='present', worker=None, server='a', workers=workers)
    assert moved['action'] == 're-add' and router.posted[-1] == {'url': A, 'worker_type': 'decode'}


def test_drain_refuses_to_take_the_last_decode_out(router, capsys):
    workers = {'a': {'url': A, 'worker_type': 'prefill', 'bootstrap_port': 8998},
               'b': {'url': B, 'worker_type': 'decode', 'bootstrap_port': None}}
    result, dummy = run(capsys, router, state='absent', worker=None, server='b', workers=workers, max_unavailable=1)
    assert result['failed'] and 'without a healthy decode server' in result['msg'] and router.changes() == []


class GaugeServer:
    """A PD server: /get_load says idle, its /metrics gauges hold ``gauges`` (name -> value), /health answers
    ``health``."""

    def __init__(self, gauges, health=200):
        server = self
        self.health = health
        self.health_probes = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == '/get_load':
                    data = json.dumps([{'num_reqs': 0, 'num_waiting_reqs': 0}]).encode()
                elif self.path == '/metrics':
                    data = ''.join('sglang:%s{tp_rank="0"} %s\n' % item for item in server.gauges.items()).encode()
                else:
                    data = b''
                status = 200
                if self.path == '/health':
                    server.health_probes += 1
                    status = server.health
                self.send_response(status)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.gauges = gauges
        self.http = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.mark.parametrize('mode, busy, idle', [
    ('prefill', 'num_prefill_bootstrap_queue_reqs', False),   # the bootstrap queue
    ('prefill', 'num_prefill_inflight_queue_reqs', False),
    ('prefill', 'num_decode_transfer_queue_reqs', True),     # the other side's queue: 0 on a real prefill anyway
    ('decode', 'num_decode_prealloc_queue_reqs', False),
    ('decode', 'num_decode_transfer_queue_reqs', False),
    ('decode', 'num_running_reqs', False),
    ('decode', None, True),
])
def test_idle_of_a_pd_server_reads_its_pd_queues(capsys, mode, busy, idle):
    gauges = dict((name, 0) for name in ('num_running_reqs', 'num_queue_reqs', 'num_prefill_bootstrap_queue_reqs',
                                         'num_prefill_inflight_queue_reqs', 'num_decode_prealloc_queue_reqs',
                                         'num_decode_transfer_queue_reqs'))
    if busy:
        gauges[busy] = 2
    server = GaugeServer(gauges)
    try:
        result, dummy = run_main(module.main, capsys, state='idle', server='ns1', timeout=0.3, version='0.5.15.post1',
                                 workers={'ns1': {'url': server.url, 'worker_type': mode, 'bootstrap_port': None}})
    finally:
        server.http.shutdown()
    assert result['idle'] is idle and result['source'] == 'metrics'
    assert result['requests'] == (0 if idle else 2)
    # A decode's gauges are refreshed by a /health probe before each read; a prefill's are not: SGLang counts the
    # probe's own request in its inflight queue (a prefill that never reads idle, found on an H100).
    assert (server.health_probes == 0) is (mode == 'prefill')


@pytest.mark.parametrize('health', [200, 503])
def test_a_prefill_back_in_its_router_checks_every_decode_it_lists(router, capsys, monkeypatch, health):
    decode = GaugeServer({}, health=health)
    pauses = []
    monkeypatch.setattr(module.time, 'sleep', pauses.append)
    router.entries = [{'id': 'w9', 'url': decode.url, 'is_healthy': True, 'load': 0, 'worker_type': 'decode'}]
    workers = {'a': {'url': A, 'worker_type': 'prefill', 'bootstrap_port': 8998},
               'd1': {'url': decode.url, 'worker_type': 'decode', 'bootstrap_port': None}}
    try:
        result, dummy = run(capsys, router, state='present', worker=None, server='a', workers=workers)
    finally:
        decode.http.shutdown()
    assert result['decodes'] == {decode.url: health} and result['action'] == 'add'
    if health == 200:
        assert not result.get('failed') and decode.health_probes == 1
    else:
        # Three probes, 2 s apart, then the host fails naming the decode; the prefill stays registered.
        assert result['failed'] and decode.health_probes == 3 and pauses.count(2.0) == 2
        assert 'prefill a is back in router r1, but decode d1 (%s: HTTP 503) does not pass /health' % decode.url \
            in result['msg']
        assert 'sglang_server_restart=true' in result['msg'] and A in router.urls()


@pytest.mark.parametrize('health, waited', [(200, True), (503, False)])
def test_a_decode_whose_health_generation_fails_is_not_waited_for(capsys, health, waited):
    # Stale gauges: 2 requests in its transfer queue for ever (its scheduler died with its prefill).
    server = GaugeServer({'num_running_reqs': 0, 'num_queue_reqs': 0, 'num_decode_prealloc_queue_reqs': 0,
                          'num_decode_transfer_queue_reqs': 2}, health=health)
    try:
        result, dummy = run_main(module.main, capsys, state='idle', server='d1', timeout=0.5, version='0.5.15.post1',
                                 workers={'d1': {'url': server.url, 'worker_type': 'decode', 'bootstrap_port': None}})
    finally:
        server.http.shutdown()
    assert not result.get('failed')
    if waited:
        assert result['source'] == 'metrics' and result['requests'] == 2 and not result['idle']
        assert 'still had 2 running or queued requests' in result['msg']
    else:
        assert result['source'] == 'not serving' and result['reads'] == 1 and server.health_probes == 1
        assert result['msg'].startswith('WARNING: d1 answers no /health generation (HTTP 503')
        assert result['msg'].endswith('its scheduler is gone and none of its requests can finish; stopping it without '
                                      'waiting')
