# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_install_plan: reads the sglang_install role's options once,
refuses unpinned packages and a host without a working driver (module_utils/_install.py), reads what the
virtualenv has (llmops.serving.venv_requirements, one module run), and where something is missing, who needs
the virtualenv (llmops.serving.release_venvs); returns what the role installs, and how."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils import _install
from ansible_collections.llmops.serving.plugins.modules.sglang_install_plan import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

STATE_DIR = '/var/lib/llmops/last-good'


class ActionModule(RoleAction):
    def _run_module(self, name, module_args, task_vars):
        try:
            return self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host = task_vars['inventory_hostname']
        options = self.role_variables(_install.OPTIONS)
        server = dict((name, self.role_variable(name)) for name in ('sglang_server_state_dir',
                      'sglang_server_python') if name in task_vars)

        problem = _install.unpinned_message(options['sglang_install_packages'])
        if not problem and boolean(options['sglang_install_check_driver']):
            problem = _install.driver_message(args['gpus'] or {}, options['sglang_install_engine'], host,
                                              options['sglang_install_nvidia_smi_path'])
        if problem:
            result.update(failed=True, msg=problem)
            return result

        venv = options['sglang_install_venv']
        requirements = _install.requirements(options['sglang_install_package'], options['sglang_install_version'],
                                             options['sglang_install_packages'])
        before = self._run_module('llmops.serving.venv_requirements', {'venv': venv, 'requirements': requirements},
                                  task_vars)
        if before.get('failed'):
            result.update(failed=True, msg=before.get('msg', 'llmops.serving.venv_requirements failed'))
            return result
        missing, had = before['missing'], before['packages']
        state_dirs = [server.get('sglang_server_state_dir', STATE_DIR)]
        # One virtualenv per release: never pip into one a process runs or a kept good configuration names
        # (only an interrupted install, or pins changed by hand, get here).
        if missing and before['rc'] == 0:
            found = self._run_module('llmops.serving.release_venvs', {
                'root': options['sglang_install_root'], 'venvs': [venv], 'state_dirs': state_dirs}, task_vars)
            if found.get('failed'):
                problem = found.get('msg', 'llmops.serving.release_venvs failed')
            else:
                problem = _install.refusal_message(venv, missing, host, found['venvs'])
            if problem:
                result.update(failed=True, msg=problem)
                return result

        on_host = boolean(options['sglang_install_wheelhouse_on_host'])
        wheelhouse = _install.wheelhouse_on_host(options['sglang_install_wheelhouse'], on_host,
                                                 options['sglang_install_wheelhouse_dest'])
        python = venv + '/bin/python'
        extra_args = _install.pip_extra_args(wheelhouse, options['sglang_install_pip_extra_args'])
        keep = [venv] + ([server['sglang_server_python']] if 'sglang_server_python' in server else [])
        plan = {
            'requirements': requirements, 'python': python, 'missing': missing, 'had': had,
            'would_install': _install.would_install_message(missing, venv, had, options['sglang_install_wheelhouse']),
            'copy_wheelhouse': bool(options['sglang_install_wheelhouse']) and not on_host,
            'pip_extra_args': extra_args, 'state_dirs': state_dirs, 'keep': keep,
            'result': {'engine': options['sglang_install_engine'], 'version': options['sglang_install_version'],
                       'python': python, 'installed': missing, 'before': had}}
        plan.update(_install.module_args(venv, requirements, options['sglang_install_python'], extra_args,
                                         options['sglang_install_engine'], options['sglang_install_root'], keep, state_dirs))
        result.update(changed=False, plan=plan)
        return result
