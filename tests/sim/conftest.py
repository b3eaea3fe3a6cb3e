# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the tests of the test doubles (SGLang simulator, nvidia-smi stand-in)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from sim_helpers import FAST_ENV, NVSIM, SIM_DIR, Sim, free_port


@pytest.fixture
def nvstate(tmp_path, monkeypatch):
    """A private NVSIM_STATE_DIR with 8 idle simulated H200s; returns a helper object."""
    directory = str(tmp_path / 'nvsim')
    monkeypatch.setenv('NVSIM_STATE_DIR', directory)

    class State:
        path = directory

        @staticmethod
        def init(*args):
            subprocess.run([sys.executable, NVSIM, 'init'] + list(args), check=True, stdout=subprocess.DEVNULL)

        @staticmethod
        def update(**values):
            with open(os.path.join(directory, 'gpus.json'), encoding='utf-8') as f:
                data = json.load(f)
            data.update(values)
            with open(os.path.join(directory, 'gpus.json'), 'w', encoding='utf-8') as f:
                json.dump(data, f)

    State.init('--count', '8')
    return State


@pytest.fixture
def procs():
    """Start processes that are always killed (whole process group) at teardown."""
    started = []

    def start(argv, env=None, **kwargs):
        full = dict(os.environ)
        full.pop('COLUMNS', None)
        full['PYTHONPATH'] = SIM_DIR
        full.update(env or {})
        kwargs.setdefault('stdout', subprocess.PIPE)
        kwargs.setdefault('stderr', subprocess.STDOUT)
        proc = subprocess.Popen(argv, env=full, start_new_session=True, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def start_sim(procs, tmp_path, nvstate):
    """start_sim(*flags, env={...}, wait=True) -> Sim, with the fast timing of FAST_ENV."""
    counter = [0]

    def start(*flags, env=None, wait=True, model='/models/target'):
        counter[0] += 1
        port = free_port()
        log_path = str(tmp_path / ('sim%d.log' % counter[0]))
        full = dict(FAST_ENV)
        full.update(env or {})
        argv = [sys.executable, '-m', 'sglang.launch_server', '--model-path', model, '--port', str(port)] + list(flags)
        with open(log_path, 'w', encoding='utf-8') as log:
            proc = procs(argv, env=full, stdout=log, stderr=subprocess.STDOUT)
        sim = Sim(proc, port, log_path)
        return sim.wait_ready() if wait else sim

    return start
