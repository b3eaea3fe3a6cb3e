# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of plugins/filter/reports.py and plugins/filter/remediation.py read what the
playbooks registered; the text itself is tested with module_utils/_reports.py and _guard.py."""

from __future__ import annotations

import json

from ansible_collections.llmops.serving.plugins.filter import remediation, reports


def test_remediation_journal_rows_leave_out_hosts_without_a_journal_read():
    hostvars = {'ns1': {'status_remediations': {'stdout_lines': [json.dumps({'at': 'T', 'step': 'drained'})]}},
                'ns2': {'status_remediations': {'skipped': True}}, 'ns3': {}}
    assert reports.remediation_journal_rows(['ns1', 'ns2', 'ns3'], hostvars) == ['ns1: T drained']


def test_rollback_filters_take_the_result_first():
    assert reports.rollback_outcome({'state': 'rolled_back'}, 'ns1').startswith('ns1: rolled_back to record None')


def test_remediation_filters():
    plan = remediation.remediation_plan({'found': True, 'changed_files': ['argv.json']})
    assert plan == {'to': 'previous', 'rollback_to': 'last_good', 'fallback_depth': None}
    assert remediation.remediation_outcome({}, plan)['step'] == 'rolled_back'
    assert remediation.remediation_start({}, 'ns1')['collapsed_hosts'] == ['ns1']
