# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_server_files: reads the sglang_server role's plan
(``sglang_server_plan``) and the options the launch files are made of, renders the role's templates on the
controller (the environment in memory only: it is never part of a result) and runs
llmops.serving.launch_files once on the host, which compares (in check mode) or writes them."""

from __future__ import annotations

import os

from ansible.plugins.loader import lookup_loader

from ansible_collections.llmops.serving.plugins.module_utils import _server_role
from ansible_collections.llmops.serving.plugins.modules.sglang_server_files import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

# Role variables (vars/main.yml) that name the environment variables the launcher shim reads.
API_KEY_FILE_ENV = '__sglang_server_api_key_file_env'
USER_ENV = '__sglang_server_user_env'
# The variable the environment file's template renders (templates/env.j2).
ENVIRONMENT = '__sglang_server_environment'


class ActionModule(RoleAction):
    def launch_files_args(self, task_vars, compare):
        """The arguments of llmops.serving.launch_files: the plan's launch files rendered from the role's templates."""
        resolve = self.role_variable
        plan = resolve('sglang_server_plan')
        options = self.role_variables(_server_role.FILES_OPTIONS)
        env = _server_role.environment(options['sglang_server_env'], options['sglang_server_gpus'],
                                       options['sglang_server_user'], plan, resolve(API_KEY_FILE_ENV), resolve(USER_ENV))
        lookup = lookup_loader.get('ansible.builtin.template', loader=self._loader, templar=self._templar)

        def render(src):
            return lookup.run([src], variables=task_vars, template_vars={ENVIRONMENT: env})[0]

        user, api_key = options['sglang_server_user'], options['sglang_server_api_key'] or ''
        secrets = [{'path': plan['env_file'], 'mode': '0600', 'content': render(_server_role.ENV_TEMPLATE)}]
        if api_key:
            secrets.append({'path': plan['api_key_file'], 'mode': '0600', 'owner': user, 'content': api_key + '\n'})
        args = {'directories': [{'path': options['sglang_server_config_dir']},
                                {'path': os.path.dirname(options['sglang_server_log_path'])}],
                'files': [{'path': template['dest'], 'mode': template['mode'], 'content': render(template['src'])}
                          for template in plan['templates']],
                'secrets': secrets,
                'absent': [] if api_key else [plan['api_key_file']],
                'users': [{'name': user, 'groups': options['sglang_server_user_groups']}] if plan['switch_user'] else []}
        if compare:
            args['last_good'] = plan['last_good']
        return args

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        try:
            module_result = self._execute_module(module_name='llmops.serving.launch_files',
                                                 module_args=self.launch_files_args(task_vars, args['compare']),
                                                 task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
        result.update(module_result)
        if args['compare']:
            # The plan's comparison is no change: it decides on the restart, apply writes.
            result['changed'] = False
        return result
