"""Module llmops.serving.gpu_memory, run in-process against a small fake nvidia-smi and real child processes.

The fake prints the CSV format of the genuine recordings (tests/fixtures/nvidia-smi/):
per GPU ``used = sum of live holders`` and ``free = total - 615 - used`` (615 MiB is what
the idle H200 recording reserves); a holder counts while its PID is alive and not a zombie,
or always when it is ``static`` (a PID of another PID namespace).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import gpu_memory

FAKE_SMI = r'''#!%s
import json, os, sys
state = json.load(open(os.environ['FAKE_SMI_STATE']))
if state.get('fault') == 'no_devices':
    print('No devices were found'); sys.exit(6)
if state.get('fault') == 'nvml':
    print('Failed to initialize NVML: Driver/library version mismatch'); sys.exit(18)
def alive(h):
    if h.get('static'):
        return True
    try:
        stat = open('/proc/%%d/stat' %% h['pid']).read()
    except OSError:
        return False
    return stat[stat.rfind(')') + 2] != 'Z'
holders = [h for h in state['holders'] if alive(h)]
uuid = 'GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b6%%02d'
if sys.argv[1].startswith('--query-gpu='):
    for i in range(state['count']):
        used = sum(h['mib'] for h in holders if h['gpu'] == i)
        print('%%d, %%s, NVIDIA H200, 143771, %%d, %%d' %% (i, uuid %% i, used, 143771 - 615 - used))
else:
    for h in holders:
        print('%%d, %%s, %%d, %%s' %% (h['pid'], h.get('name', 'python3'), h['mib'], uuid %% h['gpu']))
''' % sys.executable

HOLDER = ('import signal, sys, time\n'
          'if "--ignore-term" in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
          'print("ready", flush=True)\n'
          'time.sleep(float(sys.argv[1]))\n')


class FakeGpus:
    def __init__(self, tmp_path, monkeypatch, count=8):
        self.path = tmp_path / 'nvidia-smi'
        self.path.write_text(FAKE_SMI)
        self.path.chmod(0o755)
        self.state_file = tmp_path / 'state.json'
        monkeypatch.setenv('FAKE_SMI_STATE', str(self.state_file))
        self.state = {'count': count, 'holders': [], 'fault': None}
        self.children = []
        self.save()

    def save(self):
        self.state_file.write_text(json.dumps(self.state))

    def hold(self, gpu, mib, tag='train.py', seconds=120, ignore_term=False):
        argv = [sys.executable, '-c', HOLDER, str(seconds), tag] + (['--ignore-term'] if ignore_term else [])
        child = subprocess.Popen(argv, stdout=subprocess.PIPE)
        assert child.stdout.readline() == b'ready\n'
        self.children.append(child)
        self.state['holders'].append({'pid': child.pid, 'gpu': gpu, 'mib': mib})
        self.save()
        return child

    def cleanup(self):
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait()
            child.stdout.close()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    gpus = FakeGpus(tmp_path, monkeypatch)
    yield gpus
    gpus.cleanup()


def run_module(capsys, fake, check_mode=False, **args):
    args.setdefault('nvidia_smi_path', str(fake.path))
    args.setdefault('wait_timeout', 0)
    args.setdefault('poll_interval', 0.05)
    if check_mode:
        args['_ansible_check_mode'] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_memory.main()
    return json.loads(capsys.readouterr().out)


def test_idle_gpus_are_ready(capsys, fake):
    result = run_module(capsys, fake, expected_count=8)
    assert result['ready'] and not result['changed'] and not result.get('failed')
    assert [g['free_mib'] for g in result['gpus']] == [143156] * 8
    assert result['processes'] == [] and result['reclaimed'] == [] and result['blocking'] == []
    assert len(result['summary']) == 9 and result['summary'][1].split()[-2:] == ['ok', '-']


@pytest.mark.parametrize('args, error, words', [
    ({'expected_count': 4}, 'count', 'expected 4 GPUs, nvidia-smi lists 8'),
    ({'gpus': ['0', '8']}, 'selection', 'gpus names 8'),
    ({'nvidia_smi_path': '/nonexistent/nvidia-smi'}, 'missing', 'nvidia_smi_path'),
    ({'reclaim': ['train(']}, None, "'train(' is not a valid regular expression"),
])
def test_input_and_host_errors(capsys, fake, args, error, words):
    result = run_module(capsys, fake, **args)
    assert result['failed'] and not result['ready'] and words in result['msg']
    assert result.get('error') == error


@pytest.mark.parametrize('fault, error', [('no_devices', 'no_devices'), ('nvml', 'driver')])
def test_driver_faults(capsys, fake, fault, error):
    fake.state['fault'] = fault
    fake.save()
    result = run_module(capsys, fake)
    assert result['failed'] and result['error'] == error


def test_non_matching_holder_blocks_and_is_left_alone(capsys, fake):
    child = fake.hold(gpu=2, mib=40000, tag='other-job.py')
    result = run_module(capsys, fake, reclaim=['train\\.py'], wait_timeout=0.3)
    assert result['failed'] and not result['changed'] and result['reclaimed'] == []
    assert child.poll() is None
    [blocker] = result['blocking']
    assert blocker['pid'] == child.pid and blocker['gpu'] == 2 and blocker['used_mib'] == 40000
    assert blocker['reason'] == 'not matched by any reclaim pattern' and not blocker['matched']
    assert blocker['visible'] and 'other-job.py' in blocker['cmdline'] and blocker['user']
    msg = result['msg']
    assert msg.index('GPU 2 held by pid %d (user ' % child.pid) < msg.index('other-job.py') < msg.index(
        'used 40000 MiB > max_used_mib 1024')
    assert 'other-job.py' in msg and 'unbalanced' in msg and result['elapsed'] >= 0.3
    assert [line.split()[3] for line in result['summary'][1:]] == ['ok', 'ok', 'BLOCKED'] + ['ok'] * 5


def test_nothing_is_signalled_without_reclaim(capsys, fake):
    child = fake.hold(gpu=0, mib=40000)
    result = run_module(capsys, fake)
    assert result['failed'] and child.poll() is None
    assert result['blocking'][0]['reason'] == 'not matched: reclaim is empty'


@pytest.mark.parametrize('ignore_term, signals, status', [
    (False, ['TERM'], -signal.SIGTERM),
    (True, ['TERM', 'KILL'], -signal.SIGKILL),
])
def test_matching_holder_is_reclaimed_then_idempotent(capsys, fake, ignore_term, signals, status):
    trainer = fake.hold(gpu=1, mib=40000, tag='train.py', ignore_term=ignore_term)
    other = fake.hold(gpu=3, mib=300, tag='monitor.py')  # under max_used_mib: not blocking
    result = run_module(capsys, fake, reclaim=['train\\.py'], grace_period=0.5, wait_timeout=5)
    assert result['ready'] and result['changed'], result.get('msg')
    [reclaimed] = result['reclaimed']
    assert reclaimed['pid'] == trainer.pid and reclaimed['signals'] == signals and reclaimed['exited']
    assert reclaimed['gpus'] == [1] and reclaimed['used_mib'] == 40000 and 'train.py' in reclaimed['cmdline']
    assert trainer.wait(5) == status and other.poll() is None
    assert result['gpus'][1]['used_mib'] == 0
    again = run_module(capsys, fake, reclaim=['train\\.py'], grace_period=0.5, wait_timeout=5)
    assert again['ready'] and not again['changed'] and again['reclaimed'] == []


def test_check_mode_reports_and_signals_nothing(capsys, fake):
    trainer = fake.hold(gpu=0, mib=40000, tag='train.py')
    other = fake.hold(gpu=1, mib=40000, tag='other-job.py')
    result = run_module(capsys, fake, check_mode=True, reclaim=['train\\.py'], gpus=['0'])
    assert result['ready'] and result['changed'] and result['reclaimed'] == []
    assert [w['pid'] for w in result['would_reclaim']] == [trainer.pid]
    assert trainer.poll() is None and other.poll() is None
    both = run_module(capsys, fake, check_mode=True, reclaim=['train\\.py'])
    assert both['failed'] and both['changed'] and [b['pid'] for b in both['blocking']] == [other.pid]
    assert trainer.poll() is None and other.poll() is None


def test_invisible_process_is_reported_not_signalled(capsys, fake):
    fake.state['holders'].append({'pid': 4194000, 'gpu': 5, 'mib': 20000, 'name': '[No data]', 'static': True})
    fake.save()
    result = run_module(capsys, fake, reclaim=['.*'], wait_timeout=0.2)
    assert result['failed'] and not result['changed'] and result['reclaimed'] == []
    [blocker] = result['blocking']
    assert blocker['pid'] == 4194000 and not blocker['visible'] and blocker['name'] is None
    assert blocker['reason'].startswith('not visible in this PID namespace')
    assert 'GPU 5' in result['msg'] and '[No data]' in result['msg']


def test_transient_holder_is_waited_for(capsys, fake):
    orphan = fake.hold(gpu=4, mib=45242, tag='sglang-orphan', seconds=1.0)
    start = time.monotonic()
    result = run_module(capsys, fake, wait_timeout=20)
    assert result['ready'] and not result['changed'] and result['reclaimed'] == []
    assert orphan.wait(5) == 0 and 0.5 <= time.monotonic() - start < 15


def test_balance_and_min_free(capsys, fake):
    fake.state['holders'].append({'pid': 4194001, 'gpu': 6, 'mib': 20000, 'static': True})
    fake.save()
    unbalanced = run_module(capsys, fake, max_used_mib=-1)
    assert unbalanced['failed'] and 'unbalanced' in unbalanced['msg'] and 'GPU 6' in unbalanced['msg']
    lenient = run_module(capsys, fake, max_used_mib=-1, balance=0.8)
    assert lenient['ready']
    strict = run_module(capsys, fake, max_used_mib=-1, balance=0, min_free_mib=130000, gpus=['6', '7'])
    assert strict['failed'] and [g['problems'] != [] for g in strict['gpus'][6:]] == [True, False]
    assert [g['selected'] for g in strict['gpus']] == [False] * 6 + [True, True]


def test_fake_matches_recording(fake):
    """The fake prints an idle GPU exactly like the genuine H200 recording does."""
    recorded = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'nvidia-smi', 'h200-1gpu',
                            'idle-query-gpu-noheader-nounits.csv')
    with open(recorded) as f:
        expected = f.read().strip().split(', ')[:6]
    out = subprocess.run([str(fake.path), gpu_memory.smi.gpu_query_argv('x')[1]], stdout=subprocess.PIPE, check=True)
    first = out.stdout.decode().splitlines()[0].split(', ')
    assert first[0] == expected[0] and first[2:] == expected[2:]


def test_respawning_process_is_not_chased_forever(tmp_path):
    """A supervisor restarts the matching process under a new PID after every stop."""
    uuid = 'GPU-16b0d5eb-b6eb-afd8-95b9-178a9196b640'
    next_pid = [2 ** 22 + 1000]  # above Linux's largest pid_max: never a real process

    def runner(argv):
        if argv[1].startswith('--query-gpu='):
            return 0, '0, %s, NVIDIA H200, 143771, 40009, 103147\n' % uuid, ''
        next_pid[0] += 1
        pid = next_pid[0]
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / 'stat').write_text('%d (python3) S %s\n' % (pid, ' '.join(['1'] * 30)))
        (tmp_path / str(pid) / 'cmdline').write_bytes(b'python3\x00train.py\x00')
        return 0, '%d, python3, 40000, %s\n' % (pid, uuid), ''
    params = dict((k, v.get('default')) for k, v in gpu_memory.ARGUMENT_SPEC.items())
    params.update(reclaim=['train\\.py'], wait_timeout=0.3, poll_interval=0.05, grace_period=0.1)
    result = gpu_memory.GpuMemory(params, False, runner=runner, proc=str(tmp_path)).run()
    assert not result['ready'] and len(result['reclaimed']) == gpu_memory.MAX_RECLAIM_ROUNDS
    assert all(r['outcome'] == 'gone before signal' and r['signals'] == [] for r in result['reclaimed'])
    assert 'reappeared after 3 reclaim rounds' in result['blocking'][0]['reason']
