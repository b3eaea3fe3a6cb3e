"""The H200 proof driver (tests/gpu/h200_proof.sh) in its --simulate dry run, phase d.

Keeps the by-hand GPU proof from rotting and shows the collection's core claim on the
SGLang simulator (a test double, figures are not GPU figures): SGLang 0.5.11 silently skips
a ``layers.0.*`` drafter, so a deploy without the drafter step (``--skip-tags drafter``)
starts a server that fails the acceptance floor; the normal deploy renames the drafter to
``midlayer.*``, restarts the server and passes. Phase g: two servers behind the real
sglang-router (tests/integration/install_router.sh), rolled with and without the drain, and a
rollback back into the router. The models come from the engine venv's generator (tests/engines)
where it is installed, else from the stand-in writer of the standard library.
"""

from __future__ import annotations

import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_phase_d_unchecked_drafter_fails_the_floor_then_the_fix_passes(tmp_path):
    env = dict(os.environ, LLMOPS_GPU_STATE=str(tmp_path / 'state'), SGLANG_SIM_VERSION='0.5.11')
    proc = subprocess.run([os.path.join(ROOT, 'tests', 'gpu', 'h200_proof.sh'), '--simulate', 'd'], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    summary = json.loads((tmp_path / 'state' / 'proof' / 'results' / 'summary.json').read_text())
    steps = {step['step']: step for step in summary['steps']}
    assert list(steps) == ['models', 'unfixed_0511', 'fixed_0511', 'stop'], proc.stdout[-3000:]
    assert {name: step['outcome'] for name, step in steps.items()} == dict.fromkeys(steps, 'PASS'), proc.stdout[-3000:]
    assert proc.returncode == 0
    unfixed, fixed = steps['unfixed_0511']['figures'], steps['fixed_0511']['figures']
    assert unfixed['version'] == fixed['version'] == '0.5.11'
    assert unfixed['accept_length'] < 2.0 <= fixed['accept_length']
    assert unfixed['message'].startswith('the drafter is not being accepted')
    assert (fixed['layout_before'], fixed['layout_after'], fixed['renamed']) == ('layers', 'midlayer', 10)
    assert fixed['pid'] != unfixed['pid']


def test_phase_g_rolling_update_behind_the_real_router(tmp_path):
    """Phase g on the simulator with the real sglang-router: two servers on one simulated GPU, a
    drained rollout with no failed or cut stream and a drain wait of seconds (the live load, not
    the 30 s gauges), the same without the drain, a rolled-back random drafter back in the router."""
    subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True, timeout=900)
    env = dict(os.environ, LLMOPS_GPU_STATE=str(tmp_path / 'state'))
    proc = subprocess.run([os.path.join(ROOT, 'tests', 'gpu', 'h200_proof.sh'), '--simulate', 'g'], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900, check=False)
    summary = json.loads((tmp_path / 'state' / 'proof' / 'results' / 'summary.json').read_text())
    steps = {step['step']: step for step in summary['steps']}
    assert list(steps) == ['models', 'g_start', 'g_drain', 'g_nodrain', 'g_rollback', 'g_sampled', 'g_stop'], \
        proc.stdout[-3000:]
    assert {name: step['outcome'] for name, step in steps.items()} == dict.fromkeys(steps, 'PASS'), proc.stdout[-3000:]
    assert proc.returncode == 0
    drained, rollback = steps['g_drain']['figures'], steps['g_rollback']['figures']
    assert (drained['failed'], drained['truncated']) == (0, 0) and drained['requests'] >= 500
    assert drained['drain_s'].count('get_load') == 2
    assert steps['g_nodrain']['figures']['drain_s'] == 'none'
    assert (rollback['failed'], rollback['truncated']) == (0, 0)
    assert rollback['random_accept_length'] < 2.0 <= rollback['accept_length']
    assert '## Rollouts behind the router' in (tmp_path / 'state' / 'proof' / 'results' / 'summary.md').read_text()
