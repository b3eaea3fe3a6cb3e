# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.spec_sweep_step: one step of the spec_sweep role. Reads the
role's options once from the task's variables, decides with module_utils/_spec_sweep.py and the
sweep filters, and runs llmops.serving.llm_benchmark (one module run) where the step measures."""

from __future__ import annotations

import datetime

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.release import __version__ as ansible_version

from ansible_collections.llmops.serving.plugins.filter import sweep as _filters
from ansible_collections.llmops.serving.plugins.module_utils import _spec_sweep
from ansible_collections.llmops.serving.plugins.modules.spec_sweep_step import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

BENCHMARK = 'llmops.serving.llm_benchmark'
# What the step returns of llm_benchmark's result (never its invocation: it names the API key).
BENCHMARK_KEYS = ('runs', 'settings', 'server', 'model', 'http_library')


def truthy(value):
    """Ansible's ``| bool``."""
    return boolean(value, strict=False)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


class ActionModule(RoleAction):
    _supports_check_mode = True

    def __init__(self, *args, **kwargs):
        super(ActionModule, self).__init__(*args, **kwargs)
        self._benchmark_warnings = []

    def _options(self, names):
        return self.role_variables(names, _spec_sweep.DEFAULTS)

    def _benchmark(self, opts, task_vars, check=False):
        try:
            bench = self._execute_module(module_name=BENCHMARK, module_args=_spec_sweep.benchmark_args(opts, check=check),
                                         task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
        # Shown as the module's own task showed them (a client that limits the figures, tokens counted per chunk).
        self._benchmark_warnings.extend(bench.get('warnings') or [])
        if bench.get('failed'):
            raise AnsibleError(bench.get('msg', '%s failed' % BENCHMARK))
        return dict((key, bench[key]) for key in BENCHMARK_KEYS if key in bench)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        step = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]['step']
        try:
            result.update(getattr(self, '_step_' + step)(task_vars))
        except (AnsibleError, _spec_sweep.SweepError) as exc:
            result.update(failed=True, msg=str(exc))
        if self._benchmark_warnings:
            result['warnings'] = result.get('warnings', []) + self._benchmark_warnings
        result['changed'] = False
        return result

    def _step_settings(self, task_vars):
        opts = self._options(_spec_sweep.SETTINGS_OPTIONS)
        problem = _spec_sweep.settings_problem(opts, truthy)
        if problem:
            raise _spec_sweep.SweepError(problem)
        candidates = _filters.sweep_candidates(opts['spec_sweep_depths'], baseline=opts['spec_sweep_baseline'],
                                               adaptive=opts['spec_sweep_adaptive'], engine=opts['sglang_server_engine'])
        return _spec_sweep.settings(opts, task_vars.get('groups') or {}, candidates, truthy, utc_now())

    def _step_start(self, task_vars):
        return {'name': self._options(('spec_sweep_candidate',))['spec_sweep_candidate']['name'], 'started': utc_now()}

    def _step_deployed(self, task_vars):
        opts = self._options(('__spec_sweep_candidate', 'sglang_server_result', 'sglang_server_plan'))
        return dict(opts['__spec_sweep_candidate'], launch=opts['sglang_server_result'],
                    command=opts['sglang_server_plan']['command'])

    def _progress(self, opts):
        """What start and deployed kept of the candidate measured now (nothing of an earlier one)."""
        progress = opts['__spec_sweep_candidate'] or {}
        return progress if progress.get('name') == opts['spec_sweep_candidate']['name'] else {}

    def _step_benchmark(self, task_vars):
        opts = self._options(_spec_sweep.MEASURE_OPTIONS + ('spec_sweep_candidate', '__spec_sweep_candidate'))
        bench = self._benchmark(opts, task_vars)
        progress = self._progress(opts)
        label = _filters.sweep_label(opts['spec_sweep_candidate'], (progress.get('launch') or {}).get('version'))
        return dict(bench, record=_spec_sweep.record(opts['spec_sweep_candidate'], label, progress, utc_now(), bench=bench))

    def _step_failed(self, task_vars):
        opts = self._options(('spec_sweep_candidate', '__spec_sweep_candidate', 'sglang_server_plan', 'ansible_failed_result',
                              'ansible_failed_task'))
        label = _filters.sweep_label(opts['spec_sweep_candidate'], (opts['sglang_server_plan'] or {}).get('version'))
        return {'record': _spec_sweep.record(
            opts['spec_sweep_candidate'], label, self._progress(opts), utc_now(),
            error=(opts['ansible_failed_result'] or {}).get('msg', 'failed'),
            failed_task=(opts['ansible_failed_task'] or {}).get('name', ''))}

    def _step_report(self, task_vars):
        opts = self._options(_spec_sweep.REPORT_OPTIONS)
        candidates = opts['__spec_sweep_results']
        # Overall best: highest geometric mean of output tokens/s over the concurrency levels;
        # and the best per concurrency level.
        best = _filters.sweep_ranking(candidates, opts['spec_sweep_concurrency'], max_spread=opts['spec_sweep_max_spread'])
        versions = {'ansible': ansible_version, 'engine': _filters.sweep_engine_version(candidates)}
        return {'results': _spec_sweep.results(opts, utc_now(), versions, best, truthy),
                'best_candidate': _spec_sweep.best_candidate(candidates, best),
                'where': _spec_sweep.where(opts['inventory_hostname'], best, opts['__spec_sweep']['host_dir'])}

    def _step_restored(self, task_vars):
        return {'restored': _spec_sweep.restored(self._options(('sglang_server_result',))['sglang_server_result'])}

    def _step_tiers(self, task_vars):
        opts = self._options(('__spec_sweep_results', 'spec_sweep_concurrency', '__spec_sweep'))
        table = _filters.sweep_adaptive_tiers(opts['__spec_sweep_results'], opts['spec_sweep_concurrency'])
        return _spec_sweep.tiers(table, opts['__spec_sweep']['tiers_file'])

    def _step_check(self, task_vars):
        opts = self._options(_spec_sweep.BENCHMARK_OPTIONS + ('inventory_hostname', '__spec_sweep_report'))
        check = self._benchmark(opts, task_vars, check=True)
        verified, message = _spec_sweep.verdict(opts['inventory_hostname'], opts['__spec_sweep_report']['best_candidate'], check)
        return dict(check, verified=verified, verdict=message)
