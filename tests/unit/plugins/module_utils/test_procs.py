"""Process identity and signalling of plugins/module_utils/_procs.py, with real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _procs as procs
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils._health_helpers import systemctl_show, wait_for

HOLDER = ('import signal, sys, time\n'
          'if sys.argv[1] == "ignore": signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
          'print("ready", flush=True)\n'
          'time.sleep(120)\n')


@pytest.fixture
def spawn():
    children = []

    def start(mode='honour', tag='llmops-test-holder'):
        child = subprocess.Popen([sys.executable, '-c', HOLDER, mode, tag], stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout.readline() == b'ready\n'  # signal disposition is set from here on
        return child
    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()


def write_fake_proc(root, pid, comm, state='S', starttime=123456, cmdline=b'python3\x00train.py\x00--lr\x001\x00'):
    base = root / str(pid)
    base.mkdir()
    fields = [state] + ['0'] * 18 + [str(starttime)] + ['0'] * 30
    (base / 'stat').write_text('%d (%s) %s\n' % (pid, comm, ' '.join(fields)))
    (base / 'cmdline').write_bytes(cmdline)


def test_read_own_process():
    me = procs.read_process(os.getpid())
    assert me.pid == os.getpid() and me.state in ('R', 'S')
    assert 'python' in me.command  # pytest's own process, or an xdist worker's
    assert me.uid == os.getuid() and me.user and me.starttime > 0
    again = procs.read_process(os.getpid())
    assert me.same_process(again)


@pytest.mark.parametrize('comm', ['python3', 'sglang::sched (x) y', ') (', 'a b c'])
def test_read_fake_proc_with_odd_comm(tmp_path, comm):
    write_fake_proc(tmp_path, 4242, comm)
    info = procs.read_process(4242, str(tmp_path))
    assert info.starttime == 123456 and info.state == 'S'
    assert info.cmdline == ('python3', 'train.py', '--lr', '1')
    assert info.command == 'python3 train.py --lr 1'


def test_invisible_and_zombie(tmp_path):
    assert procs.read_process(999999, str(tmp_path)) is None
    write_fake_proc(tmp_path, 77, 'python3', state='Z', cmdline=b'')
    zombie = procs.read_process(77, str(tmp_path))
    assert zombie.exited and zombie.cmdline == ()


@pytest.mark.parametrize('command, patterns, expected', [
    ('python3 train.py --lr 1', [r'train\.py'], r'train\.py'),
    ('python3 train.py --lr 1', [r'^train'], None),
    ('sglang::scheduler_TP0', [r'serve', r'^sglang::'], r'^sglang::'),
    ('python3 -m sglang.launch_server --port 30000', [], None),
])
def test_matching_pattern(command, patterns, expected):
    assert procs.matching_pattern(command, procs.compile_patterns(patterns)) == expected


def test_invalid_pattern_is_named():
    with pytest.raises(ValueError, match=r"'train\(' is not a valid regular expression"):
        procs.compile_patterns(['ok', 'train('])


def test_reused_pid_is_not_signalled(spawn):
    child = spawn()
    info = procs.read_process(child.pid)
    stale = procs.ProcessInfo(info.pid, info.starttime - 1, info.cmdline, info.state, info.uid, info.user)
    assert procs.send_if_same(stale, signal.SIGTERM) == 'reused'
    other_cmdline = procs.ProcessInfo(info.pid, info.starttime, ('bash',), info.state, info.uid, info.user)
    assert procs.send_if_same(other_cmdline, signal.SIGTERM) == 'reused'
    assert child.poll() is None and procs.is_running(info)


def test_stop_honours_term(spawn):
    child = spawn('honour')
    info = procs.read_process(child.pid)
    start = time.monotonic()
    result = procs.stop_processes([info], 'TERM', grace_period=20, kill_timeout=5, poll_interval=0.02)
    assert result == [{'pid': child.pid, 'signals': ['TERM'], 'exited': True, 'outcome': 'exited'}]
    assert time.monotonic() - start < 10
    assert child.wait(5) == -signal.SIGTERM


def test_stop_kills_after_grace_when_term_ignored(spawn):
    ignoring, honouring = spawn('ignore'), spawn('honour')
    targets = [procs.read_process(ignoring.pid), procs.read_process(honouring.pid)]
    start = time.monotonic()
    result = procs.stop_processes(targets, 'TERM', grace_period=0.5, kill_timeout=5, poll_interval=0.02)
    elapsed = time.monotonic() - start
    assert result[0] == {'pid': ignoring.pid, 'signals': ['TERM', 'KILL'], 'exited': True, 'outcome': 'exited'}
    assert result[1]['signals'] == ['TERM'] and result[1]['exited']
    assert 0.5 <= elapsed < 5
    assert ignoring.wait(5) == -signal.SIGKILL


def test_gone_before_signal(spawn):
    child = spawn()
    info = procs.read_process(child.pid)
    child.kill()
    child.wait()
    assert procs.stop_processes([info], grace_period=1, kill_timeout=1) == [
        {'pid': info.pid, 'signals': [], 'exited': True, 'outcome': 'gone before signal'}]


@pytest.mark.parametrize('status, signals, outcome', [
    ('sent', ['TERM', 'KILL'], 'survived KILL'),
    ('denied', [], 'permission denied'),
    ('reused', [], 'pid reused'),
])
def test_outcomes_when_process_stays(spawn, status, signals, outcome):
    child = spawn()
    info = procs.read_process(child.pid)
    sent = []

    def fake_send(target, signum, proc):
        sent.append(signum)
        return status
    result = procs.stop_processes([info], grace_period=0.1, kill_timeout=0.1, poll_interval=0.02, send=fake_send)
    assert result == [{'pid': child.pid, 'signals': signals, 'exited': False, 'outcome': outcome}]
    assert child.poll() is None  # the fake sender sent nothing for real
    assert sent == [signal.SIGTERM, signal.SIGKILL][:max(len(signals), 1)]


# ------------------------------------------------------------------ process watch


@pytest.mark.parametrize('code, exit_code', [
    ('raise SystemExit(3)', 3),
    ('import os, signal; os.kill(os.getpid(), signal.SIGKILL)', -9),
])
def test_process_watch_reports_the_exit_code_of_a_zombie(python_child, code, exit_code):
    child = python_child(code)
    watch = procs.ProcessWatch(pid=child.pid)
    verdict = wait_for(watch.check)
    assert verdict['exit_code'] == exit_code


def test_process_watch_pidfile_appears_late_then_the_process_is_restarted(python_child, tmp_path):
    pidfile = tmp_path / 'server.pid'
    watch = procs.ProcessWatch(pidfile=str(pidfile))
    assert watch.check() is None
    assert watch.notes == ['pidfile %s does not exist (yet)' % pidfile]
    first = python_child('import time; time.sleep(30)')
    pidfile.write_text('%d\n' % first.pid)
    assert watch.check() is None
    resumed = procs.ProcessWatch(pidfile=str(pidfile), state=watch.export())  # next slice
    assert resumed.check() is None
    second = python_child('import time; time.sleep(30)')
    pidfile.write_text('%d\n' % second.pid)
    assert 'restarted' in resumed.check()['detail']


def test_process_watch_notices_pid_reuse(tmp_path):
    proc = tmp_path / 'proc'
    (proc / '4242').mkdir(parents=True)
    (proc / '4242' / 'cmdline').write_bytes(b'python\x00')

    def write_stat(starttime, state='S'):
        fields = [state] + ['0'] * 18 + [str(starttime)] + ['0'] * 30
        (proc / '4242' / 'stat').write_text('4242 (python) %s\n' % ' '.join(fields))
    write_stat(1000)
    watch = procs.ProcessWatch(pid=4242, proc_root=str(proc))
    assert watch.check() is None
    write_stat(2000)
    assert 'belongs to another process' in watch.check()['detail']


def test_process_watch_systemd_unit_gets_the_exit_code_from_systemd(python_child):
    child = python_child('import time; time.sleep(0.5)')
    answers = {'now': systemctl_show(MainPID=str(child.pid))}
    watch = procs.ProcessWatch(unit='sglang.service', run=lambda argv: answers['now'])
    assert watch.check() is None
    child.wait()  # reaped: gone from /proc, so the fast path notices it and asks systemd
    answers['now'] = systemctl_show(ActiveState='failed', SubState='failed', ExecMainCode='1', ExecMainStatus='3',
                                    Result='exit-code')
    verdict = watch.check()
    assert verdict['exit_code'] == 3
    assert verdict['detail'] == 'systemd unit sglang.service is failed (failed, result exit-code)'


@pytest.mark.parametrize('props, exit_code, detail', [
    ({'ActiveState': 'activating', 'SubState': 'auto-restart', 'ExecMainCode': '2', 'ExecMainStatus': '9'}, -9, 'auto-restart'),
    ({'LoadState': 'not-found', 'ActiveState': 'inactive'}, None, 'not found'),
    ({'ActiveState': 'inactive', 'SubState': 'dead'}, None, 'inactive'),
])
def test_process_watch_systemd_unit_states(props, exit_code, detail):
    watch = procs.ProcessWatch(unit='sglang.service', run=lambda argv: systemctl_show(**props))
    verdict = watch.check()
    assert verdict['exit_code'] == exit_code and detail in verdict['detail']


@pytest.mark.parametrize('content, expected', [
    ('{"pid": 4242, "starttime": 1234, "command": ["sglang"]}', (4242, 1234)),  # llmops.serving.server_process
    ('4242\n', (4242, None)),   # most daemons
    ('4242', (4242, None)),
    ('', (None, None)),
    ('not a pid\n', (None, None)),
    ('{"pid": "x", "starttime": 1}', (None, None)),
    ('true', (None, None)),
])
def test_read_pidfile_reads_json_and_plain_pidfiles(tmp_path, content, expected):
    path = tmp_path / 'server.pid'
    path.write_text(content)
    assert procs.read_pidfile(str(path)) == expected


def test_read_pidfile_missing():
    assert procs.read_pidfile('/nonexistent/server.pid') == (None, None)


def test_process_watch_takes_the_start_time_of_a_json_pidfile(python_child, tmp_path):
    """A JSON pidfile whose start time is not the running PID's: that process has gone, the PID was reused."""
    child = python_child('import time; time.sleep(30)')
    info = wait_for(lambda: procs.read_process(child.pid))
    pidfile = tmp_path / 'server.pid'
    pidfile.write_text(json.dumps({'pid': child.pid, 'starttime': info.starttime}))
    assert procs.ProcessWatch(pidfile=str(pidfile)).check() is None
    pidfile.write_text(json.dumps({'pid': child.pid, 'starttime': info.starttime - 1}))
    assert 'belongs to another process' in procs.ProcessWatch(pidfile=str(pidfile)).check()['detail']


def test_one_stat_reader_for_state_session_and_start_time(python_child):
    child = python_child('import time; time.sleep(30)')
    fields = wait_for(lambda: procs.read_stat(child.pid))
    info = procs.read_process(child.pid)
    assert fields[procs.STAT_STATE] == info.state
    assert int(fields[procs.STAT_STARTTIME]) == info.starttime
    assert int(fields[procs.STAT_SESSION]) == os.getsid(child.pid)
