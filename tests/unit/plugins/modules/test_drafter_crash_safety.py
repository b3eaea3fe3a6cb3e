# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fault injection: a fix killed with SIGKILL at any point leaves every file either as it
was or fully fixed, and a rerun converges.

A forked child runs the fix with ``_safetensors.durable_step`` monkeypatched to SIGKILL
the child after its N-th write/fsync/rename/unlink step, for every N, and again with
SIGKILL sent from outside after random delays.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import select
import time

import numpy as np
import pytest
from safetensors.numpy import load_file

from ansible_collections.llmops.serving.plugins.module_utils import _safetensors
from ansible_collections.llmops.serving.plugins.modules import drafter_checkpoint
from ansible_collections.llmops.serving.tests.unit._drafter_factory import (
    drafter_config, drafter_tensors, write_drafter)

PARAMS = dict(engine='sglang', engine_version=None, layout='auto', rename=[], fix_architecture=True,
              fix=True, backup=False, modify_shared_blobs=False)


def _in_place(root):
    """Two shards with layers.0 names, an index and the wrong architecture."""
    d = os.path.join(root, 'drafter')
    write_drafter(d, shards=2, architectures=['LlamaForCausalLM'])
    return d, {}


def _rewrite(root, scale=1):
    """A rename that makes the header grow (streamed rewrite), with backups."""
    d = os.path.join(root, 'drafter')
    config = drafter_config(hidden=32 * scale, intermediate=64 * scale, vocab=96 * scale, draft_vocab=48 * scale)
    tensors = {n.replace('layers.0.', 'L0.'): a for n, a in drafter_tensors(config).items()}
    write_drafter(d, config=config, tensors=tensors)
    return d, {'rename': [{'from': 'L0.', 'to': 'midlayer.'}], 'backup': True}


def _hf_cache(root):
    """A snapshot whose files link into blobs/: the link becomes a private copy."""
    src, snap = os.path.join(root, 'src'), os.path.join(root, 'snapshots', 'r1')
    blobs = os.path.join(root, 'blobs')
    write_drafter(src, architectures=['LlamaForCausalLM'])
    os.makedirs(snap)
    os.makedirs(blobs)
    for name in os.listdir(src):
        os.rename(os.path.join(src, name), os.path.join(blobs, 'b-' + name))
        os.symlink(os.path.join('..', '..', 'blobs', 'b-' + name), os.path.join(snap, name))
    return snap, {}


SCENARIOS = {'in_place': _in_place, 'rewrite': _rewrite, 'hf_cache': _hf_cache,
             'rewrite_5mb': functools.partial(_rewrite, scale=12)}


def state(directory):
    """Everything a loader sees: tensors (name -> array) per file, config, index."""
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith('.') or not os.path.isfile(path):
            continue
        if name.endswith('.safetensors'):
            out[name] = {k: v.tobytes() + str(v.dtype).encode() for k, v in load_file(path).items()}
        elif name.endswith('.json'):
            with open(path) as f:
                out[name] = json.load(f)
    return out


def expected_states(tmp_path, scenario):
    """(original state, fixed state) of a pristine copy of ``scenario``, fixed in-process."""
    base = str(tmp_path / 'pristine')
    directory, extra = SCENARIOS[scenario](base)
    original = state(directory)
    fixed_copy = str(tmp_path / 'fixed')
    shutil.copytree(base, fixed_copy, symlinks=True)
    fixed_dir = os.path.join(fixed_copy, os.path.relpath(directory, base))
    result = drafter_checkpoint.Drafter(dict(PARAMS, path=fixed_dir, **extra)).run()
    assert result['changed'] and not result['problems']
    fixed = state(fixed_dir)
    assert fixed != original
    return base, os.path.relpath(directory, base), extra, original, fixed


class KillAfter:
    """A ``durable_step`` hook that counts the steps and SIGKILLs the process at ``limit``."""

    def __init__(self, limit):
        self.limit = limit
        self.done = 0

    def __call__(self):
        self.done += 1
        if self.limit is not None and self.done >= self.limit:
            os.kill(os.getpid(), signal.SIGKILL)


