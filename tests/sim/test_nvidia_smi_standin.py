# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia-smi stand-in against the genuine 1-GPU H200 recordings, N GPUs, holders and faults."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys

import nvsim
import pytest

from sim_helpers import NVIDIA_SMI, NVSIM, SMI_FIXTURES, wait_for

QUERY_GPU = '--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,pci.bus_id,driver_version'
QUERY_APPS = '--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id'
# What each recorded table had besides memory (time, temperature, power).
TABLE_LOOK = {
    'idle': {'fixed_time': 'Wed Dec  2 08:41:00 2026', 'temp_c': 42, 'power_w': 126},
    'busy': {'fixed_time': 'Wed Dec  2 08:41:08 2026', 'temp_c': 41, 'power_w': 121},
    'after-release': {'fixed_time': 'Wed Dec  2 08:41:09 2026', 'temp_c': 41, 'power_w': 127},
}
RECORDED_PID = 444


def smi(*args, exe=False):
    """Run the stand-in: the real executable (``exe``) or, faster, its function in this process."""
    if exe:
        return subprocess.run([NVIDIA_SMI] + list(args), capture_output=True, text=True, check=False)
    out, err = io.StringIO(), io.StringIO()
    rc = nvsim.smi_main(list(args), out, err)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def recorded(name, pid=None):
    with open(os.path.join(SMI_FIXTURES, name), encoding='utf-8') as f:
        text = f.read()
    if pid is not None:  # the recording's PID 444 becomes the stand-in trainer's PID, same column
        text = text.replace('%16d' % RECORDED_PID, '%16d' % pid).replace('%d, ' % RECORDED_PID, '%d, ' % pid)
    return text


@pytest.fixture
def one_gpu(nvstate):
    nvstate.init('--count', '1')
    return nvstate


@pytest.fixture
def trainer(procs, nvstate):
    """start(gpus, mib, *extra) -> the stand-in trainer process, once its holder file exists."""
    def start(gpus='0', mib=41570, *extra):
        proc = procs([sys.executable, NVSIM, 'hold', '--gpus', gpus, '--mib', str(mib)] + list(extra))
        wait_for(lambda: os.path.exists(os.path.join(nvstate.path, 'holders', '%d.json' % proc.pid)), what='holder file')
        return proc
    return start


@pytest.mark.parametrize('state', ['idle', 'busy', 'after-release'])
def test_table_byte_for_byte(one_gpu, trainer, state):
    one_gpu.update(**TABLE_LOOK[state])
    pid = None
    if state != 'idle':
        proc = trainer()
        pid = proc.pid
    if state == 'after-release':
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    result = smi(exe=True)
    assert (result.returncode, result.stderr) == (0, '')
    assert result.stdout == recorded('%s-table.txt' % state, pid)


@pytest.mark.parametrize('state', ['idle', 'busy'])
def test_query_forms_byte_for_byte(one_gpu, trainer, state):
    pid = trainer().pid if state == 'busy' else None
    gpu = smi(QUERY_GPU, '--format=csv,noheader,nounits', exe=True)
    assert gpu.returncode == 0
    assert gpu.stdout == recorded('%s-query-gpu-noheader-nounits.csv' % state)
    if state == 'idle':
        assert smi(QUERY_GPU, '--format=csv').stdout == recorded('idle-query-gpu.csv')
        apps = smi(QUERY_APPS, '--format=csv,noheader,nounits')
        assert (apps.returncode, apps.stdout) == (0, recorded('idle-query-compute-apps.csv'))
    else:
        assert smi(QUERY_APPS, '--format=csv').stdout == recorded('busy-query-compute-apps.csv', pid)
        assert smi(QUERY_APPS, '--format=csv,noheader,nounits').stdout == recorded('busy-query-compute-apps-noheader-nounits.csv', pid)


def test_list_gpus(one_gpu):
    assert smi('-L').stdout == recorded('nvidia-smi-L.txt')


def test_eight_gpus_and_holders(nvstate, trainer):
    t1 = trainer('0,1', 40000)
    t2 = trainer('7', 1000, '--name', 'trainer')
    lines = smi('--query-gpu=index,uuid,name,memory.total,memory.used,memory.free', '--format=csv,noheader,nounits').stdout.splitlines()
    rows = [line.split(', ') for line in lines]
    assert [r[0] for r in rows] == [str(i) for i in range(8)]
    assert rows[0][1] == 'GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640'
    assert len(set(r[1] for r in rows)) == 8
    assert [int(r[4]) for r in rows] == [40009, 40009, 0, 0, 0, 0, 0, 1009]
    assert all(int(r[4]) + int(r[5]) in (143156, 143157) for r in rows)
    apps = smi('--query-compute-apps=pid,process_name,used_memory,gpu_uuid', '--format=csv,noheader,nounits').stdout.splitlines()
    assert apps == ['%d, python3, 40000, %s' % (t1.pid, rows[0][1]), '%d, python3, 40000, %s' % (t1.pid, rows[1][1]),
                    '%d, trainer, 1000, %s' % (t2.pid, rows[7][1])]
    table = smi().stdout
    assert table.count('NVIDIA H200   ') == 8 and table.count(' trainer ') == 1


def test_dead_and_reused_pids_no_longer_count(nvstate, trainer):
    proc = trainer('0', 5000)
    proc.kill()
    proc.wait()
    assert os.path.exists(os.path.join(nvstate.path, 'holders', '%d.json' % proc.pid))  # left behind by SIGKILL
    # A holder file naming a live PID with another start time: the PID was reused.
    with open(os.path.join(nvstate.path, 'holders', '%d.json' % os.getpid()), 'w', encoding='utf-8') as f:
        json.dump({'pid': os.getpid(), 'starttime': 1, 'name': 'old', 'mib': {'1': 7000}}, f)
    assert smi(QUERY_APPS, '--format=csv,noheader,nounits').stdout == ''
    assert smi('--query-gpu=memory.used', '--format=csv,noheader,nounits').stdout == '0\n' * 8


def test_ignore_term_and_no_data_name(nvstate, trainer):
    proc = trainer('2', 3000, '--ignore-term', '--name', '[No data]')
    proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.3)
    assert smi(QUERY_APPS, '--format=csv,noheader,nounits').stdout.startswith('%d, [No data], 3000, ' % proc.pid)
    proc.kill()
    proc.wait()
    assert smi(QUERY_APPS, '--format=csv,noheader,nounits').stdout == ''


@pytest.mark.parametrize('fault, rc, stdout, stderr', [
    ('missing', 127, '', 'nvidia-smi: command not found\n'),
    ('no_devices', 6, 'No devices were found\n', ''),
    ('nvml_error', 18, 'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n', ''),
])
def test_faults(nvstate, fault, rc, stdout, stderr):
    nvstate.init('--count', '8', '--fault', fault)
    for args in ([], ['-L'], [QUERY_GPU, '--format=csv']):
        result = smi(*args, exe=not args)
        assert (result.returncode, result.stdout, result.stderr) == (rc, stdout, stderr)


def test_no_state_file_means_no_devices(nvstate):
    os.unlink(os.path.join(nvstate.path, 'gpus.json'))
    result = smi('-L')
    assert (result.returncode, result.stdout) == (6, 'No devices were found\n')


def test_bad_field_and_bad_arguments(nvstate):
    result = smi('--query-gpu=index,bogus', '--format=csv')
    assert (result.returncode, result.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')
    assert smi('--frobnicate').returncode == 2
