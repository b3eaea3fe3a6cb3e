"""sglang-router's worker list as drain, register, status and the router's plan see it (module_utils/_router.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _router

WORKERS = {'a': 'http://a:30000', 'b': 'http://b:30000', 'c': 'http://c:30000'}


def listing(**healthy):
    return [{'id': 'id-' + host, 'url': WORKERS[host], 'is_healthy': up, 'load': 0} for host, up in healthy.items()]


def test_entry_and_health_of_a_worker():
    listed = listing(a=True, b=False)
    assert _router.entry_of(listed, WORKERS['b'])['id'] == 'id-b'
    assert _router.entry_of(listed, WORKERS['c']) is None
    assert _router.healthy(listed, WORKERS['a']) and not _router.healthy(listed, WORKERS['b'])
    assert not _router.healthy(listed, WORKERS['c'])


def test_out_of_router_counts_unhealthy_and_unlisted_once():
    out_now, out_after = _router.out_of_router(WORKERS, listing(a=True, b=False), [WORKERS['a'], WORKERS['c']])
    assert out_now == [WORKERS['b'], WORKERS['c']]
    assert out_after == [WORKERS['b'], WORKERS['c'], WORKERS['a']]


def test_a_server_moving_to_or_from_tls_is_the_same_worker_under_either_scheme():
    """The rollout that moves a fleet to TLS: the router lists http://host:port, the inventory says https://host:port."""
    tls = dict((host, url.replace('http:', 'https:')) for host, url in WORKERS.items())
    listed = listing(a=True, b=True, c=False)
    assert _router.worker_address('https://a:30000/') == 'a:30000' == _router.worker_address(WORKERS['a'])
    assert _router.other_scheme(tls['a']) == WORKERS['a'] and _router.other_scheme(WORKERS['a']) == tls['a']
    assert _router.entry_of(listed, tls['a'])['id'] == 'id-a'
    assert _router.entry_of(listed + [{'id': 'new', 'url': tls['a']}], tls['a'])['id'] == 'new'  # its own URL first
    assert not _router.healthy(listed, tls['a'])  # the register waits for the https:// entry itself
    assert _router.out_of_router(tls, listed, [tls['a']]) == ([tls['c']], [tls['c'], tls['a']])
    assert _router.drain_refusal('r1', tls, listing(a=True, b=True, c=True), [tls['a']], 1) is None
    assert _router.register_action(listed, tls['a'], 'closed') == _router.RE_ADD
    assert _router.status('http://r', 200, listed, {}, tls)['missing'] == []


def test_launch_files_that_differ_in_their_workers_alone():
    script = '#!/bin/sh\n# x\nexec /v/bin/python /s.py --host 0.0.0.0 --port 30080 --worker-urls %s --retry-max-retries 3\n'
    unit = '[Service]\nExecStart=/v/bin/python /s.py --pd-disaggregation --prefill %s 8998 --decode %s --x 1\n'
    same = _router.launch_without_workers
    assert same(script % 'http://a:1 http://b:1') == same(script % 'https://a:1') != same(script.replace('3', '4') % 'x')
    assert same(unit % ('http://a:1', 'http://b:1')) == same(unit % ('https://a:1', 'https://b:1'))
    assert same(unit % ('http://a:1', 'http://b:1')).endswith('ExecStart=/v/bin/python /s.py --pd-disaggregation --x 1')
    assert same('exec "unclosed\n') is None
    listed = [{'url': 'https://a:1', 'is_healthy': True}, {'url': 'https://b:1', 'is_healthy': False}]
    assert _router.lists_every_worker(listed, {'a': 'https://a:1'})
    assert not _router.lists_every_worker(listed, {'a': 'https://a:1', 'b': 'https://b:1'})
    assert not _router.lists_every_worker(listed, {'a': 'http://a:1'})


