# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_install_plan: from its own task's arguments (the sglang_install
role passes its options), refuses unpinned packages and a host without a working driver
(module_utils/_install.py), reads what the virtualenv has (llmops.serving.venv_requirements, one module run),
and where something is missing, who needs the virtualenv (llmops.serving.release_venvs); returns what the role
installs, and how."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.serving.plugins.module_utils import _install
from ansible_collections.llmops.serving.plugins.module_utils._null_unset import without_nulls
from ansible_collections.llmops.serving.plugins.modules.sglang_install_plan import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _run_module(self, name, module_args, task_vars):
        try:
            return self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        self._task.args = without_nulls(self._task.args)  # null is unset
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host = task_vars['inventory_hostname']
        package = args['package'] or args['engine']

        problem = _install.unpinned_message(args['packages'])
        if not problem and args['check_driver']:
            problem = _install.driver_message(args['gpus'] or {}, args['engine'], host, args['nvidia_smi_path'])
        if problem:
            result.update(failed=True, msg=problem)
            return result

        venv = args['venv']
        try:
            engines = _install.transfer_engine_requirements(
                args['disaggregation_mode'], args['transfer_backend'], args['transfer_engine_cuda'],
                {'mooncake': args['mooncake_version'], 'nixl': args['nixl_version']})
        except ValueError as exc:
            result.update(failed=True, msg='%s: %s' % (host, exc))
            return result
        requirements = _install.requirements(package, args['version'], args['packages'], engines)
        before = self._run_module('llmops.serving.venv_requirements', {'venv': venv, 'requirements': requirements},
                                  task_vars)
        if before.get('failed'):
            result.update(failed=True, msg=before.get('msg', 'llmops.serving.venv_requirements failed'))
            return result
        missing, had = before['missing'], before['packages']
        state_dirs = [args['state_dir']]
        # One virtualenv per release: never pip into one a process runs or a kept good configuration names
        # (only an interrupted install, or pins changed by hand, get here).
        if missing and before['rc'] == 0:
            found = self._run_module('llmops.serving.release_venvs', {
                'root': args['root'], 'venvs': [venv], 'state_dirs': state_dirs}, task_vars)
            if found.get('failed'):
                problem = found.get('msg', 'llmops.serving.release_venvs failed')
            else:
                problem = _install.refusal_message(venv, missing, host, found['venvs'])
            if problem:
                result.update(failed=True, msg=problem)
                return result

        wheelhouse = _install.wheelhouse_on_host(args['wheelhouse'], args['wheelhouse_on_host'], args['wheelhouse_dest'])
        python = venv + '/bin/python'
        keep = [venv] + ([args['server_python']] if args['server_python'] else [])
        plan = {
            'requirements': requirements, 'python': python, 'missing': missing, 'had': had,
            'would_install': _install.would_install_message(missing, venv, had, args['wheelhouse']),
            'copy_wheelhouse': bool(args['wheelhouse']) and not args['wheelhouse_on_host'],
            'wheelhouse_src': args['wheelhouse'].rstrip('/') + '/' if args['wheelhouse'] else '',
            'pip_extra_args': _install.pip_extra_args(wheelhouse, args['pip_extra_args']),
            'state_dirs': state_dirs, 'keep': keep,
            'result': {'engine': args['engine'], 'version': args['version'], 'python': python, 'installed': missing,
                       'before': had}}
        result.update(changed=False, plan=plan)
        return result
