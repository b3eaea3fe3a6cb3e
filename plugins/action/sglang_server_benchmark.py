# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_server_benchmark: reads the sglang_server role's benchmark
options once (module_utils/_server_role.py builds the arguments) and runs llmops.serving.llm_benchmark
on the host once per round; the play's module_defaults for llm_benchmark (or its group llm_server) fill
the options the role does not set, as they did for the role's llm_benchmark task."""

from __future__ import annotations

from ansible.executor.module_common import _apply_action_arg_defaults
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.module_utils import _server_role
from ansible_collections.llmops.serving.plugins.modules.sglang_server_benchmark import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

display = Display()

MODULE = 'llmops.serving.llm_benchmark'


class ActionModule(RoleAction):
    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        options = self.role_variables(_server_role.BENCHMARK_OPTIONS)
        count = int(options['sglang_server_benchmark_rounds'])
        module_args = _apply_action_arg_defaults(MODULE, self._task, _server_role.benchmark_args(options), self._templar)
        rounds, failures = [], []
        try:
            for number in range(1, count + 1):
                one = self._execute_module(module_name=MODULE, module_args=dict(module_args),
                                           task_vars=task_vars)
                rounds.append(one)
                state = 'failed' if one.get('failed') else 'done'
                display.display('[%s] round %d of %d: %s' % (task_vars.get('inventory_hostname'), number, count, state))
                if one.get('failed'):
                    failures.append('round %d of %d: %s' % (number, count, one.get('msg', 'failed')))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
        result.update(changed=False, rounds=rounds)
        if failures:
            result.update(failed=True, msg='; '.join(failures))
        return result
