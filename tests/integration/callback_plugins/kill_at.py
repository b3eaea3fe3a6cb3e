# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only: SIGKILL the whole ansible-playbook process group at a chosen point, as a laptop that dies or an
operator's kill -9 would, so that the next run has to finish the rollout (tests/integration/test_router.py).

``LLMOPS_KILL_AT=EVENT:ACTION:HOST[:OPTION=VALUE]``: EVENT is ``ok`` (after the task's result on HOST) or
``start`` (while it runs: the module has been sent to HOST); ACTION is the module's name (the last part of its
FQCN; ``a|b`` for either); OPTION=VALUE must be among the task's arguments. The test starts ansible-playbook in a
session of its own, so the kill takes exactly its process group (controller, workers, ssh).

``LLMOPS_KILL_SIGNAL=INT`` sends SIGINT instead (an operator's Ctrl-C: the terminal sends it to the foreground
process group), from a process of its own, outside the process group, as the terminal would;
``LLMOPS_KILL_DELAY=SECONDS`` sends it that long after the point (while the next steps run).

``LLMOPS_LINK_DOWN=DEVICE`` instead: at that point, once, take the network link DEVICE down (``ip link set DEVICE
down``: the host-side veth of a namespace host, whose SSH then stops answering) and let the run go on."""

from __future__ import annotations

DOCUMENTATION = r'''
name: kill_at
type: aggregate
short_description: Test-only - SIGKILL ansible-playbook's process group (or take a link down) at a task (LLMOPS_KILL_AT)
description: Kills (or interrupts) the playbook's process group, or takes a link down, when a matching task starts or returns on a host.
requirements: [enabled in callbacks_enabled]
'''

import os
import signal
import subprocess

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'kill_at'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        parts = os.environ.get('LLMOPS_KILL_AT', '').split(':')
        self.event, self.action, self.host = (parts + ['', '', ''])[:3]
        self.option = parts[3].split('=', 1) if len(parts) > 3 else None
        self.link = os.environ.get('LLMOPS_LINK_DOWN', '')
        self.signal = os.environ.get('LLMOPS_KILL_SIGNAL', 'KILL')
        self.done = False

    def _matches(self, task, host):
        if task.action.rsplit('.', 1)[-1] not in self.action.split('|') or host != self.host:
            return False
        return self.option is None or str(task.args.get(self.option[0])) == self.option[1]

    def _kill(self):
        if self.done:
            return
        self.done = True
        if self.link:
            subprocess.run(['ip', 'link', 'set', self.link, 'down'], check=True)
        elif self.signal == 'INT':
            subprocess.Popen(['sh', '-c', 'sleep "$1"; kill -s INT -- "-$2"', 'kill_at',
                              os.environ.get('LLMOPS_KILL_DELAY', '0'), str(os.getpgrp())], start_new_session=True)
        else:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    def v2_runner_on_start(self, host, task):
        if self.event == 'start' and self._matches(task, host.get_name()):
            self._kill()

    def v2_runner_on_ok(self, result):
        if self.event == 'ok' and self._matches(result._task, result._host.get_name()):
            self._kill()
