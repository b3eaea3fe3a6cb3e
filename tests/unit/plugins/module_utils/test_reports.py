# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines playbooks/status.yml and playbooks/rollback.yml show (module_utils/_reports.py)."""

from __future__ import annotations

import json

from ansible_collections.llmops.serving.plugins.module_utils import _reports


def test_router_status_text_names_each_worker_and_the_missing_ones():
    status = {'ready': True, 'url': 'http://r1:30000', 'missing': ['http://ns2:30000'],
              'workers': [{'url': 'http://ns1:30000', 'healthy': True, 'breaker': 'closed', 'load': 0}]}
    assert _reports.router_status_text([('r1', status), ('r2', {'ready': False, 'url': 'http://r2:30000'})]) == (
        ' r1: router ready=True http://r1:30000; r1: worker http://ns1:30000 healthy=True breaker=closed load=0; '
        'r1: worker http://ns2:30000 not in the router;  r2: router ready=False http://r2:30000; ')


def test_journal_rows_show_the_figures_a_line_has_and_skip_what_is_no_record():
    lines = [json.dumps({'at': 'T1', 'host': 'ns1', 'step': 'started', 'fallback': 3}),
             json.dumps({'at': 'T2', 'host': 'ns1', 'step': 'fallback', 'state': 'ready', 'pid': 7, 'depth': 3,
                         'accept_length': None}),
             json.dumps({'at': 'T3', 'host': 'ns1', 'step': 'failed', 'reason': 'no GPU'}), 'not json', '[1]']
    assert _reports.journal_rows([('ns1', lines), ('ns2', [])]) == [
        'ns1: T1 started', 'ns1: T2 fallback state=ready depth=3', 'ns1: T3 failed reason=no GPU']


def test_router_status_text_of_a_pd_router_names_types_and_pairs():
    status = {'ready': True, 'url': 'http://r:1', 'missing': [],
              'workers': [{'url': 'http://p:1', 'healthy': True, 'breaker': 'closed', 'load': 0, 'worker_type': 'prefill',
                           'bootstrap_port': 8998},
                          {'url': 'http://d:1', 'healthy': True, 'breaker': 'closed', 'load': 1, 'worker_type': 'decode',
                           'bootstrap_port': None}],
              'pairs': {'prefill': ['http://p:1'], 'decode': ['http://d:1']}}
    assert _reports.router_status_text([('r1', status)]) == (
        ' r1: router ready=True http://r:1; r1: worker http://p:1 prefill bootstrap_port=8998 healthy=True '
        'breaker=closed load=0; r1: worker http://d:1 decode healthy=True breaker=closed load=1; '
        'r1: pairs prefill=[http://p:1] x decode=[http://d:1]; ')
