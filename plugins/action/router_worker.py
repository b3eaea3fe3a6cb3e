# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.router_worker: fills the options the task leaves out from the sglang_router
role's variables as the server host's task sees them (the router's URLs from the router host's variables, the
servers of sglang_router_worker_group, the batch's servers marked as draining; the router is the host the task is
delegated to, else the task's host), then runs the module on the host the task is delegated to, the router's."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints
from ansible_collections.llmops.serving.plugins.modules.router_worker import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

# The router's own settings: the router host's value where it has one, else the server host's (role default).
ROUTER_OPTIONS = ('sglang_router_host', 'sglang_router_port', 'sglang_router_prometheus_host', 'sglang_router_prometheus_port')


class ActionModule(RoleAction):
    def _defaults(self, router, state, task_vars):
        """The module's options from the role's variables."""
        hostvars = task_vars['hostvars']
        own = hostvars[router] if router in hostvars else {}
        bind, port, prom_bind, prom_port = [own[name] if name in own else self.role_variable(name) for name in ROUTER_OPTIONS]
        workers = _endpoints.worker_urls((task_vars.get('groups') or {}).get(self.role_variable('sglang_router_worker_group')) or [],
                                         hostvars)
        draining = [workers[host] for host in task_vars.get('ansible_play_batch') or []
                    if host in workers and hostvars[host].get('__sglang_router_draining') is True]
        defaults = dict(url=_endpoints.local_url(bind, port), metrics_url=_endpoints.local_url(prom_bind, prom_port, '/metrics'),
                        api_key=self.role_variable('sglang_router_api_key'), worker=workers.get(task_vars['inventory_hostname']),
                        workers=workers, draining=draining)
        if state == 'absent':
            defaults['max_unavailable'] = int(self.role_variable('sglang_router_max_unavailable'))
        elif state == 'present':
            defaults['timeout'] = float(self.role_variable('sglang_router_register_timeout'))
        return defaults

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        given = dict((name, value) for name, value in args.items() if value is not None)
        given.setdefault('router', self._task.delegate_to or task_vars['inventory_hostname'])
        module_args = self._defaults(given['router'], args['state'], task_vars)
        module_args.update(given)
        try:
            result.update(self._execute_module(module_name='llmops.serving.router_worker', module_args=module_args,
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
