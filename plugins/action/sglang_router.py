# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_router: validates the task's arguments against the module's spec, refuses
workers the router cannot have (none; servers of other hosts bound to a loopback address, module_utils/_router.py)
before the host is touched, then runs the module on the router's host. It reads the task's arguments, and of the
hosts it names (this one and those of O(workers)) only their connection: servers and router that both run on the
controller (connection local) share its loopback address."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.llmops.serving.plugins.module_utils import _router
from ansible_collections.llmops.serving.plugins.modules.sglang_router import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host, workers = task_vars['inventory_hostname'], args['workers'] or {}
        hostvars = task_vars.get('hostvars') or {}
        local = task_vars.get('ansible_connection') == 'local'
        local_hosts = [name for name in workers if local and (hostvars.get(name) or {}).get('ansible_connection') == 'local']
        problem = _router.worker_problem(host, args['worker_group'] or 'sglang_servers', workers, local_hosts)
        if problem:
            result.update(failed=True, msg=problem)
            return result
        try:
            result.update(self._execute_module(module_name=self._task.action, module_args=self._task.args,
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
