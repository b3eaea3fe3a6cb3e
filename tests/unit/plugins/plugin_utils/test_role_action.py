"""RoleAction.role_variables: the role's variables as the task sees them, defaults only for undefined names."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleUndefinedVariable

from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

VARIABLES = {'x_port': 30000, 'x_host': '', 'x_none': None}


class Templar:
    def resolve_variable_expression(self, name):
        if name not in VARIABLES:
            raise AnsibleUndefinedVariable('%r is undefined' % name)
        return VARIABLES[name]


class Action(RoleAction):
    def run(self, tmp=None, task_vars=None):
        return {}


def action():
    plugin = Action.__new__(Action)
    plugin._templar = Templar()
    return plugin


def test_defined_values_win_over_defaults_even_when_empty_or_null():
    assert action().role_variables(('x_port', 'x_host', 'x_none'), defaults={'x_host': 'h', 'x_none': 1}) == \
        {'x_port': 30000, 'x_host': '', 'x_none': None}


def test_an_undefined_name_takes_its_default():
    assert action().role_variables(('x_port', 'x_missing'), defaults={'x_missing': []}) == {'x_port': 30000, 'x_missing': []}


def test_an_undefined_name_without_a_default_is_an_error():
    with pytest.raises(AnsibleUndefinedVariable, match='x_missing'):
        action().role_variables(('x_missing',))
