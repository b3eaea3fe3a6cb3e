# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The speculation guard's decisions (module_utils/_guard.py)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _guard

FLEET = ['s1', 's2', 's3']
BIG = ['s%d' % i for i in range(1, 11)]


def decide(state, host, collapsed=None, now=1000.0, fleet=None, **kw):
    return _guard.decide(state, host, fleet or FLEET, collapsed or [host], now, **kw)


def test_one_collapsed_host_is_remediated_and_held_in_progress():
    d, state = decide(None, 's1')
    assert (d['action'], d['reason']) == ('remediate', 'remediate')
    assert state['in_progress'] == {'host': 's1', 'since': 1000.0, 'owner': None}
    assert state['remediations'] == [{'host': 's1', 'started': 1000.0, 'outcome': None}]


def test_unknown_host_is_ignored_and_changes_nothing():
    d, state = decide(None, 'intruder', collapsed=['intruder', 's1', 's2'])
    assert (d['action'], d['reason']) == ('ignore', 'unknown_host')
    assert 'does not know' in d['msg']
    assert state == _guard.empty_state()


@pytest.mark.parametrize('collapsed, reason', [
    (['s1'], 'remediate'),
    (['s1', 's2'], 'fleet_wide'),        # 2 of 3 > half
    (['s1', 's2', 's3'], 'fleet_wide'),
    (['s1', 'unknown'], 'remediate'),    # unknown hosts do not count
])
def test_fleet_share(collapsed, reason):
    d, state = decide(None, 's1', collapsed=collapsed)
    assert d['reason'] == reason
    if reason == 'fleet_wide':
        assert d['action'] == 'ignore' and d['fleet_alert'] is True
        assert state['in_progress'] is None and state['remediations'] == []


def test_fleet_wide_alert_once_per_episode_and_staggered_reports_count():
    d1, state = decide(None, 's1', collapsed=['s1', 's2', 's3'])
    d2, state = decide(state, 's2', collapsed=['s2'], now=1010.0)
    assert d1['fleet_alert'] and d2['reason'] == 'fleet_wide' and not d2['fleet_alert']
    # Reports that arrive one by one within the window add up to the fleet share.
    d, state = decide(None, 's1', now=0.0)
    assert d['reason'] == 'remediate'
    d, state = decide(state, 's2', now=10.0)
    assert d['reason'] == 'busy'
    d, state = decide(state, 's3', now=20.0)
    assert d['reason'] == 'fleet_wide' and d['collapsed'] == ['s2', 's3']


def test_a_host_remediated_within_the_cooldown_does_not_count_to_the_share():
    # s1 was remediated; Alertmanager still lists its alert with the next host's.
    dummy, state = decide(None, 's1', now=0.0)
    state = _guard.finish(state, 's1', 'remediated', 30.0)
    d, state = decide(state, 's2', collapsed=['s1', 's2'], now=120.0)
    assert d['reason'] == 'remediate' and d['collapsed'] == ['s2']


def test_a_host_whose_remediation_failed_still_counts_to_the_share():
    dummy, state = decide(None, 's1', now=0.0)
    state = _guard.finish(state, 's1', 'failed', 30.0)
    d, state = decide(state, 's2', collapsed=['s1', 's2'], now=120.0)
    assert d['reason'] == 'fleet_wide' and d['collapsed'] == ['s1', 's2']


def test_reports_expire_after_the_window():
    dummy, state = decide(None, 's2', collapsed=['s2'], now=0.0)
    state = _guard.finish(state, 's2', 'remediated', 1.0)
    state['reports']['s3'] = 0.0
    d, dummy = decide(state, 's1', now=700.0, report_window=600.0)
    assert d['reason'] == 'remediate' and d['collapsed'] == ['s1']


def test_one_host_at_a_time_and_stale_in_progress_is_dropped():
    dummy, state = decide(None, 's1', fleet=BIG)
    d, state = decide(state, 's2', now=1100.0, fleet=BIG)
    assert d['reason'] == 'busy' and 's1' in d['msg']
    d, state = decide(state, 's2', now=1000.0 + 3601, stale_after=3600, fleet=BIG)
    assert d['reason'] == 'remediate'


