# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.role_module: runs a module with the arguments a role's variables
(``<prefix><option>``) give, read once from the task's variables, so that a role does not spell out
each of its options as a templated argument."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.modules.role_module import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction


def module_args(options, prefix, defined, resolve, fixed=None, defaults=None):
    """The module's arguments: each option whose variable ``prefix + option`` is defined and not null
    (``resolve(name)`` reads it), else its value in ``defaults`` where it has one, then ``fixed``, which wins."""
    args = {}
    for option in options:
        name = prefix + option
        value = resolve(name) if name in defined else None
        if value is None:
            value = (defaults or {}).get(option)
        if value is not None:
            args[option] = value
    args.update(fixed or {})
    return args


class ActionModule(RoleAction):
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        args = module_args(params['options'], params['prefix'], task_vars, self.role_variable,
                           params['args'], params['defaults'])
        wrap_async = self._task.async_val and not self._connection.has_native_async
        try:
            result.update(self._execute_module(module_name=params['module'], module_args=args, task_vars=task_vars,
                                               wrap_async=wrap_async))
        finally:
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
        return result
