# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""/weights_checker of the simulated SGLang (TEST DOUBLE, sglang/_weights.py): routed where the release routes it,
the shape of SGLang 0.5.15.post1's answer, per-rank checksums from the bytes of the weights loaded, admin-optional."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sim_helpers import SIM_DIR

from sglang import _weights

MAKE = os.path.join(SIM_DIR, 'make_tiny_checkpoint.py')
TENSOR = 'model.layers.0.mlp.up_proj.weight'


@pytest.fixture
def checkpoints(tmp_path):
    """(good target, copy of it with one tensor changed)."""
    subprocess.run([sys.executable, MAKE, str(tmp_path / 'good')], check=True, stdout=subprocess.DEVNULL)
    good = str(tmp_path / 'good' / 'target')
    bad = str(tmp_path / 'bad')
    shutil.copytree(good, bad)
    subprocess.run([sys.executable, MAKE, os.path.join(bad, 'model.safetensors'), '--alter-tensor', TENSOR], check=True,
                   stdout=subprocess.DEVNULL)
    return good, bad


def files(folder):
    return [os.path.join(folder, 'model.safetensors')]


def test_checksum_answer_shape_and_layout(checkpoints):
    good = checkpoints[0]
    answer = _weights.checksum_answer(files(good), 4)
    assert answer['success'] is True and set(answer) == {'success', 'message', 'ranks', 'per_engine_checksum'}
    assert len(answer['ranks']) == 4 and len(answer['per_engine_checksum']) == 64
    rank = answer['ranks'][2]
    assert rank['parallelism_info'] == {'tp_rank': 2, 'tp_size': 4, 'dp_rank': 0, 'dp_size': 1, 'pp_rank': 0,
                                        'pp_size': 1, 'rank': 2, 'size': 4}
    assert all(len(value) == 16 and int(value, 16) >= 0 for value in rank['checksums'].values())
    assert TENSOR in rank['checksums'] and len(rank['per_gpu_checksum']) == 64
    # the same files give the same checksum; another TP layout another one
    assert _weights.checksum_answer(files(good), 4) == answer
    assert _weights.checksum_answer(files(good), 2)['per_engine_checksum'] != answer['per_engine_checksum']


def test_one_changed_tensor_changes_the_rank_that_holds_it(checkpoints):
    good, bad = checkpoints
    before, after = _weights.checksum_answer(files(good), 2), _weights.checksum_answer(files(bad), 2)
    assert before['per_engine_checksum'] != after['per_engine_checksum']
    # the first byte of a row-sharded tensor is on rank 0: rank 1 is unchanged
    assert before['ranks'][0]['checksums'][TENSOR] != after['ranks'][0]['checksums'][TENSOR]
    assert before['ranks'][1]['per_gpu_checksum'] == after['ranks'][1]['per_gpu_checksum']
    changed = [name for name in before['ranks'][0]['checksums']
               if before['ranks'][0]['checksums'][name] != after['ranks'][0]['checksums'][name]]
    assert changed == [TENSOR]


def test_actions_other_than_checksum_are_refused():
    assert _weights.answer({'action': 'snapshot'}, {'success': True})[0] == 400
    assert _weights.answer({'action': 'nonsense'}, {'success': True}) == (
        400, {'success': False, 'message': 'Unsupported action: nonsense'})
    assert _weights.answer({}, None)[0] == 400
    assert _weights.answer({}, {'success': True}) == (200, {'success': True})


def bearer(key):
    return {'headers': {'Authorization': 'Bearer ' + key}}


def test_route_and_admin_level_on_a_running_sim(start_sim, checkpoints):
    good, bad = checkpoints
    sim = start_sim('--tp-size', '2', '--api-key', 'infer', '--admin-api-key', 'admin', model=good)
    assert sim.post('/weights_checker', {'action': 'checksum'}, **bearer('infer'))[0] == 401
    status, body = sim.post('/weights_checker', {'action': 'checksum'}, **bearer('admin'))
    answer = json.loads(body)
    assert status == 200 and answer == _weights.checksum_answer(files(good), 2)
    assert sim.get('/weights_checker', **bearer('admin'))[0] == 200
    sim.stop()
    # without an admin key the inference key is taken; the changed copy answers another checksum
    sim = start_sim('--tp-size', '2', '--api-key', 'infer', model=bad)
    status, body = sim.post('/weights_checker', {}, **bearer('infer'))
    assert status == 200 and json.loads(body)['per_engine_checksum'] != answer['per_engine_checksum']


def test_routed_by_every_checked_release_from_0_5_11(start_sim, checkpoints):
    """The fixtures (http.routes) route /weights_checker in every checked release, 0.5.11 the oldest: the sim serves
    it from the fixture of the release it plays, the oldest one too."""
    from sglang import _flags
    versions = _flags.releases.versions()
    assert min(versions, key=_flags.version_tuple) == '0.5.11'
    assert all('/weights_checker' in _flags.releases.load(version)['http']['routes'] for version in versions)
    sim = start_sim(model=checkpoints[0], env={'SGLANG_SIM_VERSION': '0.5.11'})
    assert sim.post('/weights_checker', {'action': 'checksum'})[0] == 200
