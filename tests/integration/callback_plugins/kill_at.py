# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only: SIGKILL the whole ansible-playbook process group at a chosen point, as a laptop that dies or an
operator's kill -9 would, so that the next run has to finish the rollout (tests/integration/test_router.py).

``LLMOPS_KILL_AT=EVENT:ACTION:HOST[:OPTION=VALUE]``: EVENT is ``ok`` (after the task's result on HOST) or
``start`` (while it runs: the module has been sent to HOST); ACTION is the module's name (the last part of its
FQCN; ``a|b`` for either); OPTION=VALUE must be among the task's arguments. The test starts ansible-playbook in a
session of its own, so the kill takes exactly its process group (controller, workers, ssh)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: kill_at
type: aggregate
short_description: Test-only - SIGKILL ansible-playbook's process group at a task (LLMOPS_KILL_AT)
description: Kills the playbook's process group when a matching task starts or returns on a host.
requirements: [enabled in callbacks_enabled]
'''

import os
import signal

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

    def _matches(self, task, host):
        if task.action.rsplit('.', 1)[-1] not in self.action.split('|') or host != self.host:
            return False
        return self.option is None or str(task.args.get(self.option[0])) == self.option[1]

    def _kill(self):
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def v2_runner_on_start(self, host, task):
        if self.event == 'start' and self._matches(task, host.get_name()):
            self._kill()

    def v2_runner_on_ok(self, result):
        if self.event == 'ok' and self._matches(result._task, result._host.get_name()):
            self._kill()
