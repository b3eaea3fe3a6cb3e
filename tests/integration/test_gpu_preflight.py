"""Role gpu_preflight (module gpu_memory) on the test fleet, against the nvidia-smi stand-in.

Stand-in "trainers" (``tests/sim/nvsim.py hold``) are real processes on the namespace host,
started over SSH; they hold simulated memory until they exit. The module only knows the
path of the stand-in (``gpu_preflight_nvidia_smi_path``) and its environment.
"""

from __future__ import annotations

import json
import os
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(ROOT, 'tests', 'sim')
STATE = '/run/llmops-nvsim'
NVSIM = 'NVSIM_STATE_DIR=%s /usr/bin/python3 %s/nvsim.py' % (STATE, SIM)
HOST = 'ns1'
VARS = {
    'gpu_preflight_nvidia_smi_path': SIM + '/nvidia-smi',
    'gpu_preflight_environment': {'NVSIM_STATE_DIR': STATE, 'NVSIM_PYTHON': '/usr/bin/python3'},
    'gpu_preflight_reclaim': [r'nvsim\.py hold .*--name trainer'],
    'gpu_preflight_grace_period': 1,
    'gpu_preflight_wait_timeout': 5,
    'gpu_preflight_poll_interval': 0.2,
}


def holders(fleet, host=HOST):
    """{pid: {gpu index: MiB}} of the live stand-in holders on ``host``."""
    status = json.loads(fleet.ssh(host, NVSIM + ' status').stdout)
    return dict((h['pid'], dict((int(g), m) for g, m in h['mib'].items())) for h in status['holders'])


def hold(fleet, gpus, mib, name, ignore_term=False, host=HOST):
    """Start a stand-in trainer on ``host`` and return its PID once nvidia-smi lists it."""
    command = ('export NVSIM_STATE_DIR=%s; nohup /usr/bin/python3 %s/nvsim.py hold --gpus %s --mib %d --name %s%s'
               ' </dev/null >>/run/holders.log 2>&1 & echo $!'
               % (STATE, SIM, gpus, mib, name, ' --ignore-term' if ignore_term else ''))
    pid = int(fleet.ssh(host, command).stdout)
    deadline = time.monotonic() + 15
    while pid not in holders(fleet, host):
        assert time.monotonic() < deadline, 'stand-in trainer %d did not register' % pid
        time.sleep(0.1)
    return pid


@pytest.fixture
def gpus8(clean_fleet):
    clean_fleet.ssh(HOST, NVSIM + ' init --count 8')
    return clean_fleet


def preflight(run_playbook, check=False, **extra):
    return run_playbook('gpu_preflight.yml', limit=HOST, check=check, extra_vars=dict(VARS, **extra))


def test_reclaims_only_matching_processes(gpus8, run_playbook):
    fleet = gpus8
    trainer = hold(fleet, '0,1', 40000, 'trainer')
    stubborn = hold(fleet, '2', 30000, 'trainer', ignore_term=True)
    other = hold(fleet, '3', 40000, 'other-job')

    # Check mode: reports, stops nothing; the non-matching holder fails the host.
    checked = preflight(run_playbook, check=True)
    assert checked.rc != 0 and checked.recap[HOST]['failed'] == 1
    assert 'would stop pid %d' % trainer in checked.stdout and 'would stop pid %d' % stubborn in checked.stdout
    assert set(holders(fleet)) == {trainer, stubborn, other}

    # Real run: both trainers stopped (TERM honoured; TERM ignored -> KILL), the other left alone.
    start = time.monotonic()
    real = preflight(run_playbook)
    assert real.rc != 0 and real.recap[HOST]['failed'] == 1 and real.recap[HOST]['changed'] == 1
    assert 'stopped pid %d (TERM, exited)' % trainer in real.stdout
    assert 'stopped pid %d (TERM+KILL, exited)' % stubborn in real.stdout
    assert set(holders(fleet)) == {other}
    for words in ('GPU 3 held by pid %d (user ' % other, ', 40000 MiB): ', '--name other-job',
                  'not matched by any reclaim pattern; used 40009 MiB > max_used_mib 1024'):
        assert words in real.stdout, words
    assert time.monotonic() - start < 60

    # The memory of the stopped trainers is free again: only GPU 3 is busy.
    fleet.ssh(HOST, 'kill %d' % other)
    deadline = time.monotonic() + 10
    while holders(fleet):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    free = preflight(run_playbook)
    assert free.rc == 0 and free.recap[HOST]['changed'] == 0 and free.recap[HOST]['failed'] == 0
    assert free.stdout.count('  ok       -') == 8


def test_reclaim_is_idempotent(gpus8, run_playbook):
    fleet = gpus8
    trainer = hold(fleet, '0,1,2,3,4,5,6,7', 20000, 'trainer')
    first = preflight(run_playbook)
    assert first.rc == 0 and first.recap[HOST]['changed'] == 1, first.stdout[-3000:]
    assert 'stopped pid %d (TERM, exited)' % trainer in first.stdout and holders(fleet) == {}
    second = preflight(run_playbook)
    assert second.rc == 0 and second.recap[HOST]['changed'] == 0 and 'stopped pid' not in second.stdout


def test_wrong_gpu_count_fails_readably(gpus8, run_playbook):
    gpus8.ssh(HOST, NVSIM + ' init --count 4')
    result = preflight(run_playbook)
    assert result.rc != 0 and result.recap[HOST]['failed'] == 1
    assert 'expected 8 GPUs, nvidia-smi lists 4 (indices 0, 1, 2, 3)' in result.stdout
