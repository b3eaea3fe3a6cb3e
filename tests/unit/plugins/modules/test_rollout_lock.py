"""llmops.serving.rollout_lock: one rollout at a time, a dead holder taken over, a live one refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.action import rollout_lock as action
from ansible_collections.llmops.serving.plugins.modules import rollout_lock
from ansible_collections.llmops.serving.plugins.module_utils._rollout_lock import LockFile, decide

from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import record_warnings, run_main

ALICE = {'id': 'laptop:100:5', 'owner': 'alice', 'controller': 'laptop', 'pid': 100, 'playbook': 'deploy.yml'}
BOB = {'id': 'ci:200:7', 'owner': 'bob', 'controller': 'ci', 'pid': 200, 'playbook': 'rollback.yml'}


def lock_args(tmp_path, holder, **extra):
    return dict({'lock_dir': str(tmp_path / 'locks'), 'name': 'prod', 'holder': holder}, **extra)


def test_the_first_run_takes_the_lock_and_a_second_is_refused_naming_the_holder(tmp_path, capsys):
    first, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, ALICE))
    assert first['changed'] and first['holder']['owner'] == 'alice'
    mode = stat.S_IMODE(os.stat(first['lock_file']).st_mode)
    assert mode == 0o600

    again, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, ALICE))
    assert not again['changed'] and again['holder']['id'] == ALICE['id']

    refused, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, BOB))
    assert refused['failed']
    assert refused['msg'].startswith('another rollout holds the lock: alice@laptop (ansible-playbook PID 100, '
                                     'deploy.yml) since ')
    assert 'nothing was stopped or changed' in refused['msg']
    assert refused['holder']['id'] == ALICE['id']


def test_only_the_holder_gives_the_lock_back(tmp_path, capsys):
    run_main(rollout_lock.main, capsys, **lock_args(tmp_path, ALICE))
    other, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, BOB, state='absent'))
    assert not other['changed'] and other['holder']['id'] == ALICE['id']
    mine, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, ALICE, state='absent'))
    assert mine['changed'] and mine['holder'] == {}
    assert not os.path.exists(mine['lock_file'])
    taken, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, BOB))
    assert taken['changed'] and taken['holder']['owner'] == 'bob'


def test_check_mode_refuses_as_a_run_would_and_writes_nothing(tmp_path, capsys):
    planned, dummy = run_main(rollout_lock.main, capsys, _ansible_check_mode=True, **lock_args(tmp_path, ALICE))
    assert planned['changed'] and not os.path.exists(planned['lock_file'])


def test_a_holder_whose_process_is_gone_is_taken_over_with_a_warning(tmp_path, capsys, monkeypatch):
    warnings = record_warnings(monkeypatch)
    run_main(rollout_lock.main, capsys, **lock_args(tmp_path, ALICE))
    taken, dummy = run_main(rollout_lock.main, capsys, **lock_args(tmp_path, BOB, gone_id=ALICE['id']))
    assert taken['changed'] and taken['holder']['owner'] == 'bob'
    assert taken['replaced'].startswith('took over the rollout lock of alice@laptop')
    assert warnings == [taken['replaced']]


@pytest.mark.parametrize('break_lock, verdict', [(False, 'refuse'), (True, 'take')])
def test_an_old_lock_of_another_controller_is_broken_only_when_asked(break_lock, verdict):
    held = dict(ALICE, started=1000.0)
    got, reason = decide(held, BOB, now=1000.0 + 7 * 3600, stale_after=6 * 3600, break_lock=break_lock)
    assert got == verdict
    assert ('older than 6.0 h' in reason) and ('llmops_break_lock' in reason)


def test_a_young_lock_of_a_live_run_is_refused_unless_broken():
    held = dict(ALICE, started=1000.0)
    assert decide(held, BOB, 1060.0, 3600, False)[0] == 'refuse'
    assert decide(held, BOB, 1060.0, 3600, True)[0] == 'take'
    assert decide(None, BOB, 1060.0, 3600, False) == ('take', None)


def test_a_torn_lock_file_names_no_holder(tmp_path):
    lock = LockFile(str(tmp_path), 'prod')
    with open(lock.path, 'w') as handle:
        handle.write('{"id": ')
    with lock:
        assert lock.read() is None


def test_the_controller_tells_a_live_holder_from_a_dead_one():
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        live = {'controller': 'c', 'pid': child.pid, 'id': 'c:%d:%s' % (child.pid, action.process_start(child.pid))}
        assert not action.gone(live, 'c')
        assert not action.gone(live, 'another-controller')
        assert action.gone(dict(live, id='c:%d:1' % child.pid), 'c')  # PID reused by another process
    finally:
        child.kill()
        child.wait()
    assert action.gone(live, 'c')
