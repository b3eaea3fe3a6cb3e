# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback of the H200 proof (tests/gpu/h200_proof.sh): one JSON line per task result.

Enabled by the driver beside the default stdout callback; writes to the file named by
the environment variable LLMOPS_PROOF_EVENTS (nothing when unset). Each line holds the
task name, action, host, outcome, the time it was reported (``time``, seconds since the
epoch) and the result without ``invocation`` (long strings and lists cut), so the driver can
check PIDs, plans, health phases and acceptance figures, and time what happened between tasks.
"""

from __future__ import annotations

import json
import os
import time

from ansible.parsing.ajson import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: proof_events
type: aggregate
short_description: Task results as JSON lines for the H200 proof driver
description:
  - Writes one JSON line per task result to the file named by E(LLMOPS_PROOF_EVENTS).
"""

MAX_STRING = 4000
MAX_ITEMS = 60


def cut(value):
    """A copy of ``value`` with long strings and lists shortened (the tail kept)."""
    if isinstance(value, dict):
        return {str(k): cut(v) for k, v in value.items() if k != 'invocation'}
    if isinstance(value, (list, tuple)):
        items = list(value)
        if len(items) > MAX_ITEMS:
            items = ['... %d earlier items cut' % (len(items) - MAX_ITEMS)] + items[-MAX_ITEMS:]
        return [cut(v) for v in items]
    if isinstance(value, str) and len(value) > MAX_STRING:
        return '... %d characters cut ...' % (len(value) - MAX_STRING) + value[-MAX_STRING:]
    return value


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'proof_events'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get('LLMOPS_PROOF_EVENTS')

    def _write(self, outcome, result):
        if not self._path:
            return
        event = {
            'task': result.task_name,
            'action': result.task.action,
            'host': result.host.get_name(),
            'outcome': outcome,
            'time': round(time.time(), 3),
            'result': cut(dict(result.result)),
        }
        with open(self._path, 'a') as handle:
            handle.write(json.dumps(event, cls=AnsibleJSONEncoder, sort_keys=True) + '\n')

    def v2_runner_on_ok(self, result):
        self._write('changed' if result.result.get('changed') else 'ok', result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write('ignored' if ignore_errors else 'failed', result)

    def v2_runner_on_skipped(self, result):
        self._write('skipped', result)

    def v2_runner_on_unreachable(self, result):
        self._write('unreachable', result)