def test_cooldown_per_host():
    dummy, state = decide(None, 's1', now=0.0)
    state = _guard.finish(state, 's1', 'remediated', 60.0)
    assert state['remediations'][0]['outcome'] == 'remediated' and state['in_progress'] is None
    d, state = decide(state, 's1', now=600.0, cooldown=1800)
    assert d['reason'] == 'cooldown' and d['retry_after'] == 1200.0
    d, state = decide(state, 's2', now=600.0, cooldown=1800)
    assert d['reason'] == 'remediate'
    state = _guard.finish(state, 's2', 'failed', 700.0)
    d, dummy = decide(state, 's1', now=1801.0, cooldown=1800)
    assert d['reason'] == 'remediate'


def test_rate_limit_across_the_fleet():
    fleet = ['h%d' % i for i in range(10)]
    state = None
    for i, host in enumerate(fleet[:2]):
        d, state = _guard.decide(state, host, fleet, [host], i * 100.0, max_per_hour=2)
        assert d['reason'] == 'remediate'
        state = _guard.finish(state, host, 'remediated', i * 100.0 + 50)
    d, state = _guard.decide(state, 'h5', fleet, ['h5'], 300.0, max_per_hour=2)
    assert d['reason'] == 'rate_limit' and d['retry_after'] == 3300.0
    d, dummy = _guard.decide(state, 'h5', fleet, ['h5'], 3601.0, max_per_hour=2)
    assert d['reason'] == 'remediate'


def test_single_host_fleet_is_remediated():
    d, dummy = _guard.decide(None, 'only', ['only'], ['only'], 0.0)
    assert d['reason'] == 'remediate'


def test_finish_of_another_host_keeps_the_one_in_progress():
    dummy, state = decide(None, 's1')
    state = _guard.finish(state, 's2', 'remediated', 1001.0)
    assert state['in_progress']['host'] == 's1'


def test_a_run_that_died_no_longer_blocks():
    dummy, state = decide(None, 's1', fleet=BIG, owner=[4242, '100'])
    alive = {(4242, '100'): True}
    d, dummy = decide(state, 's2', now=1001.0, fleet=BIG, owner_alive=lambda o: alive.get(tuple(o), False))
    assert d['reason'] == 'busy'
    alive.clear()
    d, state = decide(state, 's2', now=1002.0, fleet=BIG, owner=[5, '1'], owner_alive=lambda o: alive.get(tuple(o), False))
    assert d['reason'] == 'remediate' and state['in_progress']['owner'] == [5, '1']


@pytest.mark.parametrize('previous, fallback, expected', [
    ({'found': True, 'changed_files': ['argv.json']}, 'off', {'to': 'previous', 'fallback_depth': None}),
    ({'found': True, 'changed_files': []}, 3, {'to': 'fallback', 'fallback_depth': 3}),
    ({'failed': True}, '2', {'to': 'fallback', 'fallback_depth': 2}),
    (None, False, {'to': 'fallback', 'fallback_depth': None}),
    ({}, None, {'to': 'fallback', 'fallback_depth': None}),
    ({}, 0, {'to': 'fallback', 'fallback_depth': None}),
    ({}, 'None', {'to': 'fallback', 'fallback_depth': None}),
    ({}, '4.0', {'to': 'fallback', 'fallback_depth': 4}),
])
def test_remediation_plan(previous, fallback, expected):
    plan = _guard.remediation_plan(previous, fallback, 'last_good')
    assert plan == dict(expected, rollback_to='last_good')


def test_remediation_start():
    assert _guard.remediation_start({'collapsed': ['s1', 's2'], 'action': 'remediate'}, 's1', 'depth 2', 'alertmanager') == {
        'step': 'started', 'collapsed_hosts': ['s1', 's2'], 'fallback': 'depth 2', 'trigger': 'alertmanager'}
    assert _guard.remediation_start(None, 's3') == {'step': 'started', 'collapsed_hosts': ['s3'], 'fallback': 'off', 'trigger': 'by hand'}


def test_remediation_outcome():
    result = {'state': 'ready', 'pid': 7, 'depth': 3, 'accept_length': 2.1, 'url': 'http://x'}
    assert _guard.remediation_outcome(result, {'to': 'fallback'}) == {
        'step': 'fallback', 'state': 'ready', 'pid': 7, 'depth': 3, 'accept_length': 2.1}
    assert _guard.remediation_outcome(None, {'to': 'previous'}) == {
        'step': 'rolled_back', 'state': '', 'pid': None, 'depth': None, 'accept_length': None}