@pytest.mark.parametrize('healthy, draining, max_unavailable, refused', [
    (dict(a=True, b=True, c=True), ['a'], 1, False),
    (dict(a=True, b=True, c=True), ['a', 'b'], 1, True),
    (dict(a=True, b=True, c=True), ['a', 'b'], 2, False),
    (dict(a=True, b=False, c=True), ['a'], 1, True),
    (dict(a=True, c=True), ['a'], 1, True),      # b is not listed: out already
    (dict(b=True, c=True), ['a'], 1, False),     # a already gone (an earlier run): still one out
    (dict(a=False, b=False, c=True), ['a'], 1, False),  # a and b crashed: draining a (to restart it) takes nothing
    (dict(a=False, b=False, c=True), ['a', 'c'], 1, True),
])
def test_drain_refusal(healthy, draining, max_unavailable, refused):
    message = _router.drain_refusal('r1', WORKERS, listing(**healthy), [WORKERS[h] for h in draining], max_unavailable)
    assert (message is not None) == refused


def test_drain_refusal_message_names_hosts_and_the_variable():
    message = _router.drain_refusal('r1', WORKERS, listing(a=True, b=False, c=True), [WORKERS['a']], 1)
    assert message == ('draining a would leave 2 of 3 servers out of router r1 (out already: b); '
                       'sglang_router_max_unavailable is 1: use smaller batches (llmops_serial) or bring the servers '
                       'that are out back first.')
    message = _router.drain_refusal('r1', WORKERS, listing(a=True, b=True, c=True), [WORKERS['a'], WORKERS['b']], 1)
    assert 'draining a, b would leave 2 of 3 servers out of router r1 (out already: none)' in message
    assert _router.drain_refusal('r1', WORKERS, [], [WORKERS['a']], None) is None


@pytest.mark.parametrize('healthy, breaker, action', [
    (dict(b=True), None, _router.ADD),
    (dict(a=True), None, _router.KEEP),
    (dict(a=True), 'closed', _router.KEEP),
    (dict(a=False), 'closed', _router.KEEP),
    (dict(a=True), 'open', _router.RE_ADD),
    (dict(a=True), 'half-open', _router.RE_ADD),
    (dict(b=True), 'open', _router.ADD),
])
def test_register_action(healthy, breaker, action):
    assert _router.register_action(listing(**healthy), WORKERS['a'], breaker) == action


def test_status_rows_breakers_and_missing():
    status = _router.status('http://127.0.0.1:30080', 200, listing(a=True, b=False), {WORKERS['b']: 'open'}, WORKERS)
    assert status == {'url': 'http://127.0.0.1:30080', 'up': True, 'ready': True, 'missing': [WORKERS['c']],
                      'workers': [{'url': WORKERS['a'], 'healthy': True, 'load': 0, 'breaker': 'closed'},
                                  {'url': WORKERS['b'], 'healthy': False, 'load': 0, 'breaker': 'open'}]}
    assert _router.status('u', 503, [], {}, {})['up'] and not _router.status('u', 503, [], {}, {})['ready']
    assert not _router.status('u', -1, [], {}, {})['up']


@pytest.mark.parametrize('workers, local_hosts, problem', [
    ({}, [], 'no hosts in inventory group servers (sglang_router_worker_group): the router would have no workers'),
    ({'r': 'http://127.0.0.1:30000', 'a': 'http://10.0.0.1:30000'}, [], None),
    ({'a': 'http://127.0.0.1:30000', 'b': 'http://localhost:30000', 'c': 'http://[::1]:30000', 'd': 'http://localhostx:1'},
     [], 'servers a, b, c listen on a loopback address (sglang_server_host) the router on r cannot reach: set '
         'sglang_server_host (e.g. 0.0.0.0) or sglang_router_worker_url for them'),
    ({'a': 'http://127.0.0.1:30000', 'b': 'http://127.0.0.2:30000'}, ['a'], 'servers b listen on a loopback'),
])
def test_worker_problem(workers, local_hosts, problem):
    found = _router.worker_problem('r', 'servers', workers, local_hosts)
    assert (found is None) if problem is None else found.startswith(problem)


def router_options(**overrides):
    options = _router.with_defaults(dict(workers={'a': 'http://a:30000'}, policy='round_robin',
                                         extra_args=['--log-level', 'debug']))
    options.update(overrides)
    return options


def test_defaults_fill_null_options_and_name_the_log():
    options = _router.with_defaults(dict(name='r2', port=None, log_path=None, extra_args=None, restart_on=None))
    assert options['port'] == 30080 and options['extra_args'] == [] and options['restart_on'] == []
    assert options['log_path'] == '/var/log/llmops/sglang-router-r2.log' and options['state'] == 'started'


