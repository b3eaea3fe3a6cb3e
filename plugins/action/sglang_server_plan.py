# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_server_plan: reads the sglang_server role's options once,
refuses what cannot work before the host is touched (module_utils/_server_plan.py), runs the host's
launch check (llmops.serving.sglang_launch_check, one module run) and returns the plan: launcher,
version, command, speculative settings, the model's config, GPUs and the group layout, and what the role
derives from them (module_utils/_server_role.py: names, user, launch templates, last good record)."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _server_plan, _server_role, _sglang_args
from ansible_collections.llmops.serving.plugins.modules.sglang_server_plan import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction


class ActionModule(RoleAction):
    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host = task_vars['inventory_hostname']
        options = self.role_variables(_server_plan.OPTIONS + _server_role.OPTIONS)
        hostvars = task_vars['hostvars']

        def address_of(member):
            return hostvars[member].get('ansible_host') or member

        try:
            layout = _server_plan.group_layout(host, options['sglang_server_group_hosts'], address_of,
                                               options['sglang_server_dist_init_port'])
            gpus = _server_plan.gpu_layout(host, options['sglang_server_tp_size'], layout['nnodes'],
                                           options['sglang_server_gpus'], options['sglang_server_env'])
            spec = _server_plan.launch_spec(options, layout)
            _sglang_args.build_argv(spec)  # the settings that do not depend on the installed release
        except _server_plan.PlanError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        except _sglang_args.LaunchArgsError as exc:
            result.update(failed=True, msg='%s: %s; nothing was stopped or changed' % (host, exc))
            return result

        check_args = {'python': options['sglang_server_python'], 'engine': spec['engine'],
                      'env': options['sglang_server_env'], 'paths': _server_plan.host_paths(options)}
        if options['sglang_server_help_cache_dir']:
            check_args['help_cache_dir'] = options['sglang_server_help_cache_dir']
        try:
            check = self._execute_module(module_name='llmops.serving.sglang_launch_check', module_args=check_args,
                                         task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
        if check.get('failed'):
            result.update(failed=True, msg=check.get('msg', 'llmops.serving.sglang_launch_check failed'))
            return result
        missing = check.get('missing_paths') or {}
        if missing:
            result.update(failed=True, missing_paths=missing, msg='; '.join(
                '%s is %s, which does not exist on %s; copy it there or fix the variable' % (name, path, host)
                for name, path in sorted(missing.items())) + ' (nothing was stopped or changed)')
            return result

        try:
            argv = _sglang_args.build_argv(spec, version=check['version'], options=check['cli']['options'])
            command = _sglang_args.launch_command(options['sglang_server_python'], argv, engine=spec['engine'],
                                                  shim=args['shim'])
            speculative = _sglang_args.running_speculative(spec['speculative'])
        except _sglang_args.LaunchArgsError as exc:
            result.update(failed=True, msg='%s: %s' % (host, exc))
            return result
        service_mgr = (task_vars.get('ansible_facts') or {}).get('service_mgr') or check.get('service_mgr')
        plan = {'launcher': _server_plan.launcher(options['sglang_server_launcher'], service_mgr), 'version': check['version'],
                'command': command, 'speculative': speculative,
                'model_config': (check.get('configs') or {}).get('sglang_server_model_path') or {}}
        plan.update(gpus)
        plan.update(layout)
        plan.update(_server_role.role_plan(options, plan))
        result.update(changed=False, plan=plan)
        return result
