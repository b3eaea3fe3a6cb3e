"""The depth the deploy summary, the status table and the monitoring labels show is the one the launch
argv runs, adaptive included (plugins/module_utils/_sglang_args.py running_speculative, the one
derivation, through the speculative_settings and depth_label filters)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.filter.deploy_summary import depth_label, deploy_summary
from ansible_collections.llmops.serving.plugins.filter.launch import speculative_settings
from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args

DRAFTER = '/models/drafter'


def argv_depth(speculative):
    """(draft tokens, adaptive) as the launch argv of SGLang 0.5.15.post1 has them."""
    argv = _sglang_args.build_argv({'model_path': '/m', 'speculative': speculative}, version='0.5.15.post1')
    if '--speculative-num-draft-tokens' not in argv:
        return None, False
    return int(argv[argv.index('--speculative-num-draft-tokens') + 1]), '--speculative-adaptive' in argv


@pytest.mark.parametrize('speculative, shown', [
    ({'algorithm': 'EAGLE3', 'draft_model_path': DRAFTER, 'depth': 16}, '16'),
    ({'algorithm': 'EAGLE3', 'draft_model_path': DRAFTER, 'adaptive': True}, 'adaptive from 8'),
    ({'algorithm': 'EAGLE3', 'draft_model_path': DRAFTER, 'adaptive': True, 'depth': 4}, 'adaptive from 4'),
    ({'algorithm': 'EAGLE3', 'draft_model_path': DRAFTER, 'num_steps': 2, 'eagle_topk': 1, 'num_draft_tokens': 3},
     '3'),
    ({}, 'off'),
])
def test_summary_status_and_monitoring_show_what_the_argv_runs(speculative, shown):
    plan = speculative_settings(speculative)
    assert (plan['depth'], plan['adaptive']) == argv_depth(speculative)
    # the summary's row, from the result apply records out of the plan
    result = {'state': 'ready', 'action': 'restart', 'depth': plan['depth'], 'adaptive': plan['adaptive']}
    assert shown in deploy_summary(['h'], {'h': {'sglang_server_result': result}})[1].split('  ')
    # status.j2, from what the server reports (server info: speculative_num_draft_tokens, speculative_adaptive)
    assert depth_label(plan['depth'], plan['adaptive']) == shown