def test_router_files_name_argv_and_files():
    workers = {'a': 'http://a:30000', 'b': 'http://b:30000'}
    planned = _router.router_files(router_options(), workers, 'process')
    paths, argv = planned['paths'], planned['argv']
    assert paths == {'unit': 'llmops-sglang-router-main.service', 'script': '/etc/llmops/sglang-router-main.sh',
                     'key_file': '/etc/llmops/sglang-router-main.key', 'shim': '/etc/llmops/llmops_router_launch.py',
                     'control_plane_key_file': '/etc/llmops/sglang-router-main.control-plane.key',
                     'pidfile': '/run/llmops/sglang-router-main.pid'}
    assert argv[:6] == ['/opt/llmops/sglang-router/bin/python', '/etc/llmops/llmops_router_launch.py',
                        '--host', '0.0.0.0', '--port', '30080']
    assert argv[argv.index('--health-check-endpoint') + 1] == '/health'
    assert argv[argv.index('--policy') + 1] == 'round_robin'
    assert argv[-5:] == ['--worker-urls', 'http://a:30000', 'http://b:30000', '--log-level', 'debug']
    assert planned['directories'] == ['/etc/llmops', '/var/log/llmops']
    shim, script = planned['files']
    assert shim['path'] == '/etc/llmops/llmops_router_launch.py' and shim['mode'] == 0o755
    assert 'KEY_FILE = "/etc/llmops/sglang-router-main.key"' in shim['content']
    assert 'control-plane' not in shim['content']  # the shim of 1.0.0: upgrading restarts no router
    assert script['path'] == '/etc/llmops/sglang-router-main.sh' and script['mode'] == 0o755
    assert script['content'].startswith('#!/bin/sh\n# Ansible managed\n')
    assert "exec /opt/llmops/sglang-router/bin/python /etc/llmops/llmops_router_launch.py --host 0.0.0.0" in script['content']
    unit = _router.router_files(router_options(extra_args=[], stop_timeout=30), {'a': 'http://a:30000'}, 'systemd')
    launch = unit['files'][1]
    assert launch['path'] == '/etc/systemd/system/llmops-sglang-router-main.service' and launch['mode'] == 0o644
    assert 'ExecStart="/opt/llmops/sglang-router/bin/python" ' in launch['content'] and '(1 workers)' in launch['content']
    assert 'TimeoutStopSec=30\n' in launch['content'] and unit['argv'][-2:] == ['--worker-urls', 'http://a:30000']


@pytest.mark.parametrize('launcher', ['process', 'systemd'])
def test_launch_endpoints_read_back_what_the_launch_file_sets(launcher):
    planned = _router.router_files(router_options(host='10.0.0.9', port=31000, prometheus_port=29100), WORKERS, launcher)
    assert _router.launch_endpoints(planned['files'][1]['content']) == {
        'host': '10.0.0.9', 'port': '31000', 'prometheus_host': '127.0.0.1', 'prometheus_port': '29100'}
    assert _router.launch_endpoints(None) == {} and _router.launch_endpoints('#!/bin/sh\n') == {}


@pytest.mark.parametrize('state, restart, changes, expected', [
    ('started', False, [False, False], 'started'),
    ('started', False, [False, True], 'restarted'),
    ('started', True, [], 'restarted'),
    ('restarted', False, [], 'restarted'),
    ('stopped', True, [True], 'stopped'),
])
def test_process_state(state, restart, changes, expected):
    assert _router.process_state(state, restart, changes) == expected


@pytest.mark.parametrize('comm, found, manager', [
    ('systemd', [], 'systemd'), ('tini', ['/run/systemd/system/'], 'process'), ('', ['/run/systemd/system/'], 'systemd'),
    ('init', [], 'process'), ('bash', ['/dev/.systemd/'], 'systemd'),
])
def test_service_manager(comm, found, manager):
    assert _router.service_manager(read=lambda path: comm, exists=lambda path: path in found) == manager


def test_wait_idle_counts_reads_until_idle():
    loads = iter([2, 2, 1, 0])  # the first answers the probe

    def request(method, path, timeout=None, **kwargs):
        if path == '/get_load':
            return 200, ('[{"num_reqs": %d, "num_waiting_reqs": 0}]' % next(loads)).encode()
        raise AssertionError(path)
    clock = iter([0.0, 0.1, 0.6, 1.1])
    result = _router.wait_idle(request, 300, 0.5, 'auto', 5, clock=lambda: next(clock), sleep=lambda s: None)
    assert result['idle'] and result['reads'] == 3 and result['source'] == 'get_load' and result['requests'] == 0


