"""The action of rollout_lock: who this run is, a dead holder on this controller taken over, and the wait for a live
one (the speculation guard's remediation waits instead of being refused)."""

from __future__ import annotations

import os
import socket

from ansible_collections.llmops.serving.plugins.action import rollout_lock
from ansible_collections.llmops.serving.plugins.action.rollout_lock import ActionModule
from ansible_collections.llmops.serving.tests.unit.plugins.action._action_runner import make_action


def run(args, answers, monkeypatch):
    """The action's result and the module runs it made, the module answering ``answers`` in turn."""
    ran = []

    def execute(module_name, module_args, task_vars):
        ran.append(dict(module_args))
        return dict(answers[min(len(ran), len(answers)) - 1])

    plugin = make_action(ActionModule, 'llmops.serving.rollout_lock', args, execute)
    clock = [0.0]
    monkeypatch.setattr(rollout_lock.time, 'monotonic', lambda: clock[0])
    monkeypatch.setattr(rollout_lock.time, 'sleep', lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    return plugin.run(task_vars={'inventory_hostname': 'r1'}), ran


REFUSED = {'failed': True, 'msg': 'another rollout holds the lock: ...', 'held_by': 'bob@ci (...)',
           'holder': {'id': 'ci:200:7', 'controller': 'ci', 'pid': 200}}
TAKEN = {'changed': True, 'holder': {'id': 'x'}}


def test_the_holder_is_this_run_and_its_playbook(monkeypatch):
    result, ran = run({'playbook': 'deploy.yml'}, [TAKEN], monkeypatch)
    holder = ran[0]['holder']
    assert result['changed'] and len(ran) == 1
    assert holder['controller'] == socket.gethostname() and holder['playbook'] == 'deploy.yml'
    assert holder['id'] == '%s:%d:%s' % (holder['controller'], holder['pid'], rollout_lock.process_start(holder['pid']))


def test_a_live_holder_is_refused_at_once_without_wait(monkeypatch):
    result, ran = run({'playbook': 'deploy.yml'}, [REFUSED], monkeypatch)
    assert result['failed'] and len(ran) == 1 and result['waited'] == 0


def test_with_wait_the_run_waits_for_the_lock_then_takes_it(monkeypatch, capsys):
    result, ran = run({'playbook': 'remediate.yml', 'wait': 60, 'wait_interval': 10}, [REFUSED, REFUSED, TAKEN],
                      monkeypatch)
    assert result['changed'] and len(ran) == 3 and result['waited'] == 20.0
    shown = capsys.readouterr().out
    assert '[r1] rollout_lock: waiting 0 of 60 s for the rollout lock held by bob@ci (...)' in shown


def test_the_wait_ends_with_the_refusal(monkeypatch):
    result, ran = run({'playbook': 'remediate.yml', 'wait': 25, 'wait_interval': 10}, [REFUSED], monkeypatch)
    assert result['failed'] and len(ran) == 4 and result['waited'] == 25.0


def test_a_dead_holder_of_this_controller_is_taken_over(monkeypatch):
    dead = dict(REFUSED, holder={'id': '%s:999999:1' % socket.gethostname(), 'controller': socket.gethostname(),
                                 'pid': 999999})
    result, ran = run({'playbook': 'deploy.yml'}, [dead, TAKEN], monkeypatch)
    assert result['changed'] and ran[1]['gone_id'] == dead['holder']['id']


def test_the_playbook_process_is_an_ancestor_named_ansible_playbook():
    assert rollout_lock.playbook_process() == os.getppid()  # pytest has no ansible-playbook above it
