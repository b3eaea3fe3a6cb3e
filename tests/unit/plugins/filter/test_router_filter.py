"""The router_status filter: the status of sglang-router from the registered answers of ansible.builtin.uri."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.filter.router import FilterModule

router_status = FilterModule().filters()['router_status']
URL = 'http://127.0.0.1:30080'


def test_status_from_the_answers():
    workers = {'json': {'workers': [{'url': 'http://a:30000', 'is_healthy': True, 'load': 2}]}, 'status': 200}
    metrics = {'content': 'smg_worker_cb_state{worker="http://a:30000"} 1\n', 'status': 200}
    status = router_status({'status': 200}, workers, metrics, URL, {'a': 'http://a:30000', 'b': 'http://b:30000'})
    assert status == {'url': URL, 'up': True, 'ready': True, 'missing': ['http://b:30000'],
                      'workers': [{'url': 'http://a:30000', 'healthy': True, 'load': 2, 'breaker': 'open'}]}


def test_status_of_a_router_that_does_not_answer():
    failed = {'status': -1, 'msg': 'Status code was -1'}
    status = router_status(failed, failed, failed, URL, {'a': 'http://a:30000'})
    assert status == {'url': URL, 'up': False, 'ready': False, 'workers': [], 'missing': ['http://a:30000']}
    assert router_status({}, None, None, URL, None)['up'] is False


def test_decision_result_and_drain_outcome_filters():
    filters = FilterModule().filters()
    plan = {'launcher': 'process', 'url': URL, 'workers': {'a': 'http://a:30000'}, 'process': {'name': 'r'}}
    decided = filters['router_decision'](plan, {'changed': False}, [{'changed': False}], 'yes')
    assert decided['state'] == 'restarted' and decided['process'] == {'name': 'r', 'state': 'restarted'}
    assert filters['router_decision'](plan, {'changed': False}, None)['state'] == 'started'
    assert filters['router_result'](decided, {'json': 'ok'}) == {
        'state': 'restarted', 'launcher': 'process', 'url': URL, 'workers': ['http://a:30000'], 'ready': 'ok'}
    outcome = filters['router_drain_outcome']({'idle': False, 'requests': 1}, 'h', '300', 'false')
    assert outcome['failed'] is False and outcome['msg'].startswith('WARNING: h still had 1 running or queued requests 300 s')
    assert filters['router_drain_outcome']({'idle': False, 'requests': 1}, 'h', 300, 'true')['failed'] is True
