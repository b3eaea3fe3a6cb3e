# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options controller-side actions take from the play's variables (module_utils/_options.py)."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.action import fleet_preflight, remediation_guard
from ansible_collections.llmops.serving.plugins.module_utils import _options
from ansible_collections.llmops.serving.plugins.modules.fleet_preflight import ARGUMENT_SPEC as PREFLIGHT_SPEC
from ansible_collections.llmops.serving.plugins.modules.remediation_guard import ARGUMENT_SPEC as GUARD_SPEC


def resolve(name):
    return 'resolved ' + name


def test_the_options_the_task_leaves_out_come_from_the_playbook_variables():
    task_vars = {'llmops_remediate_cooldown': '{{ 60 }}', 'llmops_collapsed_hosts': ['s1', 's2'],
                 'llmops_remediate_max_per_hour': 9, 'unrelated': 1}
    merged = _options.with_variables({'host': 's1', 'max_per_hour': 2}, task_vars, resolve, remediation_guard.VARIABLES)
    assert merged == {'host': 's1', 'max_per_hour': 2, 'cooldown': 'resolved llmops_remediate_cooldown',
                      'collapsed_hosts': 'resolved llmops_collapsed_hosts'}


def test_every_variable_names_an_option_of_its_module():
    assert set(remediation_guard.VARIABLES) <= set(GUARD_SPEC)
    assert set(fleet_preflight.VARIABLES) <= set(PREFLIGHT_SPEC)


def test_validated_fills_in_the_defaults_and_converts_what_the_variables_give():
    task_vars = {'ansible_play_hosts_all': ['a', 'b'], 'llmops_strict': 'yes', 'sglang_router_group': 'routers'}
    values = {'ansible_play_hosts_all': ['a', 'b'], 'llmops_strict': 'yes', 'sglang_router_group': 'routers'}
    args, errors = _options.validated(PREFLIGHT_SPEC, {'serial': 1}, task_vars, values.get, fleet_preflight.VARIABLES)
    assert errors == []
    assert args == {'hosts': ['a', 'b'], 'serial': 1, 'strict': True, 'known': [], 'router_group': 'routers',
                    'worker_group': 'sglang_servers'}
    args, errors = _options.validated(GUARD_SPEC, {'host': 's1', 'cooldown': 'soon'}, {}, resolve, remediation_guard.VARIABLES)
    assert errors and 'cooldown' in errors[0]
