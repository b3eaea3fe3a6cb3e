# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm_benchmark and playbooks/benchmark.yml on this machine.

Simulator (local inventory): the simulator's timing model (tests/sim/README.md) makes
depth 10 the fastest at 8 concurrent requests with a drafter of quality 0.95 (+20 % over
depth 5, +23 % over 16). One sweep (baseline, 16, 10, 5; apply_best) must find it, write
a report that agrees with results.json, show its progress in task names, say SIMULATOR
in the report, results.json and chart, and leave the server running depth 10. A second,
short sweep without apply_best puts the server back on its deployed depth (16, the local
inventory's). A third one over depths 16 and 5 at concurrency 1 and 32, where the model makes
depth 16 fastest alone and depth 5 at 32, builds the adaptive tier table {1: [15], 6: [4]},
measures it (the simulator drafts per batch-size tier) and rolls it out.

Real vLLM CPU engine (tests/engines, marker ``engine``): the module's token counts equal
the engine's own /metrics counters exactly, its acceptance length equals the counters'
``1 + accepted / drafts`` within 2 %, and the tokens it saw per streamed chunk agree with
that acceptance within 15 % (the first chunk carries the prefill token alone), checked on every run of
a sweep over two depths with the good drafter, end to end through the playbook.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
LOCAL = os.path.join(ROOT, 'inventories', 'local')
SVG = '{http://www.w3.org/2000/svg}'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def sweep_vars(base, port):
    return {
        'llmops_local_dir': str(base),
        'llmops_simulator_checkpoints': str(base / 'checkpoints'),
        'sglang_server_name': 'bench',
        'sglang_server_port': port,
        'sglang_server_env': {'PYTHONPATH': SIM, 'NVSIM_STATE_DIR': str(base / 'nvsim'), 'SGLANG_SIM_SPEED': '0.5',
                              'SGLANG_SIM_PHASES': 'imports=0.2,load=0.2,graphs=0.2,warmup=0.2'},
        'spec_sweep_depths': [16, 10, 5],
        'spec_sweep_concurrency': [8],
        'spec_sweep_num_prompts': 16,
        'spec_sweep_input_len': 32,
        'spec_sweep_output_len': 256,
        'spec_sweep_warmup_requests': 2,
        'spec_sweep_rounds': 3,  # figures are the median of 3 rounds: the machine is shared
        'spec_sweep_report_dir': str(base / 'report'),
        'spec_sweep_apply_best': True,
    }


def test_sweep_on_the_simulator(run_playbook, prepare_simulator, tmp_path):
    """One sweep (about 4 minutes), checked from every side; the server is stopped at the end."""
    # A drafter of quality 0.95 (the simulator's documented case); the test bed's preparation
    # sees that it exists and does not write its perfect one.
    subprocess.run([sys.executable, os.path.join(SIM, 'make_tiny_checkpoint.py'), str(tmp_path / 'checkpoints'),
                    '--quality', '0.95'], check=True, capture_output=True)
    extra = sweep_vars(tmp_path, free_port())
    prepare_simulator(inventory=LOCAL, extra_vars=extra)
    try:
        checked = run_playbook('playbooks/benchmark.yml', inventory=LOCAL, extra_vars=extra, check=True, expect_rc=0)
        assert 'Would measure baseline, depth 16, depth 10, depth 5 at concurrency 8' in checked.stdout
        assert not (tmp_path / 'report').exists()
        result = run_playbook('playbooks/benchmark.yml', inventory=LOCAL, extra_vars=extra)
        sweep = {'result': result, 'dir': tmp_path / 'report' / 'localhost', 'port': extra['sglang_server_port']}
        check_sweep_succeeds_and_shows_its_progress(sweep)
        check_sweep_finds_the_middle_depth(sweep)
        check_report_agrees_with_results_json(sweep)
        check_chart_renders_one_line_per_concurrency(sweep)
        check_best_depth_is_left_running(sweep)
        check_sweep_without_apply_best_restores_the_deployed_depth(run_playbook, dict(extra, spec_sweep_apply_best=False))
        check_tier_table_from_the_best_per_load_is_rolled_out(run_playbook, dict(extra))
        # SGLang 0.5.15 (and the simulator) logs a deprecation for every /get_server_info.
        assert 'is deprecated' not in (tmp_path / 'log' / 'sglang-main.log').read_text()
    finally:
        run_playbook('playbooks/stop.yml', inventory=LOCAL, extra_vars=extra, expect_rc=0)
    assert not any('--port %d' % extra['sglang_server_port'] in line for line in
                   subprocess.run(['ps', '-eo', 'args'], capture_output=True, text=True, check=True).stdout.splitlines())


def check_sweep_succeeds_and_shows_its_progress(sweep):
    result = sweep['result']
    assert result.rc == 0, result.stdout[-6000:]
    results = json.loads((sweep['dir'] / 'results.json').read_text())
    assert {c['name']: c['error'] for c in results['candidates'] if c['error']} == {}
    assert result.recap['localhost']['failed'] == 0
    assert result.recap['localhost']['rescued'] == 0, result.stdout[-6000:]
    for candidate in ('baseline', 'depth 16', 'depth 10', 'depth 5'):
        for task in ('TASK [Plan the server for %s]', 'TASK [Start the server and wait until it is healthy and serves, for %s]',
                     'TASK [llmops.serving.spec_sweep : Benchmark candidate %s at concurrency 8]'):
            assert task % candidate in result.stdout


def check_sweep_finds_the_middle_depth(sweep):
    results = json.loads((sweep['dir'] / 'results.json').read_text())
    assert results['best']['name'] == 'depth 10'
    assert results['best']['per_concurrency'] == {'8': 'depth 10'}
    by_name = {c['name']: c for c in results['candidates']}
    assert list(by_name) == ['baseline', 'depth 16', 'depth 10', 'depth 5']
    runs = {name: c['runs'][0] for name, c in by_name.items()}
    for name, run in runs.items():
        # Counts are the sum of the 3 rounds.
        assert (run['completed'], run['failed'], run['output_tokens']) == (3 * 16, 0, 3 * 16 * 256), name
        spread = run['spread']['output_throughput']
        assert spread['min'] <= run['output_throughput'] == spread['median'] <= spread['max'], name
        assert len(run['rounds']) == 3, name
        # The client counts what the server counts.
        assert run['server_counters']['generation_tokens'] == run['output_tokens'], name
    # Acceptance against the simulator's model E(N) at q = 0.95 (README): 7.49, 6.68, 4.36.
    for name, expected in (('depth 16', 7.49), ('depth 10', 6.68), ('depth 5', 4.36)):
        assert runs[name]['accept_length_source'] == 'per_request'
        assert runs[name]['accept_length'] == pytest.approx(expected, rel=0.15), name
    assert runs['baseline']['accept_length'] is None
    # Every candidate ran the command the sweep asked for.
    for name, depth in (('depth 16', 16), ('depth 10', 10), ('depth 5', 5)):
        args = by_name[name]['server_args']
        assert (args['speculative_num_steps'], args['speculative_eagle_topk'], args['speculative_num_draft_tokens']) == (
            depth - 1, 1, depth)
        assert '--speculative-num-draft-tokens' in by_name[name]['command']
    assert by_name['baseline']['server_args']['speculative_algorithm'] is None
    assert results['versions']['engine'] == '0.5.15.post1'
    assert results['applied'] == 'depth 10'
    assert results['restored'] is None
    assert results['simulator'] is True


def check_report_agrees_with_results_json(sweep):
    results = json.loads((sweep['dir'] / 'results.json').read_text())
    report = (sweep['dir'] / 'report.md').read_text()
    rows = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 13 and re.match(r'^[\d.]+$', cells[1]):
            rows[cells[0]] = cells
    baseline = results['candidates'][0]['runs'][0]['output_throughput']
    assert set(rows) == {'baseline', 'depth 16', '**depth 10** (best)', 'depth 5'}
    for cand in results['candidates']:
        run = cand['runs'][0]
        row = rows['**depth 10** (best)' if cand['name'] == 'depth 10' else cand['name']]
        assert row[1] == '%.1f' % run['output_throughput']
        spread = run['spread']['output_throughput']
        assert row[2] == '%.1f-%.1f' % (spread['min'], spread['max'])
        assert row[3] == '%.2fx' % (run['output_throughput'] / baseline)
        assert row[4] == ('%.2f' % run['accept_length'] if run['accept_length'] is not None else 'n/a')
        assert row[11] == '%d / %d' % (run['completed'], run['failed'])
    assert '**Best overall: depth 10**' in report and 'rolled out and verified' in report
    assert report.startswith('# Speculative decoding sweep on localhost (SIMULATOR)')
    assert 'not from SGLang on a GPU' in report
    level = results['best']['levels']['8']
    assert '| 8 | depth 10 | %.1f' % level['output_throughput']['median'] in report
    assert level['why'] in report


def check_chart_renders_one_line_per_concurrency(sweep):
    results = json.loads((sweep['dir'] / 'results.json').read_text())
    root = ET.parse(str(sweep['dir'] / 'chart.svg')).getroot()
    lines = {line.get('class'): line for line in root.findall('.//%spolyline' % SVG)}
    # Throughput, speed-up and acceptance, one concurrency level each.
    assert set(lines) == {'throughput', 'speedup-line', 'accept-line'}
    assert {line.get('data-concurrency') for line in lines.values()} == {'8'}
    throughput_points = [tuple(map(float, p.split(','))) for p in lines['throughput'].get('points').split()]
    assert len(throughput_points) == 3
    # Depths to scale (5, 10, 16); SVG y grows downwards: depth 10 is the highest point.
    xs = [point[0] for point in throughput_points]
    assert (xs[1] - xs[0]) / (xs[2] - xs[1]) == pytest.approx(5.0 / 6.0, rel=0.01)
    heights = {depth: point[1] for depth, point in zip((5, 10, 16), throughput_points)}
    assert heights[10] < heights[5] and heights[10] < heights[16]
    texts = ''.join(t.text or '' for t in root.iter('%stext' % SVG))
    assert 'best overall: %s' % results['best']['name'] in texts
    assert 'SIMULATOR' in texts
    assert len([e for e in root.iter('%sline' % SVG) if e.get('class') == 'spread']) == 3 * 3  # a bar per point


def check_best_depth_is_left_running(sweep, depth=10):
    url = 'http://127.0.0.1:%d/server_info' % sweep['port']
    with urllib.request.urlopen(url, timeout=10) as resp:
        info = json.loads(resp.read())
    assert info['speculative_num_draft_tokens'] == depth
    assert info['speculative_num_steps'] == depth - 1


def check_sweep_without_apply_best_restores_the_deployed_depth(run_playbook, extra):
    """The server runs depth 10 (rolled out); a one-candidate sweep leaves depth 5 running, then
    puts back what the inventory deploys (depth 16)."""
    extra.update({'spec_sweep_depths': [5], 'spec_sweep_baseline': False, 'spec_sweep_rounds': 1,
                  'spec_sweep_num_prompts': 4, 'spec_sweep_output_len': 32, 'spec_sweep_warmup_requests': 0})
    result = run_playbook('playbooks/benchmark.yml', inventory=LOCAL, extra_vars=extra)
    assert result.rc == 0, result.stdout[-6000:]
    assert 'TASK [Plan the server for the deployed configuration]' in result.stdout
    check_best_depth_is_left_running({'port': extra['sglang_server_port']}, depth=16)
    results = json.loads((Path(extra['spec_sweep_report_dir']) / 'localhost' / 'results.json').read_text())
    assert results['applied'] is None
    assert results['restored'] == {'state': 'ready', 'depth': 16, 'reason': None}
    assert results['best']['levels']['8']['established'] is True  # the only candidate
    report = (Path(extra['spec_sweep_report_dir']) / 'localhost' / 'report.md').read_text()
    assert 'the server runs its deployed configuration again (depth 16, ready)' in report


def check_tier_table_from_the_best_per_load_is_rolled_out(run_playbook, extra):
    """Model at q = 0.95 (tests/sim/README.md): depth 16 beats 5 by 40 % alone, depth 5 beats 16 by
    75 % at 32, so one round each tells them apart; the table runs each where it wins."""
    extra.update({'spec_sweep_depths': [16, 5], 'spec_sweep_baseline': False, 'spec_sweep_concurrency': [1, 32],
                  'spec_sweep_rounds': 1, 'spec_sweep_num_prompts': 32, 'spec_sweep_output_len': 64,
                  'spec_sweep_warmup_requests': 0})
    result = run_playbook('playbooks/benchmark.yml', inventory=LOCAL, extra_vars=extra)
    assert result.rc == 0, result.stdout[-6000:]
    folder = Path(extra['spec_sweep_report_dir']) / 'localhost'
    results = json.loads((folder / 'results.json').read_text())
    tiers = results['adaptive_tiers']
    assert tiers['picked'] == {'1': 'depth 16', '32': 'depth 5'}
    assert tiers['config'] == {'1': {'candidate_steps': [15]}, '6': {'candidate_steps': [4]}}
    assert json.loads(Path(tiers['file']).read_text()) == tiers['config']
    by_name = {c['name']: c for c in results['candidates']}
    assert list(by_name) == ['depth 16', 'depth 5', 'adaptive tiers']
    table = by_name['adaptive tiers']
    assert table['error'] is None and table['label'] == 'adaptive {1:[15], 6:[4]}'
    assert table['command'][table['command'].index('--speculative-adaptive-config') + 1] == tiers['file']
    # The server drafted per tier: alone as depth 16, at 32 as depth 5 (E(16) = 7.49, E(5) = 4.36).
    accept = {run['concurrency']: run['accept_length'] for run in table['runs']}
    assert accept[1] == pytest.approx(7.49, rel=0.15) and accept[32] == pytest.approx(4.36, rel=0.15)
    # Fastest of the three by the geometric mean, rolled out and checked against what the server runs.
    assert results['best']['name'] == 'adaptive tiers' and results['applied'] == 'adaptive tiers'
    assert 'TASK [llmops.serving.spec_sweep : Verify the rolled-out configuration]' in result.stdout
    assert 'serves adaptive {1:[15], 6:[4]}' in result.stdout
    url = 'http://127.0.0.1:%d/server_info' % extra['sglang_server_port']
    with urllib.request.urlopen(url, timeout=10) as resp:
        info = json.loads(resp.read())
    assert (info['speculative_adaptive'], info['speculative_adaptive_config'], info['speculative_num_steps']) == (
        True, tiers['file'], 15)
    report = (folder / 'report.md').read_text()
    assert 'measured as `adaptive tiers` from `%s`' % tiers['file'] in report
    assert '`sglang_server_speculative_adaptive_config: %s`' % tiers['file'] in report


# ---------------------------------------------------------------- real vLLM CPU engine

ENGINES = os.path.join(ROOT, 'tests', 'engines')
ENGINE_VENV = os.environ.get('LLMOPS_ENGINE_VENV', os.path.join(ROOT, '.cache', 'vllm-venv'))
ENGINE_PYTHON = os.path.join(ENGINE_VENV, 'bin', 'python')


def engine_setup(tmp_path, host_vars=None):
    """Tiny target + drafters (tests/engines/make_models.py) and an inventory for this machine."""
    if not os.path.exists(ENGINE_PYTHON):
        pytest.fail('no engine venv at %s: run tests/engines/install_vllm.sh' % ENGINE_VENV)
    out = tmp_path / 'models'
    subprocess.run([ENGINE_PYTHON, os.path.join(ENGINES, 'make_models.py'), str(out), '--shape', 'cpu'],
                   check=True, capture_output=True, timeout=600)
    manifest = json.loads((out / 'manifest.json').read_text())
    good = out / manifest['drafters']['good-layers0']['path']
    host = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    host.update({key: str(good) if value == 'GOOD' else value for key, value in (host_vars or {}).items()})
    inventory = tmp_path / 'inventory.json'
    inventory.write_text(json.dumps({'all': {'hosts': {'localhost': host}}}))
    return {'target': out / manifest['target']['path'], 'good': good, 'inventory': str(inventory)}


@pytest.mark.engine
def test_vllm_depth_sweep_through_the_playbook(run_playbook, tmp_path):
    # What the sweep varies per candidate must not be an extra var (those win over the
    # candidate's value; the role refuses them): the drafter goes into the inventory.
    # Depth 4 is also the host's deployed depth and the last candidate: putting the host back on
    # its deployed configuration after the sweep restarts nothing (one vLLM start fewer).
    setup = engine_setup(tmp_path, {'sglang_server_speculative_draft_model_path': 'GOOD',
                                    'sglang_server_speculative_depth': 4})
    nvsim = tmp_path / 'nvsim'
    subprocess.run([sys.executable, os.path.join(SIM, 'nvsim.py'), 'init', '--count', '1'], check=True,
                   capture_output=True, env=dict(os.environ, NVSIM_STATE_DIR=str(nvsim)))
    extra = {
        'sglang_server_engine': 'vllm',
        'sglang_server_python': ENGINE_PYTHON,
        # The models and the server's files live in this test's temporary folder (root's).
        'sglang_server_user': '',
        'sglang_server_launcher': 'process',
        'sglang_server_name': 'vllm-sweep',
        'sglang_server_model_path': str(setup['target']),
        'sglang_server_min_accept_length': 1.5,
        'sglang_server_tp_size': 1,
        'sglang_server_port': free_port(),
        'sglang_server_extra_args': ['--max-model-len', '1024', '--dtype', 'bfloat16', '--enforce-eager'],
        'sglang_server_env': {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_CPU_KVCACHE_SPACE': '1',
                              'VLLM_NO_USAGE_STATS': '1'},
        'sglang_server_config_dir': str(tmp_path / 'etc'),
        'sglang_server_run_dir': str(tmp_path / 'run'),
        'sglang_server_log_path': str(tmp_path / 'server.log'),
        'sglang_server_health_timeout': 600,
        # No GPUs for the CPU engine: the preflight looks at one simulated idle GPU.
        'gpu_preflight_nvidia_smi_path': os.path.join(SIM, 'nvidia-smi'),
        'gpu_preflight_environment': {'NVSIM_STATE_DIR': str(nvsim)},
        'spec_sweep_depths': [2, 4],
        'spec_sweep_concurrency': [1, 4],
        'spec_sweep_num_prompts': 8,
        'spec_sweep_input_len': 16,
        'spec_sweep_output_len': 64,
        'spec_sweep_warmup_requests': 2,
        'spec_sweep_rounds': 1,
        'spec_sweep_report_dir': str(tmp_path / 'report'),
    }
    try:
        result = run_playbook('playbooks/benchmark.yml', inventory=setup['inventory'], extra_vars=extra, timeout=1800)
        assert result.rc == 0, result.stdout[-6000:]
    finally:
        run_playbook('playbooks/stop.yml', inventory=setup['inventory'], extra_vars=extra, expect_rc=0)
    folder = tmp_path / 'report' / 'localhost'
    results = json.loads((folder / 'results.json').read_text())
    print((folder / 'report.md').read_text())
    assert {c['name']: c['error'] for c in results['candidates']} == {'baseline': None, 'depth 2': None,
                                                                      'depth 4': None}
    assert results['settings']['api'] == 'completions' and results['settings']['engine'] == 'vllm'
    by_name = {c['name']: c for c in results['candidates']}
    for name, depth in (('depth 4', 4), ('depth 2', 2)):
        for run in by_name[name]['runs']:
            # llm_benchmark's figures against the engine's own /metrics counters over the run.
            counters = run['server_counters']
            assert (run['completed'], run['failed']) == (8, 0)
            assert counters['generation_tokens'] == run['output_tokens'] == 8 * 64
            assert run['input_tokens'] == counters['prompt_tokens']
            engine_accept = 1.0 + counters['spec_accepted_tokens'] / counters['spec_drafts']
            assert run['accept_length_source'] == 'metrics'
            assert run['accept_length'] == pytest.approx(engine_accept, rel=0.02)
            assert engine_accept == pytest.approx(depth, rel=0.05), (name, run['concurrency'])
            # Seen by the client alone: tokens per streamed chunk.
            assert run['tokens_per_chunk'] == pytest.approx(engine_accept, rel=0.15)
            assert run['ttft_ms']['p50'] <= run['e2e_ms']['p50']
    assert all(run['accept_length'] is None for run in by_name['baseline']['runs'])
    assert results['best']['name'] in by_name
    assert results['restored'] == {'state': 'ready', 'depth': 4, 'reason': None}
    assert (folder / 'chart.svg').exists() and (folder / 'report.md').exists()
