"""The H200 proof driver (tests/gpu/h200_proof.sh) in its --simulate dry run, phase d.

Keeps the by-hand GPU proof from rotting and shows the collection's core claim on the
SGLang simulator (a test double, figures are not GPU figures): SGLang 0.5.11 silently skips
a ``layers.0.*`` drafter, so a deploy without the drafter step (``--skip-tags drafter``)
starts a server that fails the acceptance floor; the normal deploy renames the drafter to
``midlayer.*``, restarts the server and passes. Needs the engine venv (tests/engines) for
the model generator, as the integration stage installs it.
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
