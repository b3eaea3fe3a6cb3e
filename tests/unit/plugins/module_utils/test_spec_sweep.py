# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the spec_sweep role decides between its deploys (module_utils/_spec_sweep.py): the settings,
llm_benchmark's arguments, the record per candidate, results.json and the check after the rollout."""

from __future__ import annotations

import pytest
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils import _spec_sweep


def truthy(value):
    return boolean(value, strict=False)


def options(**kw):
    out = dict(_spec_sweep.DEFAULTS, inventory_hostname='gpu-a01', spec_sweep_depths=[16, 10], spec_sweep_baseline=True,
               spec_sweep_adaptive=False, spec_sweep_adaptive_tiers=True, spec_sweep_concurrency=[1, 8],
               spec_sweep_num_prompts=64, spec_sweep_input_len=128, spec_sweep_output_len=256, spec_sweep_dataset='',
               spec_sweep_warmup_requests=4, spec_sweep_rounds=3, spec_sweep_min_duration=0, spec_sweep_max_spread=0.1,
               spec_sweep_api='', spec_sweep_url='', spec_sweep_benchmark_host='gpu-a01', spec_sweep_timeout=600,
               spec_sweep_max_failed_ratio=0.0, spec_sweep_report_dir='/r',
               sglang_server_speculative_draft_model_path='/models/drafter', sglang_server_model_path='/models/target')
    out.update(kw)
    return out


CANDIDATES = [{'name': 'baseline', 'depth': None, 'adaptive': False}, {'name': 'depth 16', 'depth': 16, 'adaptive': False}]


def fixed(**kw):
    opts = options(**kw)
    opts['__spec_sweep'] = _spec_sweep.settings(opts, {}, CANDIDATES, truthy, '2026-01-01T00:00:00Z')
    return opts


@pytest.mark.parametrize('kw', [
    {'spec_sweep_depths': [1]}, {'spec_sweep_depths': ['5']}, {'spec_sweep_depths': [True]},
    {'spec_sweep_depths': [], 'spec_sweep_baseline': 'no'}, {'spec_sweep_concurrency': []},
    {'spec_sweep_rounds': 0}, {'spec_sweep_rounds': 'x'}, {'sglang_server_speculative_draft_model_path': None},
])
def test_settings_the_sweep_cannot_run_are_refused_with_the_role_message(kw):
    message = _spec_sweep.settings_problem(options(**kw), truthy)
    assert message.startswith('spec_sweep on gpu-a01: spec_sweep_depths must be integers of at least 2 (got ')
    assert message.endswith("and speculative depths need a drafter (sglang_server_speculative_draft_model_path is '%s')."
                            % (kw.get('sglang_server_speculative_draft_model_path', '/models/drafter') or ''))


@pytest.mark.parametrize('kw', [{}, {'spec_sweep_depths': [], 'sglang_server_speculative_draft_model_path': ''},
                                {'spec_sweep_rounds': '2'}])
def test_settings_that_run(kw):
    assert _spec_sweep.settings_problem(options(**kw), truthy) is None


def test_settings_fix_what_every_candidate_starts_from():
    groups = {'sglang_routers': ['r1'], 'sglang_servers': ['gpu-a01']}
    out = _spec_sweep.settings(options(sglang_server_extra_args=['--x']), groups, CANDIDATES, truthy, 'T')
    assert out == {
        'engine': 'sglang', 'api': 'generate', 'drafter': '/models/drafter', 'extra_args': ['--x'],
        'target_path': '/models/target', 'candidates': CANDIDATES, 'started': 'T', 'measures_tiers': True,
        'any_adaptive': True, 'tiers_file': '/etc/llmops/spec-sweep-main-adaptive.json', 'host_dir': '/r/gpu-a01',
        'routed': True,
        'extra_vars_message': 'spec_sweep on gpu-a01: sglang_server_speculative_draft_model_path, _depth, _num_steps,'
                              ' _eagle_topk, _num_draft_tokens, _adaptive, _adaptive_config and sglang_server_extra_args'
                              ' must not be extra vars (-e): they would override the value of every candidate. Set them'
                              ' in the inventory (group_vars or host_vars) or in the play.',
        'would_measure': 'Would measure baseline, depth 16 at concurrency 1, 8 (64 prompts each) against'
                         ' http://127.0.0.1:30000, then an adaptive tier table from the best per concurrency level'
                         ' (if they differ), and write the report to /r/gpu-a01.'}
    vllm = _spec_sweep.settings(options(sglang_server_engine='vllm', sglang_server_model_path='org/model', spec_sweep_adaptive=True),
                                {'sglang_servers': ['gpu-a01']}, CANDIDATES, truthy, 'T')
    assert (vllm['api'], vllm['target_path'], vllm['measures_tiers'], vllm['any_adaptive'], vllm['routed']) == (
        'completions', None, False, False, False)
    assert vllm['would_measure'].endswith('against http://127.0.0.1:30000, and write the report to /r/gpu-a01.')
    assert vllm['extra_vars_message'].startswith('spec_sweep on gpu-a01: ') and 'sglang_server_extra_args' not in vllm['extra_vars_message']


