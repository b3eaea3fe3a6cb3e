# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation journal on the host (plugins/modules/remediation_journal.py): each step a JSON
line (mode 0600), the start and the outcome computed from the guard's decision and the plan, the
last steps read back as rows (playbooks/status.yml)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import remediation_journal


def run_module(capsys, args, check=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            remediation_journal.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_step_is_a_private_json_line(capsys, tmp_path):
    path = tmp_path / 'llmops' / 'remediations.jsonl'
    decision = {'action': 'remediate', 'collapsed': ['ns1', 'ns2']}
    steps = [
        {'step': 'started', 'decision': decision, 'fallback': 3, 'trigger': 'alertmanager'},
        {'step': 'drained'},
        {'step': 'previous_failed', 'reason': 'floor'},
        {'step': 'outcome', 'plan': {'to': 'fallback'}, 'result': {'state': 'ready', 'pid': 7, 'depth': 3, 'accept_length': 2.5}},
        {'step': 'remediated'},
    ]
    for step in steps:
        code, result = run_module(capsys, dict(step, host='ns1', path=str(path)))
        assert code == 0 and result['changed'] is True and result['record']['host'] == 'ns1'
    got = lines(path)
    assert [entry['step'] for entry in got] == ['started', 'drained', 'previous_failed', 'fallback', 'remediated']
    assert {k: got[0][k] for k in ('collapsed_hosts', 'fallback', 'trigger')} == {
        'collapsed_hosts': ['ns1', 'ns2'], 'fallback': 3, 'trigger': 'alertmanager'}
    assert got[2]['reason'] == 'floor' and 'reason' not in got[1]
    assert {k: got[3][k] for k in ('state', 'pid', 'depth', 'accept_length')} == {
        'state': 'ready', 'pid': 7, 'depth': 3, 'accept_length': 2.5}
    assert list(got[1]) == ['at', 'host', 'step'] and got[1]['at'].endswith('Z')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_start_without_a_decision_names_the_host_and_the_defaults(capsys, tmp_path):
    path = tmp_path / 'j.jsonl'
    code, result = run_module(capsys, {'host': 'ns3', 'step': 'started', 'path': str(path), 'decision': None,
                                       'fallback': None, 'trigger': None})
    assert code == 0 and result['record']['collapsed_hosts'] == ['ns3']
    assert (result['record']['fallback'], result['record']['trigger']) == ('off', 'by hand')


def test_the_outcome_of_the_previous_good_configuration(capsys, tmp_path):
    code, result = run_module(capsys, {'host': 'ns1', 'step': 'outcome', 'path': str(tmp_path / 'j'),
                                       'plan': {'to': 'previous'}, 'result': None})
    assert code == 0 and result['record']['step'] == 'rolled_back' and result['record']['state'] == ''


def test_check_mode_writes_nothing(capsys, tmp_path):
    path = tmp_path / 'j.jsonl'
    code, result = run_module(capsys, {'host': 'ns1', 'step': 'drained', 'path': str(path)}, check=True)
    assert code == 0 and result['record']['step'] == 'drained' and not path.exists()


def test_the_last_steps_are_read_back_as_rows(capsys, tmp_path):
    path = tmp_path / 'j.jsonl'
    path.write_text('\n'.join([json.dumps({'at': 'T%d' % n, 'step': 'drained'}) for n in range(7)]
                              + ['not json', json.dumps({'at': 'T9', 'step': 'fallback', 'depth': 3})]) + '\n')
    code, result = run_module(capsys, {'host': 'ns1', 'state': 'read', 'path': str(path), 'lines': 3})
    assert code == 0 and result['changed'] is False
    assert result['rows'] == ['ns1: T6 drained', 'ns1: T9 fallback depth=3']
    assert [entry['at'] for entry in result['entries']] == ['T6', 'T9']
    code, result = run_module(capsys, {'host': 'ns1', 'state': 'read', 'path': str(tmp_path / 'none')})
    assert code == 0 and result['rows'] == [] and result['entries'] == []


def test_a_record_needs_its_step(capsys, tmp_path):
    code, result = run_module(capsys, {'host': 'ns1', 'path': str(tmp_path / 'j')})
    assert code == 1 and result['msg'] == 'state is recorded but the following is missing: step'
