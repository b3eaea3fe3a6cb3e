# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the collection's controller-side actions share: they read the variables a role's options come
from once, as the task sees them (role defaults, inventory, play and include variables, templated),
instead of a task spelling out ``option: "{{ variable }}"`` for each."""

from __future__ import annotations

from ansible.errors import AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase


class RoleAction(ActionBase):
    """An action plugin that reads its role's variables (``role_variables``)."""

    TRANSFERS_FILES = False

    def role_variable(self, name):
        """The variable ``name``, templated as the task sees it (AnsibleUndefinedVariable where it is undefined)."""
        return self._templar.resolve_variable_expression(name)

    def role_variables(self, names, defaults=None):
        """``{name: value}`` for each variable of ``names``, templated as the task sees it. A name that is
        undefined takes its value from ``defaults`` where that has one, else raises AnsibleUndefinedVariable."""
        values = {}
        for name in names:
            try:
                values[name] = self.role_variable(name)
            except AnsibleUndefinedVariable:
                if name not in (defaults or {}):
                    raise
                values[name] = defaults[name]
        return values