def test_what_the_server_runs_after_the_sweep():
    assert _spec_sweep.restored({'state': 'started', 'depth': 16, 'url': 'u'}) == {'state': 'started', 'depth': 16, 'reason': None}
    assert _spec_sweep.restored({'state': 'failed', 'depth': None, 'reason': 'oom'})['reason'] == 'oom'
    with pytest.raises(_spec_sweep.SweepError):
        _spec_sweep.restored(None)


def test_the_url_follows_the_server_just_started_unless_set():
    assert _spec_sweep.server_url(options(sglang_server_port=31000)) == 'http://127.0.0.1:31000'
    assert _spec_sweep.server_url(options(sglang_server_result={'url': 'http://10.0.0.1:30000'})) == 'http://10.0.0.1:30000'
    assert _spec_sweep.server_url(options(sglang_server_result={'state': 'failed'})) == 'http://127.0.0.1:30000'
    assert _spec_sweep.server_url(options(spec_sweep_url='http://lb:80', sglang_server_result={'url': 'u'})) == 'http://lb:80'


def test_benchmark_arguments_of_a_candidate_and_of_the_check():
    opts = fixed(sglang_server_api_key='secret', sglang_server_served_model_name='tiny')
    assert _spec_sweep.benchmark_args(opts) == {
        'url': 'http://127.0.0.1:30000', 'api': 'generate', 'flush_cache': True, 'timeout': 600, 'num_prompts': 64,
        'concurrency': [1, 8], 'input_len': 128, 'output_len': 256, 'warmup_requests': 4, 'rounds': 3, 'min_duration': 0,
        'max_failed_ratio': 0.0, 'model': 'tiny', 'api_key': 'secret'}
    check = _spec_sweep.benchmark_args(fixed(spec_sweep_dataset='/p.jsonl', sglang_server_engine='vllm'), check=True)
    assert check == {'url': 'http://127.0.0.1:30000', 'api': 'completions', 'flush_cache': False, 'timeout': 600,
                     'num_prompts': 4, 'concurrency': [1], 'input_len': 16, 'output_len': 32, 'warmup_requests': 0}
    assert _spec_sweep.benchmark_args(fixed(spec_sweep_dataset='/p.jsonl'))['dataset'] == '/p.jsonl'


def test_record_of_a_measured_and_of_a_failed_candidate():
    progress = {'name': 'depth 16', 'started': 'S', 'launch': {'version': '0.5.15'}, 'command': ['python']}
    bench = {'server': {'version': '0.5.15'}, 'model': 'm', 'http_library': 'requests', 'runs': [{'concurrency': 1}]}
    assert _spec_sweep.record(CANDIDATES[1], 'depth 16', progress, 'F', bench=bench) == dict(
        CANDIDATES[1], label='depth 16', started='S', finished='F', error=None, launch={'version': '0.5.15'},
        command=['python'], server_args={'version': '0.5.15'}, model='m', http_library='requests', runs=[{'concurrency': 1}])
    assert _spec_sweep.record(CANDIDATES[1], 'depth 16', {}, 'F', error='boom', failed_task='Plan') == dict(
        CANDIDATES[1], label='depth 16', started=None, finished='F', error='boom', failed_task='Plan', launch={},
        command=[], runs=[])


