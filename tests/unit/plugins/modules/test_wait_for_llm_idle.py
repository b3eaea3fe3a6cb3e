"""The drain gate's live load (plugins/module_utils/_server_api.py load functions) and the wait of
plugins/modules/wait_for_llm_idle.py, against each release's routes recorded from its wheel."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _server_api as server_api
from ansible_collections.llmops.serving.tests.releases import releases


@pytest.mark.parametrize('version', releases.versions())
def test_auto_picks_get_load_exactly_where_the_release_routes_it(version):
    routed = '/get_load' in releases.load(version)['http']['routes']
    assert server_api.load_source('auto', version) == ('get_load' if routed else 'metrics')
    assert '/v1/loads' not in releases.load(version)['http']['routes']


def test_auto_without_a_version_probes_and_explicit_sources_are_kept():
    assert server_api.load_source('auto', None) == 'auto'
    assert server_api.load_source('auto', 'not a version') == 'auto'
    assert server_api.load_source('metrics', '0.5.15.post1') == 'metrics'


@pytest.mark.parametrize('data, count', [
    ([{'dp_rank': 0, 'num_reqs': 3, 'num_waiting_reqs': 1, 'num_tokens': 90}], 3),  # num_reqs holds the waiting ones
    ([{'dp_rank': 0, 'num_reqs': 2}, {'dp_rank': 1, 'num_reqs': 5}], 7),
    ({'num_reqs': 0}, 0),
    ([{'dp_rank': 0}], None),
    ('busy', None),
])
def test_requests_in_a_get_load_answer(data, count):
    assert server_api.requests_in_get_load(data) == count


class FakeServer:
    """A ``request`` callable: /get_load answers ``loads`` one after the other (or 404), /metrics
    shows ``gauges`` until a /health probe sets them to ``refreshed``."""

    def __init__(self, loads=None, gauges=(2, 0), refreshed=(0, 0)):
        self.loads, self.gauges, self.refreshed, self.calls = list(loads or []), gauges, refreshed, []

    def __call__(self, method, path, body=None, timeout=10.0):
        self.calls.append(path)
        if path == '/get_load':
            if not self.loads:
                return 404, b'{"detail":"Not Found"}'
            return 200, json.dumps([{'dp_rank': 0, 'num_reqs': self.loads.pop(0)}]).encode()
        if path == '/health':
            self.gauges = self.refreshed
            return 200, b''
        if path == '/metrics':
            return 200, ('sglang:num_running_reqs{tp_rank="0"} %d.0\nsglang:num_queue_reqs{tp_rank="0"} %d.0\n'
                         % self.gauges).encode()
        return 404, b''


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_get_load_is_read_until_it_is_zero():
    server, clock = FakeServer(loads=[3, 1, 0]), Clock()
    result = server_api.wait_until_idle(server, 300, 0.5, 'get_load', 5, clock=clock, sleep=clock.sleep)
    assert result == dict(idle=True, requests=0, source='get_load', elapsed=1.0, reads=3)
    assert '/metrics' not in server.calls


def test_where_get_load_is_not_routed_the_gauges_are_read_after_a_health_probe():
    # stale gauges (2 running, as last logged) would hold the gate; the probe refreshes them
    server, clock = FakeServer(loads=[]), Clock()
    result = server_api.wait_until_idle(server, 300, 0.5, 'auto', 5, clock=clock, sleep=clock.sleep)
    assert result['idle'] and result['source'] == 'metrics' and result['reads'] == 1
    assert server.calls == ['/get_load', '/health', '/metrics']


def test_a_server_still_busy_at_the_timeout_is_reported_not_failed():
    server, clock = FakeServer(loads=[], refreshed=(1, 2)), Clock()
    result = server_api.wait_until_idle(server, 3, 0.5, 'metrics', 5, clock=clock, sleep=clock.sleep)
    assert result == dict(idle=False, requests=3, source='metrics', elapsed=3.0, reads=7)


def test_a_stopped_server_refuses_the_connection_and_counts_as_idle():
    import socket
    from ansible_collections.llmops.serving.plugins.modules.wait_for_llm_idle import first_status
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]  # bound, not listening: the kernel refuses connections to it
        request = server_api.open_url_request('http://127.0.0.1:%d' % port, {})
        assert first_status(request, 5) == 'refused'
    assert first_status(FakeServer(loads=[2]), 5) == 200


class PDServer(FakeServer):
    """/get_load says idle; /metrics has the PD queue gauges of ``pd`` (name -> value) too."""

    def __init__(self, pd):
        super().__init__(loads=[0, 0], gauges=(0, 0))
        self.pd = pd

    def __call__(self, method, path, body=None, timeout=10.0):
        status, data = super().__call__(method, path, body, timeout)
        if path == '/metrics':
            data += ''.join('sglang:%s{tp_rank="0"} %s\n' % item for item in self.pd.items()).encode()
        return status, data


@pytest.mark.parametrize('mode, busy, idle', [
    ('prefill', 'num_prefill_bootstrap_queue_reqs', False),
    ('prefill', 'num_prefill_inflight_queue_reqs', False),
    ('decode', 'num_decode_prealloc_queue_reqs', False),
    ('decode', 'num_decode_transfer_queue_reqs', False),
    ('decode', 'num_prefill_inflight_queue_reqs', True),
    (None, 'num_decode_transfer_queue_reqs', True),  # a server that does both: /get_load, as before
])
def test_a_prefill_or_decode_is_idle_once_its_pd_queues_are_empty(mode, busy, idle):
    gauges = dict((name, 0) for name in ('num_prefill_bootstrap_queue_reqs', 'num_prefill_inflight_queue_reqs',
                                         'num_decode_prealloc_queue_reqs', 'num_decode_transfer_queue_reqs'))
    gauges[busy] = 1
    server, clock = PDServer(gauges), Clock()
    result = server_api.wait_until_idle(server, 1, 0.5, 'get_load', 5, clock=clock, sleep=clock.sleep, mode=mode)
    assert result['idle'] is idle and result['source'] == ('metrics' if mode else 'get_load')


@pytest.mark.parametrize('queued, idle', [(1, False), (0, True)])
def test_a_prefill_of_an_older_release_is_read_from_its_prealloc_named_bootstrap_gauge(queued, idle):
    # Older SGLang names the prefill's bootstrap queue num_prefill_prealloc_queue_reqs; 0.5.15.post1 renamed it.
    server, clock = PDServer({'num_prefill_prealloc_queue_reqs': queued, 'num_prefill_inflight_queue_reqs': 0}), Clock()
    result = server_api.wait_until_idle(server, 1, 0.5, 'get_load', 5, clock=clock, sleep=clock.sleep, mode='prefill')
    assert result['idle'] is idle and result['source'] == 'metrics'
