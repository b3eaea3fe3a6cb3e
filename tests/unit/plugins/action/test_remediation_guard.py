# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guard's state file and journal on the controller (plugins/action/remediation_guard.py)."""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.llmops.serving.plugins.action import remediation_guard as plugin


def args(tmp_path, **kw):
    base = dict(host='s1', state='decided', outcome='remediated', hosts=['s%d' % i for i in range(1, 11)], collapsed_hosts=[],
                state_file=str(tmp_path / 'guard' / 'state.json'), cooldown=1800.0, max_per_hour=3,
                max_collapsed_share=0.5, report_window=600.0, stale_after=3600.0)
    base.update(kw)
    return base


def test_state_and_journal_are_private_and_survive_between_runs(tmp_path):
    me = plugin.run_identity(os.getpid())
    assert plugin.guarded(args(tmp_path), 100.0, owner=me)['reason'] == 'remediate'
    # Held by a live run (this test's own process): the next host waits.
    assert plugin.guarded(args(tmp_path, host='s3'), 110.0)['reason'] == 'busy'
    assert plugin.guarded(args(tmp_path, state='finished'), 200.0)['reason'] == 'finished'
    assert plugin.guarded(args(tmp_path), 300.0)['reason'] == 'cooldown'
    assert plugin.guarded(args(tmp_path, host='nope'), 300.0)['reason'] == 'unknown_host'
    folder = tmp_path / 'guard'
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for name in ('state.json', 'decisions.jsonl'):
        assert stat.S_IMODE(os.stat(str(folder / name)).st_mode) == 0o600
    lines = [json.loads(line) for line in (folder / 'decisions.jsonl').read_text().splitlines()]
    assert [x['reason'] for x in lines] == ['remediate', 'busy', 'finished', 'cooldown', 'unknown_host']
    assert lines[0]['at'] == '1970-01-01T00:01:40Z'
    state = json.loads((folder / 'state.json').read_text())
    assert state['in_progress'] is None and state['remediations'][0]['outcome'] == 'remediated'


def test_a_dead_run_does_not_block_and_check_mode_writes_nothing(tmp_path):
    assert plugin.guarded(args(tmp_path), 100.0, owner=[2 ** 22 + 7, '1'])['reason'] == 'remediate'
    assert plugin.guarded(args(tmp_path, host='s2'), 110.0, check_mode=True)['reason'] == 'remediate'
    state = json.loads((tmp_path / 'guard' / 'state.json').read_text())
    assert state['in_progress']['host'] == 's1'
    assert len((tmp_path / 'guard' / 'decisions.jsonl').read_text().splitlines()) == 1


class _Response:
    def __init__(self, status):
        self.status = status

    def getcode(self):
        return self.status


def test_the_fleet_wide_alert_is_posted_once_and_a_failure_is_only_reported():
    calls = []

    def opener(url, **kw):
        calls.append((url, kw))
        return _Response(200)

    decision = {'msg': '3 of 4 servers lost their acceptance', 'collapsed': ['s1', 's2', 's3']}
    assert plugin.raise_fleet_alert('http://am:9093', decision, opener) is None
    url, kw = calls[0]
    assert url == 'http://am:9093/api/v2/alerts' and kw['method'] == 'POST' and kw['timeout'] == 10
    assert json.loads(kw['data']) == [{'labels': {'alertname': 'LlmopsSpecFleetWideCollapse', 'severity': 'critical'},
                                       'annotations': {'summary': decision['msg'], 'hosts': 's1,s2,s3'}}]
    assert plugin.raise_fleet_alert('http://am:9093', decision, lambda url, **kw: _Response(202)) == 'HTTP 202'

    def refused(url, **kw):
        raise OSError('connection refused')

    assert 'connection refused' in plugin.raise_fleet_alert('http://am:9093', decision, refused)


def test_an_option_left_out_or_null_takes_its_default():
    args = plugin.with_defaults({'host': 's1', 'cooldown': None, 'max_per_hour': 7, 'hosts': None})
    assert (args['cooldown'], args['max_per_hour'], args['state'], args['outcome'], args['hosts']) == (
        1800.0, 7, 'decided', 'remediated', None)
    assert args['state_file'] == '/var/lib/llmops/speculation-guard/state.json'