def test_results_json_content():
    opts = fixed(spec_sweep_dataset='/p.jsonl', llmops_simulator='true', __spec_sweep_results=[{'name': 'baseline'}],
                 spec_sweep_restored={'state': 'ready'})
    best = {'name': 'baseline'}
    out = _spec_sweep.results(opts, 'F', {'ansible': '2.19', 'engine': None}, best, truthy)
    assert (out['host'], out['simulator'], out['started'], out['finished'], out['best']) == (
        'gpu-a01', True, '2026-01-01T00:00:00Z', 'F', best)
    settings = out['settings']
    assert (settings['input_len'], settings['dataset'], settings['url']) == (None, '/p.jsonl', 'http://127.0.0.1:30000')
    assert (out['applied'], out['restored'], out['adaptive_tiers'], out['candidates']) == (
        None, {'state': 'ready'}, None, [{'name': 'baseline'}])
    assert sorted(out['settings']) == sorted([
        'engine', 'model_path', 'drafter', 'depths', 'baseline', 'adaptive', 'adaptive_tiers', 'concurrency', 'num_prompts',
        'input_len', 'output_len', 'dataset', 'warmup_requests', 'rounds', 'min_duration', 'max_spread', 'api', 'url',
        'benchmark_host'])
    assert _spec_sweep.best_candidate(CANDIDATES, {'name': 'depth 16'}) is CANDIDATES[1]
    assert _spec_sweep.best_candidate(CANDIDATES, {'name': None}) is None
    assert _spec_sweep.where('h', {'name': None}, '/r/h') == 'Best on h: none (every candidate failed); report in /r/h/report.md'


ADAPTIVE = {'name': 'adaptive tiers', 'depth': 16, 'adaptive': True, 'adaptive_config': '/etc/t.json', 'label': 'adaptive {1:[15]}'}


@pytest.mark.parametrize('want, server, ok', [
    (CANDIDATES[0], {}, True),
    (CANDIDATES[0], {'speculative_algorithm': None}, True),
    (CANDIDATES[0], {'speculative_algorithm': 'EAGLE3'}, False),
    (CANDIDATES[1], {'speculative_num_draft_tokens': 16}, True),
    (CANDIDATES[1], {'speculative_num_draft_tokens': '16', 'speculative_adaptive': True}, False),
    (CANDIDATES[1], {'speculative_num_draft_tokens': 10}, False),
    (ADAPTIVE, {'speculative_adaptive': True, 'speculative_num_steps': 15, 'speculative_adaptive_config': '/etc/t.json'}, True),
    (ADAPTIVE, {'speculative_adaptive': True, 'speculative_num_steps': 15, 'speculative_adaptive_config': None}, False),
    (dict(ADAPTIVE, adaptive_config=''), {'speculative_adaptive': True, 'speculative_num_steps': 15}, True),
    (ADAPTIVE, {'speculative_adaptive': False, 'speculative_num_steps': 15, 'speculative_adaptive_config': '/etc/t.json'}, False),
])
def test_the_check_after_the_rollout(want, server, ok):
    verified, message = _spec_sweep.verdict('gpu-a01', want, {'server': server, 'runs': [{'completed': 4}]})
    label = want.get('label', want['name'])
    assert (verified, message.startswith('gpu-a01 serves %s' % label if ok else 'gpu-a01 should now serve %s, but' % label)) == (
        ok, True)


def test_the_check_fails_when_a_request_failed_and_names_what_the_server_reports():
    server = {'speculative_num_draft_tokens': 16, 'speculative_algorithm': 'EAGLE3'}
    verified, message = _spec_sweep.verdict('h', CANDIDATES[1], {'server': server, 'runs': [{'completed': 3}]})
    assert not verified
    assert message == ('h should now serve depth 16, but the server reports speculative_algorithm=EAGLE3,'
                       ' speculative_num_steps=?, speculative_num_draft_tokens=16, speculative_adaptive=?,'
                       ' speculative_adaptive_config=? and 3/4 check requests completed.')


def test_the_tier_table_with_its_file_and_what_results_json_keeps_of_it():
    table = {'candidate': {'name': 'adaptive tiers', 'depth': 8, 'adaptive': True}, 'config': {'tiers': []}, 'tiers': {},
             'picked': {'1': 'depth 8'}, 'why': 'w'}
    out = _spec_sweep.tiers(table, '/etc/t.json')
    assert out['file'] == '/etc/t.json' and out['candidate'] == table['candidate']
    assert out['measure'] == dict(table['candidate'], adaptive_config='/etc/t.json')
    assert _spec_sweep.tiers(dict(table, candidate=None), '/etc/t.json')['measure'] is None
    assert _spec_sweep.tier_table(dict(out, changed=False, failed=False)) == dict(table, file='/etc/t.json')
    assert _spec_sweep.tier_table(None) is None
