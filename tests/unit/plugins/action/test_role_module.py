# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/action/role_module.py: a module's arguments from a role's variables."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.action import role_module as plugin


def test_defined_variables_become_arguments_and_fixed_ones_win():
    variables = {'drafter_path': '/srv/d', 'drafter_engine_version': None, 'drafter_fix': False,
                 'drafter_layout': 'auto', 'drafter_result': {'changed': True}}
    args = plugin.module_args(['path', 'engine_version', 'target_path', 'fix', 'layout'], 'drafter_', variables,
                              variables.__getitem__, {'layout': 'midlayer'})
    # null and undefined leave the module's default; only the names asked for are read
    assert args == {'path': '/srv/d', 'fix': False, 'layout': 'midlayer'}


def test_variables_are_read_once_each():
    seen = []

    def resolve(name):
        seen.append(name)
        return 1

    assert plugin.module_args(['a', 'b'], 'p_', {'p_a': '{{ x }}', 'p_b': 2}, resolve) == {'a': 1, 'b': 1}
    assert seen == ['p_a', 'p_b']


def test_defaults_fill_what_the_variables_leave_out():
    variables = {'sglang_server_name': None, 'sglang_server_state_dir': '/srv/state'}
    args = plugin.module_args(['name', 'state_dir'], 'sglang_server_', variables, variables.__getitem__, {'state': 'restored'},
                              {'name': 'main', 'state_dir': '/var/lib/llmops/last-good'})
    assert args == {'name': 'main', 'state_dir': '/srv/state', 'state': 'restored'}
