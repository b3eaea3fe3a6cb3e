# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_router_plan: reads the sglang_router role's options once, takes the
workers from the inventory, refuses workers the router cannot reach (module_utils/_router.py) and returns the
router's plan: launcher, file names, launch command, directories and templates. Runs nothing on the host."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints, _router, _server_plan
from ansible_collections.llmops.serving.plugins.modules.sglang_router_plan import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction


class ActionModule(RoleAction):
    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = task_vars['inventory_hostname']
        options = self.role_variables(_router.PLAN_OPTIONS)
        hostvars = task_vars['hostvars']
        group = options['sglang_router_worker_group']
        workers = _endpoints.worker_urls((task_vars.get('groups') or {}).get(group) or [], hostvars)
        # Servers with connection local run on the controller, as a router with connection local does.
        local_hosts = [name for name in workers if hostvars[name].get('ansible_connection') == 'local'] \
            if task_vars.get('ansible_connection') == 'local' else []
        problem = _router.worker_problem(host, group, workers, local_hosts)
        if problem:
            result.update(failed=True, msg=problem)
            return result
        service_mgr = (task_vars.get('ansible_facts') or {}).get('service_mgr') or ''
        launcher = _server_plan.launcher(options['sglang_router_launcher'], service_mgr)
        result.update(changed=False, plan=_router.router_plan(options, workers, launcher))
        return result
