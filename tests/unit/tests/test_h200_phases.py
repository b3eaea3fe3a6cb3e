"""tests/gpu/h200/proof.py: SGLang's start phases read from a server log recorded on the H200 (phase h)."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
RESULTS = os.path.join(ROOT, 'tests', 'gpu', 'results', '2026-12-04-h200', 'phase-h')


def proof_module():
    spec = importlib.util.spec_from_file_location('h200_proof', os.path.join(ROOT, 'tests', 'gpu', 'h200', 'proof.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_phases_of_the_recorded_cold_start():
    proof = proof_module()
    with open(os.path.join(RESULTS, '04-h-cold', 'server.log'), encoding='utf-8', errors='replace') as handle:
        figures = proof.h_phases(handle.read(), 131.343)
    assert (figures['weights_s'], figures['draft_weights_s']) == (11.44, 0.45)
    # Five captures (target prefill and verify, draft prefill, decode and extend), summed.
    assert figures['capture_s'] == 58.75
    assert figures['scheduler_imports_s'] == 23.0
    assert 0 < figures['launcher_imports_s'] < figures['ready_s']


def test_table_gives_medians_and_the_targets_of_issue_36():
    proof = proof_module()
    starts = [{'folder': 'c%d' % i, 'outcome': 'PASS', 'figures': {'h_mode': 'cold', 'ready_s': r, 'weights_s': w}}
              for i, (r, w) in enumerate(((130.0, 11.0), (110.0, 12.0), (135.0, 13.0)))]
    starts += [{'folder': 'w%d' % i, 'outcome': 'PASS', 'figures': {'h_mode': 'warm', 'ready_s': r, 'weights_s': w}}
               for i, (r, w) in enumerate(((60.0, 2.0), (90.0, 3.0), (70.0, 2.5)))]
    starts.append({'folder': 'failed', 'outcome': 'FAIL', 'figures': {'h_mode': 'warm', 'ready_s': 1.0}})
    text = '\n'.join(proof.h_table(starts))
    assert '| median of 3 | cold | | 130.00 |' in text
    assert '| median of 3 | warm | | 70.00 |' in text
    assert 'warm/cold ready_s: 0.54 (target at most 0.6): met' in text
    assert 'warm/cold weights_s: 0.21 (target at most 0.3): met' in text
