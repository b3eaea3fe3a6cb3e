"""sglang-router's worker list as drain, register, status and the router's plan see it (module_utils/_router.py)."""

from __future__ import annotations

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


@pytest.mark.parametrize('healthy, draining, max_unavailable, refused', [
    (dict(a=True, b=True, c=True), ['a'], 1, False),
    (dict(a=True, b=True, c=True), ['a', 'b'], 1, True),
    (dict(a=True, b=True, c=True), ['a', 'b'], 2, False),
    (dict(a=True, b=False, c=True), ['a'], 1, True),
    (dict(a=True, c=True), ['a'], 1, True),      # b is not listed: out already
    (dict(b=True, c=True), ['a'], 1, False),     # a already gone (an earlier run): still one out
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


def plan_options(**overrides):
    options = dict((name, 1) for name in _router.PLAN_OPTIONS)
    options.update(sglang_router_name='main', sglang_router_config_dir='/etc/llmops', sglang_router_run_dir='/run/llmops',
                   sglang_router_venv='/opt/llmops/sglang-router', sglang_router_log_path='/var/log/llmops/r.log',
                   sglang_router_host='0.0.0.0', sglang_router_port=30080, sglang_router_policy='round_robin',
                   sglang_router_extra_args=['--log-level', 'debug'])
    options.update(overrides)
    return options


def test_router_plan_names_argv_and_files():
    plan = _router.router_plan(plan_options(), {'a': 'http://a:30000', 'b': 'http://b:30000'}, 'process')
    assert plan['unit'] == 'llmops-sglang-router-main.service' and plan['launcher'] == 'process'
    assert plan['script'] == '/etc/llmops/sglang-router-main.sh' and plan['key_file'] == '/etc/llmops/sglang-router-main.key'
    assert plan['pidfile'] == '/run/llmops/sglang-router-main.pid'
    assert plan['argv'][:6] == ['/opt/llmops/sglang-router/bin/python', '/etc/llmops/llmops_router_launch.py',
                                '--host', '0.0.0.0', '--port', 30080]
    assert plan['argv'][plan['argv'].index('--health-check-endpoint') + 1] == '/health'
    assert plan['argv'][plan['argv'].index('--policy') + 1] == 'round_robin'
    assert plan['argv'][-5:] == ['--worker-urls', 'http://a:30000', 'http://b:30000', '--log-level', 'debug']
    assert plan['directories'] == ['/etc/llmops', '/var/log/llmops', '/opt/llmops']
    assert plan['templates'] == [
        {'src': 'llmops_router_launch.py.j2', 'dest': '/etc/llmops/llmops_router_launch.py', 'mode': '0755'},
        {'src': 'launch.sh.j2', 'dest': '/etc/llmops/sglang-router-main.sh', 'mode': '0755'}]
    unit = _router.router_plan(plan_options(sglang_router_extra_args=[]), {'a': 'http://a:30000'}, 'systemd')
    assert unit['templates'][1] == {'src': 'sglang-router.service.j2', 'mode': '0644',
                                    'dest': '/etc/systemd/system/llmops-sglang-router-main.service'}
    assert unit['argv'][-2:] == ['--worker-urls', 'http://a:30000']


def test_router_plan_pip_url_and_process():
    plan = _router.router_plan(plan_options(sglang_router_version='0.3.2', sglang_router_python='/usr/bin/python3',
                                            sglang_router_wheelhouse=''), {'a': 'http://a:30000'}, 'process')
    assert plan['pip'] == {'name': 'sglang-router==0.3.2', 'virtualenv': '/opt/llmops/sglang-router',
                           'virtualenv_command': '/usr/bin/python3 -m venv'}
    assert plan['url'] == 'http://127.0.0.1:30080' and plan['ready_url'] == 'http://127.0.0.1:30080/readiness'
    assert plan['process'] == {'name': 'sglang-router-main', 'command': ['/etc/llmops/sglang-router-main.sh'],
                               'pidfile': '/run/llmops/sglang-router-main.pid'}
    offline = _router.router_plan(plan_options(sglang_router_wheelhouse='/srv/wheels', sglang_router_host='10.0.0.2'),
                                  {'a': 'http://a:30000'}, 'systemd')
    assert offline['pip']['extra_args'] == '--no-index --find-links /srv/wheels'
    assert offline['url'] == 'http://10.0.0.2:30080'


@pytest.mark.parametrize('files, changes, restart, state', [
    ({'changed': False}, [{'changed': False}, {'skipped': True}, {'changed': False}], False, 'started'),
    ({'changed': True}, [], False, 'restarted'),
    ({'changed': False}, [{'changed': False}, {'changed': True}, {'skipped': True}], False, 'restarted'),
    (None, [None], True, 'restarted'),
])
def test_decision(files, changes, restart, state):
    plan = {'launcher': 'process', 'process': {'name': 'sglang-router-main'}}
    decided = _router.decision(plan, files, changes, restart)
    assert decided['state'] == state and decided['process'] == {'name': 'sglang-router-main', 'state': state}
    assert decided['files_changed'] is bool((files or {}).get('changed')) and decided['launcher'] == 'process'
    assert plan['process'] == {'name': 'sglang-router-main'}


def test_result():
    decided = {'state': 'started', 'launcher': 'systemd', 'url': 'http://127.0.0.1:30080', 'workers': {'a': 'http://a:1'},
               'argv': []}
    assert _router.result(decided, {'status': 200, 'json': {'ok': True}}) == {
        'state': 'started', 'launcher': 'systemd', 'url': 'http://127.0.0.1:30080', 'workers': ['http://a:1'],
        'ready': {'ok': True}}
    assert _router.result(decided, {'skipped': True})['ready'] is None


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