def test_drain_outcome_messages():
    busy = {'idle': False, 'requests': 3}
    assert _router.drain_outcome(busy, 'gpu1', 300, True) == {'failed': True, 'msg': (
        'gpu1 still had 3 running or queued requests 300 s after it left the router; it keeps running, out of the router.')}
    assert _router.drain_outcome(busy, 'gpu1', 300, False) == {'failed': False, 'msg': (
        'WARNING: gpu1 still had 3 running or queued requests 300 s after it left the router; stopping it anyway (SGLang '
        'finishes running requests on SIGTERM within the stop timeout).')}
    idle = {'idle': True, 'elapsed': 1.5, 'source': 'get_load', 'reads': 2}
    assert _router.drain_outcome(idle, 'gpu1', 300, True) == {
        'failed': False, 'msg': 'gpu1: idle 1.5 s after it left the router (get_load, 2 reads)'}
    assert _router.drain_outcome({'skipped': True}, 'gpu1', 300, True) == {'failed': False, 'msg': ''}
    assert _router.drain_outcome(None, 'gpu1', 300, False) == {'failed': False, 'msg': ''}


def test_the_shim_passes_the_control_plane_key_from_its_own_file(tmp_path):
    """The shim run as the router would be: the API key and the control-plane key reach the router's argv, from their
    files, and neither is on the shim's own command line."""
    options = router_options(control_plane_api_key='cp-secret')
    planned = _router.router_files(options, {'a': 'http://a:30000'}, 'process')
    paths = dict(planned['paths'], key_file=str(tmp_path / 'k'), control_plane_key_file=str(tmp_path / 'cp'))
    shim = tmp_path / 'shim.py'
    shim.write_text(_router.shim_text(options, paths))
    (tmp_path / 'k').write_text('data-key\n')
    (tmp_path / 'cp').write_text('cp-secret\n')
    fake = tmp_path / 'sglang_router'
    fake.mkdir()
    (fake / '__init__.py').write_text('')
    (fake / 'launch_router.py').write_text('import json, sys\nprint(json.dumps(sys.argv[1:]))\n')
    out = subprocess.run([sys.executable, str(shim), '--port', '1'], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert json.loads(out.stdout) == ['--port', '1', '--api-key', 'data-key', '--control-plane-api-keys',
                                      'llmops:llmops-operators:admin:cp-secret']


# ---------------------------------------------------------------- prefill/decode disaggregation
PD_WORKERS = {'p1': {'url': 'http://p1:30000', 'worker_type': 'prefill', 'bootstrap_port': 8998},
              'p2': {'url': 'http://p2:30000', 'worker_type': 'prefill', 'bootstrap_port': None},
              'd1': {'url': 'http://d1:30000', 'worker_type': 'decode', 'bootstrap_port': None}}


def test_worker_entries_of_urls_and_pd_dicts():
    assert _router.worker_entry('http://a:1') == dict(url='http://a:1', worker_type=None, bootstrap_port=None)
    assert _router.worker_entry(PD_WORKERS['p2'])['bootstrap_port'] == 8998  # SGLang's default
    assert _router.worker_entry({'url': 'u', 'worker_type': 'decode', 'bootstrap_port': 9000})['bootstrap_port'] is None
    assert _router.worker_url_map(PD_WORKERS) == {'p1': 'http://p1:30000', 'p2': 'http://p2:30000', 'd1': 'http://d1:30000'}
    assert _router.pd_mode(PD_WORKERS) and not _router.pd_mode(WORKERS) and not _router.pd_mode({})


def test_pd_router_argv_prefills_with_bootstrap_ports_then_decodes_and_side_policies():
    options = router_options(prefill_policy='cache_aware', decode_policy='power_of_two')
    argv = _router.router_files(options, PD_WORKERS, 'process')['argv']
    assert '--worker-urls' not in argv
    tail = argv[argv.index('--prefill-policy'):]
    assert tail == ['--prefill-policy', 'cache_aware', '--decode-policy', 'power_of_two', '--pd-disaggregation',
                    '--prefill', 'http://p1:30000', '8998', '--prefill', 'http://p2:30000', '8998',
                    '--decode', 'http://d1:30000', '--log-level', 'debug']
    plain = _router.router_argv(_router.with_defaults(router_options(prefill_policy=None)), PD_WORKERS,
                                _router.router_paths(_router.with_defaults(router_options())))
    assert '--prefill-policy' not in plain and '--decode-policy' not in plain and '--pd-disaggregation' in plain
    # A router without PD workers renders what it rendered before 1.1.0 (no restart on upgrade).
    assert '--pd-disaggregation' not in _router.router_files(options, WORKERS, 'process')['argv']


@pytest.mark.parametrize('workers, problem', [
    (PD_WORKERS, None),
    (dict(PD_WORKERS, a='http://a:30000'), 'servers a have no sglang_server_disaggregation_mode'),
    ({'p1': PD_WORKERS['p1']}, 'a router in PD mode needs at least one decode server; its servers are p1 (prefill)'),
    ({'d1': PD_WORKERS['d1']}, 'a router in PD mode needs at least one prefill server'),
])
def test_pd_worker_problems(workers, problem):
    found = _router.worker_problem('r', 'sglang_servers', workers, [])
    assert found == problem if problem is None else problem in found


def pd_listing(**healthy):
    return [{'id': 'id-' + h, 'url': PD_WORKERS[h]['url'], 'is_healthy': up, 'load': 0,
             'worker_type': PD_WORKERS[h]['worker_type'],
             'bootstrap_port': 8998 if PD_WORKERS[h]['worker_type'] == 'prefill' else None} for h, up in healthy.items()]


def test_drain_refused_where_it_would_leave_no_prefill_or_no_decode():
    listed = pd_listing(p1=True, p2=True, d1=True)
    assert _router.drain_refusal('r1', PD_WORKERS, listed, ['http://p1:30000'], 1) is None
    message = _router.drain_refusal('r1', PD_WORKERS, listed, ['http://d1:30000'], 1)
    assert message == ('draining d1 would leave router r1 without a healthy decode server (out already: none): drain '
                       'another server first, or bring the servers that are out back first.')
    message = _router.drain_refusal('r1', PD_WORKERS, pd_listing(p1=True, p2=False, d1=True), ['http://p1:30000'], 5)
    assert 'without a healthy prefill server (out already: p2)' in message
    # No healthy decode left already (its scheduler died): draining it to restart it takes nothing away.
    assert _router.drain_refusal('r1', PD_WORKERS, pd_listing(p1=True, p2=True, d1=False),
                                 [PD_WORKERS['d1']['url']], 1) is None
    # Nor does draining two servers that are both out already, whatever sglang_router_max_unavailable says.
    assert _router.drain_refusal('r1', PD_WORKERS, pd_listing(p1=False, p2=False, d1=True),
                                 [PD_WORKERS['p1']['url'], PD_WORKERS['p2']['url']], 1) is None


def test_register_re_adds_an_entry_of_another_type_or_bootstrap_port():
    listed = pd_listing(p1=True, d1=True)
    assert _router.register_action(listed, 'http://p1:30000', 'closed', 'prefill', 8998) == _router.KEEP
    assert _router.register_action(listed, 'http://p1:30000', 'closed', 'prefill', 9000) == _router.RE_ADD
    assert _router.register_action(listed, 'http://p1:30000', 'closed', 'decode', None) == _router.RE_ADD
    assert _router.register_action(listed, 'http://d1:30000', 'closed', 'decode', None) == _router.KEEP
    assert _router.register_action(listed, 'http://p2:30000', None, 'prefill', 8998) == _router.ADD


def test_status_of_a_pd_router_names_types_and_pairs():
    status = _router.status('http://r:1', 200, pd_listing(p1=True, p2=False, d1=True), {}, PD_WORKERS)
    assert status['workers'][0]['worker_type'] == 'prefill' and status['workers'][0]['bootstrap_port'] == 8998
    assert status['pairs'] == {'prefill': ['http://p1:30000'], 'decode': ['http://d1:30000']}
    assert 'pairs' not in _router.status('http://r:1', 200, listing(a=True), {}, WORKERS)