def run_child(directory, extra, fault_step=None, kill_after=None):
    """Fork a child that runs the fix; return (exit status or -signal, durable steps done).

    ``fault_step``: the child SIGKILLs itself after that step. ``kill_after``: the parent
    sends SIGKILL when the child is still running after that many seconds.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 3
        try:
            os.close(read_end)
            steps = KillAfter(fault_step)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(_safetensors, 'durable_step', steps)
                drafter_checkpoint.Drafter(dict(PARAMS, path=directory, **extra)).run()
            os.write(write_end, str(steps.done).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    if kill_after is not None:
        pidfd = os.pidfd_open(pid)
        try:
            if not select.select([pidfd], [], [], kill_after)[0]:
                os.kill(pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
    status = os.waitpid(pid, 0)[1]
    with os.fdopen(read_end, 'rb') as f:
        steps = f.read().decode()
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, int(steps) if steps else None


def check_then_converge(directory, extra, original, fixed, blobs=None):
    seen = state(directory)
    for name, content in seen.items():
        assert content in (original[name], fixed[name]), '%s is neither original nor fixed' % name
    result = drafter_checkpoint.Drafter(dict(PARAMS, path=directory, **extra)).run()
    assert not result['problems']
    assert state(directory) == fixed
    assert not _safetensors.pending_recovery(directory)
    assert not drafter_checkpoint.Drafter(dict(PARAMS, path=directory, **extra)).run()['changed']
    return seen == original


@pytest.mark.parametrize('scenario', ['in_place', 'rewrite', 'hf_cache'])
def test_sigkill_after_every_step(tmp_path, scenario):
    base, rel, extra, original, fixed = expected_states(tmp_path, scenario)
    work = str(tmp_path / 'work')
    shutil.copytree(base, work, symlinks=True)
    rc, steps = run_child(os.path.join(work, rel), extra, fault_step=10 ** 6)
    assert rc == 0 and steps >= 4
    blobs = os.path.join(base, 'blobs')
    shared = state(blobs) if os.path.isdir(blobs) else None
    outcomes = []
    for step in range(1, steps + 1):
        shutil.rmtree(work)
        shutil.copytree(base, work, symlinks=True)
        directory = os.path.join(work, rel)
        rc, done = run_child(directory, extra, fault_step=step)
        assert rc == -signal.SIGKILL and done is None, (step, rc)
        outcomes.append(check_then_converge(directory, extra, original, fixed))
        if shared is not None:
            assert state(os.path.join(work, 'blobs')) == shared
    # Early kills leave the originals, late ones the fixed files.
    assert outcomes[0] and not outcomes[-1]


@pytest.mark.parametrize('scenario', ['in_place', 'rewrite_5mb'])
def test_sigkill_at_random_moments(tmp_path, scenario):
    rng = random.Random(4)
    base, rel, extra, original, fixed = expected_states(tmp_path, scenario)
    work = str(tmp_path / 'work')
    shutil.copytree(base, work, symlinks=True)
    started = time.monotonic()
    assert run_child(os.path.join(work, rel), extra)[0] == 0
    duration = time.monotonic() - started  # of an uninterrupted fix, fork included
    killed = 0
    trials = 8
    for trial in range(trials):  # one random moment in each eighth of the fix's duration
        shutil.rmtree(work)
        shutil.copytree(base, work, symlinks=True)
        directory = os.path.join(work, rel)
        delay = duration * (trial + rng.random()) / trials
        rc = run_child(directory, extra, kill_after=delay)[0]
        killed += rc == -signal.SIGKILL
        check_then_converge(directory, extra, original, fixed)
    assert killed >= 1  # the early moments fall inside the fix


def test_data_is_intact_after_interrupted_runs(tmp_path):
    base, rel, extra, original, fixed = expected_states(tmp_path, 'in_place')
    arrays = load_file(os.path.join(base, rel, 'model-00001-of-00002.safetensors'))
    work = str(tmp_path / 'work')
    shutil.copytree(base, work, symlinks=True)
    directory = os.path.join(work, rel)
    for step in (3, 5, 7):  # three interrupted runs in a row, then a clean one
        assert run_child(directory, extra, fault_step=step)[0] == -signal.SIGKILL
    check_then_converge(directory, extra, original, fixed)
    after = load_file(os.path.join(directory, 'model-00001-of-00002.safetensors'))
    for name, array in arrays.items():
        np.testing.assert_array_equal(after[name.replace('layers.0.', 'midlayer.')], array)


def test_check_mode_reports_a_pending_recovery_and_changes_nothing(tmp_path):
    base, rel, extra, original, fixed = expected_states(tmp_path, 'in_place')
    directory = os.path.join(base, rel)
    # Step 4 is the journal's directory fsync: the journal is in place, the header untouched.
    assert run_child(directory, extra, fault_step=4)[0] == -signal.SIGKILL
    assert _safetensors.pending_recovery(directory)
    listing = sorted(os.listdir(directory))
    result = drafter_checkpoint.Drafter(dict(PARAMS, path=directory, **extra), check_mode=True).run()
    assert result['changed'] and 'an interrupted fix would be recovered' in result['recovered'][0]
    assert sorted(os.listdir(directory)) == listing and state(directory) == original
    check_then_converge(directory, extra, original, fixed)


def run_at_once(directory, extra, count):
    """Fork ``count`` children that start the fix together (they wait on one pipe that
    the parent fills at once); return what each reports (its result or its error)."""
    gate_read, gate_write = os.pipe()
    children = []
    for dummy in range(count):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(read_end)
                os.close(gate_write)
                os.read(gate_read, 1)
                try:
                    result = drafter_checkpoint.Drafter(dict(PARAMS, path=directory, **extra)).run()
                    report = {key: result[key] for key in ('changed', 'files', 'recovered', 'problems')}
                except Exception as exc:  # reported to the parent, which fails the test
                    report = {'error': '%s: %s' % (type(exc).__name__, exc)}
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        children.append((pid, read_end))
    os.close(gate_read)
    os.write(gate_write, b'x' * count)
    os.close(gate_write)
    reports = []
    for pid, read_end in children:
        with os.fdopen(read_end, 'rb') as f:
            reports.append(json.loads(f.read() or b'{"error": "no report"}'))
        os.waitpid(pid, 0)
    return reports


@pytest.mark.parametrize('scenario', ['in_place', 'rewrite_5mb', 'hf_cache'])
def test_four_runs_at_once_on_one_directory(tmp_path, scenario):
    """Hosts sharing a model store: one run fixes, the others wait for its lock and find
    the files fixed (unchanged); no run removes another's journal or temporary file."""
    base, rel, extra, original, fixed = expected_states(tmp_path, scenario)
    work = str(tmp_path / 'work')
    for dummy in range(5):
        if os.path.exists(work):
            shutil.rmtree(work)
        shutil.copytree(base, work, symlinks=True)
        directory = os.path.join(work, rel)
        reports = run_at_once(directory, extra, 4)
        assert not [r for r in reports if 'error' in r or r['problems']], reports
        winners = [r for r in reports if r['changed']]
        assert len(winners) == 1, reports
        for loser in reports:
            if loser is not winners[0]:
                assert loser['recovered'] == [] and {f['method'] for f in loser['files']} == {'unchanged'}
        assert state(directory) == fixed
        assert not _safetensors.pending_recovery(directory)
