# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.spec_sweep_step: one step of the spec_sweep role. Reads only
its task's arguments (validated against the module's argument spec): the step ``settings`` takes
the sweep's and the server's settings and returns them with what it fixed, and every later step
reads them back from ``settings``. Decides with module_utils/_spec_sweep.py and _sweep.py, and
runs llmops.serving.llm_benchmark (one module run) where the step measures."""

from __future__ import annotations

import datetime

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ansible_version

from ansible_collections.llmops.serving.plugins.module_utils import _spec_sweep, _sweep
from ansible_collections.llmops.serving.plugins.modules.spec_sweep_step import ARGUMENT_SPEC

BENCHMARK = 'llmops.serving.llm_benchmark'
# What the step returns of llm_benchmark's result (never its invocation: it names the API key).
BENCHMARK_KEYS = ('runs', 'settings', 'server', 'model', 'http_library')

# The task's options of the step "settings", by the name of the role variable module_utils/_spec_sweep.py
# reads them under (an option the task leaves out or passes as null takes _spec_sweep.DEFAULTS' value).
SETTINGS = {
    'host': 'inventory_hostname', 'depths': 'spec_sweep_depths', 'baseline': 'spec_sweep_baseline',
    'adaptive': 'spec_sweep_adaptive', 'adaptive_tiers': 'spec_sweep_adaptive_tiers',
    'concurrency': 'spec_sweep_concurrency', 'num_prompts': 'spec_sweep_num_prompts',
    'input_len': 'spec_sweep_input_len', 'output_len': 'spec_sweep_output_len', 'dataset': 'spec_sweep_dataset',
    'warmup_requests': 'spec_sweep_warmup_requests', 'rounds': 'spec_sweep_rounds',
    'min_duration': 'spec_sweep_min_duration', 'max_spread': 'spec_sweep_max_spread', 'api': 'spec_sweep_api',
    'url': 'spec_sweep_url', 'benchmark_host': 'spec_sweep_benchmark_host', 'timeout': 'spec_sweep_timeout',
    'max_failed_ratio': 'spec_sweep_max_failed_ratio', 'report_dir': 'spec_sweep_report_dir',
    'engine': 'sglang_server_engine', 'drafter': 'sglang_server_speculative_draft_model_path',
    'extra_args': 'sglang_server_extra_args', 'model_path': 'sglang_server_model_path',
    'served_model_name': 'sglang_server_served_model_name', 'port': 'sglang_server_port',
    'config_dir': 'sglang_server_config_dir', 'server_name': 'sglang_server_name',
    'router_group': 'sglang_router_group', 'worker_group': 'sglang_router_worker_group',
    'simulator': 'llmops_simulator',
}
# The options of the later steps, by the same names.
STEP_OPTIONS = {
    'api_key': 'sglang_server_api_key', 'admin_api_key': 'sglang_server_admin_api_key',
    'server_result': 'sglang_server_result', 'candidate': 'spec_sweep_candidate',
    'progress': '__spec_sweep_candidate', 'results': '__spec_sweep_results', 'tiers': '__spec_sweep_tiers',
    'applied': 'spec_sweep_applied', 'restored': 'spec_sweep_restored',
}
# Options a step needs, that the task must pass.
REQUIRED = {
    'settings': ('host', 'report_dir'),
    'start': ('settings', 'candidate'),
    'deployed': ('settings', 'progress', 'server_result'),
    'benchmark': ('settings', 'candidate'),
    'failed': ('settings', 'candidate'),
    'report': ('settings', 'results'),
    'check': ('settings', 'candidate'),
    'restored': ('settings', 'server_result'),
    'tiers': ('settings', 'results'),
}


def truthy(value):
    """Ansible's ``| bool``."""
    return boolean(value, strict=False)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _value(args, option, variable):
    value = args.get(option)
    return _spec_sweep.DEFAULTS.get(variable) if value is None else value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def __init__(self, *args, **kwargs):
        super(ActionModule, self).__init__(*args, **kwargs)
        self._benchmark_warnings = []

    def _opts(self, args):
        """The options of a later step: the settings fixed by the step "settings", then the task's own."""
        opts = dict((args['settings'] or {}).get('options') or {})
        opts['__spec_sweep'] = args['settings']
        for option, variable in STEP_OPTIONS.items():
            opts[variable] = _value(args, option, variable)
        return opts

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
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        step = args['step']
        missing = [option for option in REQUIRED[step] if args.get(option) is None]
        if missing:
            result.update(failed=True, changed=False, msg='spec_sweep_step: step %s needs %s' % (step, ', '.join(missing)))
            return result
        try:
            result.update(getattr(self, '_step_' + step)(args, task_vars))
        except (AnsibleError, _spec_sweep.SweepError, _sweep.SweepError) as exc:
            result.update(failed=True, msg=str(exc))
        if self._benchmark_warnings:
            result['warnings'] = result.get('warnings', []) + self._benchmark_warnings
        result['changed'] = False
        return result

    def _step_settings(self, args, task_vars):
        opts = dict((variable, _value(args, option, variable)) for option, variable in SETTINGS.items())
        # server_result: the URL of a server started earlier in the play, for the message of a check-mode run
        opts['sglang_server_result'] = args.get('server_result')
        problem = _spec_sweep.settings_problem(opts, truthy)
        if problem:
            raise _spec_sweep.SweepError(problem)
        candidates = _sweep.sweep_candidates(opts['spec_sweep_depths'], baseline=opts['spec_sweep_baseline'],
                                             adaptive=opts['spec_sweep_adaptive'], engine=opts['sglang_server_engine'])
        out = _spec_sweep.settings(opts, task_vars.get('groups') or {}, candidates, truthy, utc_now())
        out['options'] = dict((variable, opts[variable]) for variable in SETTINGS.values())
        return out

    def _step_start(self, args, task_vars):
        return {'name': args['candidate']['name'], 'started': utc_now()}

    def _step_deployed(self, args, task_vars):
        return dict(args['progress'], launch=args['server_result'], command=args.get('command'))

    @staticmethod
    def _progress(opts):
        """What start and deployed kept of the candidate measured now (nothing of an earlier one)."""
        progress = opts['__spec_sweep_candidate'] or {}
        return progress if progress.get('name') == opts['spec_sweep_candidate']['name'] else {}

    def _step_benchmark(self, args, task_vars):
        opts = self._opts(args)
        bench = self._benchmark(opts, task_vars)
        progress = self._progress(opts)
        label = _sweep.sweep_label(opts['spec_sweep_candidate'], (progress.get('launch') or {}).get('version'))
        return dict(bench, record=_spec_sweep.record(opts['spec_sweep_candidate'], label, progress, utc_now(), bench=bench))

    def _step_failed(self, args, task_vars):
        opts = self._opts(args)
        label = _sweep.sweep_label(opts['spec_sweep_candidate'], args.get('version'))
        failed_result = args.get('failed_result') if isinstance(args.get('failed_result'), dict) else {}
        return {'record': _spec_sweep.record(
            opts['spec_sweep_candidate'], label, self._progress(opts), utc_now(),
            error=failed_result.get('msg', 'failed'), failed_task=args.get('failed_task') or '')}

    def _step_report(self, args, task_vars):
        opts = self._opts(args)
        candidates = opts['__spec_sweep_results']
        # Overall best: highest geometric mean of output tokens/s over the concurrency levels;
        # and the best per concurrency level.
        best = _sweep.sweep_ranking(candidates, opts['spec_sweep_concurrency'], max_spread=opts['spec_sweep_max_spread'])
        versions = {'ansible': ansible_version, 'engine': _sweep.sweep_engine_version(candidates)}
        results = _spec_sweep.results(opts, utc_now(), versions, best, truthy)
        return {'results': results, 'chart': _sweep.sweep_chart(results),
                'best_candidate': _spec_sweep.best_candidate(candidates, best),
                'where': _spec_sweep.where(opts['inventory_hostname'], best, opts['__spec_sweep']['host_dir'])}

    def _step_restored(self, args, task_vars):
        return {'restored': _spec_sweep.restored(args['server_result'])}

    def _step_tiers(self, args, task_vars):
        opts = self._opts(args)
        table = _sweep.sweep_adaptive_tiers(opts['__spec_sweep_results'], opts['spec_sweep_concurrency'])
        return _spec_sweep.tiers(table, opts['__spec_sweep']['tiers_file'])

    def _step_check(self, args, task_vars):
        opts = self._opts(args)
        check = self._benchmark(opts, task_vars, check=True)
        verified, message = _spec_sweep.verdict(opts['inventory_hostname'], opts['spec_sweep_candidate'], check)
        return dict(check, verified=verified, verdict=message)
