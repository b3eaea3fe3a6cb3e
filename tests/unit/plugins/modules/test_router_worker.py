"""Module router_worker against a fake sglang-router (worker API and /metrics) on a local port."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.modules import router_worker as module
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main

KEY = 'sk-router-key'
A = 'http://10.0.0.1:30000'
B = 'http://10.0.0.2:30000'


class FakeRouter:
    """Entries {id, url, is_healthy}; a new entry is healthy at once; breakers {url: code} on /metrics."""

    def __init__(self, *urls):
        self.entries = [{'id': 'w%d' % n, 'url': url, 'is_healthy': True, 'load': 0} for n, url in enumerate(urls)]
        self.breakers = {}
        self.calls = []
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
                if self.headers.get('Authorization') != 'Bearer ' + KEY:
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
                    router.entries.append({'id': 'w%d' % len(router.calls), 'url': body['url'], 'is_healthy': True, 'load': 0})
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


def test_status_reads_the_router_even_in_check_mode(router, capsys):
    router.breakers[B] = 1
    result, out = run(capsys, router, state='status', worker=None, workers={'a': A, 'b': B, 'c': 'http://c:1'},
                      _ansible_check_mode=True)
    assert not result['changed'] and KEY not in out and router.changes() == []
    assert result['status'] == {'url': router.url, 'up': True, 'ready': True, 'missing': ['http://c:1'],
                                'workers': [{'url': A, 'healthy': True, 'load': 0, 'breaker': 'closed'},
                                            {'url': B, 'healthy': True, 'load': 0, 'breaker': 'open'}]}


def test_status_of_a_router_that_does_not_answer_or_refuses_the_key(router, capsys):
    result, dummy = run_main(module.main, capsys, router='r9', url='http://127.0.0.1:9', metrics_url='http://127.0.0.1:9/m',
                             state='status', workers={'a': A}, request_timeout=2)
    assert not result.get('failed') and result['status'] == {'url': 'http://127.0.0.1:9', 'up': False, 'ready': False,
                                                             'workers': [], 'missing': [A]}
    refused, dummy = run(capsys, router, state='status', api_key='sk-wrong')
    assert not refused.get('failed') and refused['status']['up'] is False and refused['status']['missing'] == [A, B]
