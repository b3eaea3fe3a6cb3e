# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugin spec_sweep_step reads only its task's arguments: the step "settings" takes every
setting and returns them, and every later step finds what module_utils/_spec_sweep.py needs in its
result plus the step's own arguments."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.serving.plugins.action import spec_sweep_step as plugin
from ansible_collections.llmops.serving.plugins.module_utils import _spec_sweep, _sweep
from ansible_collections.llmops.serving.plugins.modules.spec_sweep_step import ARGUMENT_SPEC

SETTINGS = dict(step='settings', host='gpu-a01', depths=[16, 5], baseline=True, adaptive=False, adaptive_tiers=True,
                concurrency=[1, 32], num_prompts=8, input_len=16, output_len=32, dataset='', warmup_requests=0,
                rounds=3, min_duration=0, max_spread=0.1, api='', url='', benchmark_host='gpu-a01', timeout=60,
                max_failed_ratio=0.0, report_dir='/r', drafter='/models/drafter', model_path='/models/target')


def validated(args):
    result = ArgumentSpecValidator(ARGUMENT_SPEC).validate(args)
    assert not result.error_messages, result.error_messages
    return result.validated_parameters


def settings():
    args = validated(SETTINGS)
    out = plugin.ActionModule._step_settings(None, args, {'groups': {'sglang_servers': ['gpu-a01']}})
    return dict(out, changed=False, failed=False)


def test_every_option_the_action_maps_is_in_the_argument_spec():
    assert set(plugin.SETTINGS) | set(plugin.STEP_OPTIONS) <= set(ARGUMENT_SPEC)
    assert set(plugin.REQUIRED) == set(ARGUMENT_SPEC['step']['choices'])
    assert ARGUMENT_SPEC['api_key'].get('no_log') is True


def test_the_server_settings_left_out_take_the_sglang_server_defaults_and_the_key_is_not_kept():
    fixed = settings()
    assert (fixed['engine'], fixed['api'], fixed['routed']) == ('sglang', 'generate', False)
    assert fixed['tiers_file'] == '/etc/llmops/spec-sweep-main-adaptive.json' and fixed['host_dir'] == '/r/gpu-a01'
    assert [c['name'] for c in fixed['candidates']] == ['baseline', 'depth 16', 'depth 5']
    assert fixed['options']['sglang_server_port'] == 30000 and 'sglang_server_api_key' not in fixed['options']
    assert 'would_measure' in fixed and 'api_key' not in str(fixed)


def test_the_later_steps_find_what_they_need_in_the_settings_and_their_arguments():
    fixed = settings()
    candidate = fixed['candidates'][1]
    args = validated({'step': 'benchmark', 'settings': fixed, 'candidate': candidate, 'api_key': 's3cret',
                      'progress': {'name': 'depth 16', 'started': 'S'},
                      'server_result': {'url': 'http://10.0.0.1:30000', 'state': 'started', 'depth': 16}})
    opts = plugin.ActionModule._opts(None, args)
    bench = _spec_sweep.benchmark_args(opts)
    assert (bench['url'], bench['api_key'], bench['concurrency'], bench['rounds']) == (
        'http://10.0.0.1:30000', 's3cret', [1, 32], 3)
    record = _spec_sweep.record(candidate, 'depth 16', plugin.ActionModule._progress(opts), 'F',
                                bench={'runs': [{'concurrency': 1, 'output_throughput': 10.0}]})
    report = validated({'step': 'report', 'settings': fixed, 'results': [record], 'tiers': None, 'applied': None,
                        'restored': {'state': 'ready', 'depth': 16, 'reason': None}})
    opts = plugin.ActionModule._opts(None, report)
    best = _sweep.sweep_ranking(opts['__spec_sweep_results'], opts['spec_sweep_concurrency'])
    results = _spec_sweep.results(opts, 'F', {'ansible': 'x', 'engine': None}, best, plugin.truthy)
    assert (results['host'], results['settings']['depths'], results['restored']['depth']) == ('gpu-a01', [16, 5], 16)
    assert results['candidates'] == [record] and '<svg' in _sweep.sweep_chart(results)
