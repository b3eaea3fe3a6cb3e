"""The sglang_router role's filters: its start or restart, its result, the end of a drain's wait."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.filter.router import FilterModule

URL = 'http://127.0.0.1:30080'


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
