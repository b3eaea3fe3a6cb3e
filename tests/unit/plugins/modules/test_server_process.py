"""Tests of plugins/modules/server_process.py with real processes: detached start with a
pidfile, idempotence, restart, stop of the whole session (orphans included), startup
failure with the log's end, check mode."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.serving.plugins.module_utils import _procs
from ansible_collections.llmops.serving.plugins.module_utils._procs import ProcessWatch
from ansible_collections.llmops.serving.plugins.modules import server_process

TREE = ['/bin/sh', '-c', 'sleep 300 & exec sleep 301']


def run(capsys, check=False, **args):
    if check:
        args['_ansible_check_mode'] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            server_process.main()
    return json.loads(capsys.readouterr().out)


def session(pid):
    return [info.pid for info in _procs.session_members(pid)]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'condition not met within %.0f s' % timeout
        time.sleep(0.02)


@pytest.fixture
def paths(tmp_path):
    yield {'name': 'test', 'pidfile': str(tmp_path / 'run' / 'srv.pid'), 'log_path': str(tmp_path / 'log' / 'srv.log'),
           'stop_timeout': 5, 'kill_timeout': 5, 'startup_check': 0.2}
    # The module's children are ours here: reap them, stop any survivor.
    pid, dummy = server_process.read_pidfile(str(tmp_path / 'run' / 'srv.pid'))
    for member in session(pid) if pid else []:
        os.kill(member, signal.SIGKILL)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def test_start_is_idempotent_and_restart_replaces_the_process(capsys, paths):
    first = run(capsys, command=TREE, **paths)
    assert first['changed'] and first['running']
    wait_for(lambda: len(session(first['pid'])) == 2)
    again = run(capsys, command=TREE, **paths)
    assert not again['changed'] and again['pid'] == first['pid']
    restarted = run(capsys, state='restarted', command=TREE, **paths)
    assert restarted['changed'] and restarted['pid'] != first['pid']
    assert session(first['pid']) == []
    assert os.path.exists(paths['log_path'] + '.1')


def test_stop_reaches_orphans_of_a_killed_launcher(capsys, paths):
    started = run(capsys, command=TREE, **paths)
    wait_for(lambda: len(session(started['pid'])) == 2)
    os.kill(started['pid'], signal.SIGKILL)
    os.waitpid(started['pid'], 0)
    assert run(capsys, state='status', **paths)['running'] is False
    assert len(session(started['pid'])) == 1  # the orphaned child of the session
    stopped = run(capsys, state='stopped', **paths)
    assert stopped['changed'] and [s['outcome'] for s in stopped['stopped']] == ['exited']
    assert session(started['pid']) == [] and not os.path.exists(paths['pidfile'])
    assert not run(capsys, state='stopped', **paths)['changed']


def test_process_ignoring_term_is_killed(capsys, paths):
    started = run(capsys, command=['/bin/sh', '-c', 'trap "" TERM; sleep 300 & wait'], **dict(paths, stop_timeout=0.5))
    wait_for(lambda: len(session(started['pid'])) == 2)
    stopped = run(capsys, state='stopped', **dict(paths, stop_timeout=0.5))
    assert 'KILL' in sum((s['signals'] for s in stopped['stopped']), [])
    assert session(started['pid']) == []


def test_startup_failure_shows_the_log(capsys, paths):
    result = run(capsys, command=['/bin/sh', '-c', 'echo "boom: bad flag" >&2; exit 3'], **dict(paths, startup_check=2))
    assert result['failed'] and 'status 3' in result['msg'] and 'boom: bad flag' in result['msg']
    assert not os.path.exists(paths['pidfile'])


def test_startup_failure_leads_with_the_root_cause_and_folds_long_lines(capsys, paths):
    """SGLang's 8 KB ServerArgs line must not bury the traceback's exception."""
    script = ('import sys; print("server_args=ServerArgs(" + "x=1, " * 2000 + ")"); '
              'print("[2026-12-03 10:00:00] Scheduler hit an exception: Traceback (most recent call last):"); '
              'print("  File \\"m.py\\", line 1, in load"); print("RuntimeError: simulated crash during load"); '
              'sys.exit(1)')
    result = run(capsys, command=[sys.executable, '-c', script], **dict(paths, startup_check=5))
    assert result['failed'] and result['msg'].startswith('root cause: RuntimeError: simulated crash during load\n')
    assert 'more characters folded]' in result['msg'] and len(result['msg']) < 2000


def test_missing_command_fails_readably(capsys, paths):
    result = run(capsys, command=['/nonexistent/python'], **dict(paths, startup_check=2))
    assert result['failed'] and 'status 127' in result['msg'] and '/nonexistent/python' in result['msg']


def test_check_mode_starts_nothing(capsys, paths):
    result = run(capsys, check=True, command=TREE, **paths)
    assert result['changed'] and not os.path.exists(paths['pidfile'])


def test_startup_failure_log_masks_every_form_of_the_api_key(capsys, paths):
    key = "s3'cr\\et"
    script = ('import sys; print("server_args=ServerArgs(api_key=%r, port=1)" % sys.argv[1]); '
              'print("argv --api-key=" + sys.argv[1]); print("Authorization: Bearer " + sys.argv[1]); sys.exit(3)')
    result = run(capsys, command=[sys.executable, '-c', script, key], **dict(paths, startup_check=5))
    assert result['failed'] and 'status 3' in result['msg']
    assert 'api_key="********"' in result['msg'] and '--api-key=********' in result['msg']
    assert 'Bearer ********' in result['msg']
    assert 'cr\\et' not in result['msg'] and 'cr\\\\et' not in result['msg'] and "s3'" not in result['msg']


def test_wait_for_llm_health_reads_the_pidfile_server_process_writes(capsys, paths):
    """Issue 13 item 5: one pidfile format for both modules (it was JSON here, an integer there)."""
    started = run(capsys, command=TREE, **paths)
    watch = ProcessWatch(pidfile=paths['pidfile'])
    assert watch.check() is None and watch.notes == []
    assert watch.describe() == 'process %d (pidfile %s)' % (started['pid'], paths['pidfile'])
    os.kill(started['pid'], signal.SIGKILL)
    os.waitpid(started['pid'], 0)
    verdict = wait_for_verdict(watch)
    assert 'PID %d exited' % started['pid'] in verdict['detail']


def wait_for_verdict(watch, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        verdict = watch.check()
        if verdict is not None:
            return verdict
        assert time.monotonic() < deadline, 'no verdict within %.0f s' % timeout
        time.sleep(0.02)


def test_null_options_take_their_defaults(capsys, paths):
    args = dict(paths, chdir=None, stop_timeout=None, kill_timeout=None)
    started = run(capsys, command=TREE, **args)
    assert started['changed'] and started['running']
    assert run(capsys, **dict(args, state='status'))['pid'] == started['pid']
    assert not run(capsys, **dict(args, state='stopped', stop_timeout=None))['running']
