# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.wait_for_llm_health.

Runs the module of the same name in slices of ``heartbeat_interval`` seconds (it polls
on the managed host), carries its state (log offset, phases, stall clock) from slice to
slice, and prints one heartbeat line per host after each slice, until a verdict or the
deadline. Modelled on ansible.builtin.wait_for_connection (wall-clock deadline, check
mode skipped) and ansible.windows.win_updates (a module called repeatedly, progress
through Display).
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.module_utils._wait import STATUS_TIMEOUT, STATUS_WAITING
from ansible_collections.llmops.serving.plugins.modules.wait_for_llm_health import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    RESUME,
)

display = Display()

MODULE = 'llmops.serving.wait_for_llm_health'
MAX_LINE = 400  # SGLang's server_args line alone is about 10,000 characters


def format_heartbeat(host, result, max_lines):
    """One heartbeat: elapsed, phase, health, and the new log lines since the previous one."""
    lines = result.get('new_lines') or []
    head = '[%s] wait_for_llm_health: %.0f s, phase %s, health: %s' % (
        host, result.get('elapsed', 0), result.get('phase'), result.get('health'))
    if lines:
        shown = lines[-max_lines:] if max_lines > 0 else []
        skipped = len(lines) - len(shown)
        head += '; %d new log line%s%s' % (len(lines), '' if len(lines) == 1 else 's',
                                           ' (%d earlier not shown)' % skipped if skipped else '')
        out = [head] + ['    | %s' % (line if len(line) <= MAX_LINE else line[:MAX_LINE] + ' [...]') for line in shown]
    else:
        out = [head + '; no new log lines']
    out += ['    note: %s' % note for note in result.get('notes') or []]
    return '\n'.join(out)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        if task_vars is None:
            task_vars = {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect

        # fails the task with the validation errors, before anything runs
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE)

        if self._task.check_mode:
            result.update(skipped=True, changed=False, msg='check mode: the server was not probed')
            return result

        host = task_vars.get('inventory_hostname', '?')
        if self._task.delegate_to and self._task.delegate_to != host:
            host = '%s -> %s' % (host, self._task.delegate_to)
        timeout = args['timeout']
        start = time.monotonic()
        state = None
        printed = set()  # notes already shown in a heartbeat
        try:
            while True:
                elapsed = time.monotonic() - start
                module_args = dict(self._task.args)
                module_args[RESUME] = {
                    'state': state,
                    'elapsed': elapsed,
                    'slice': max(0.0, min(args['heartbeat_interval'], timeout - elapsed)),
                }
                module_result = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
                if 'status' not in module_result:
                    # the module did not run (argument error, no Python, connection lost...)
                    result.update(module_result)
                    return result
                state = module_result.pop('state', None)
                if module_result['status'] != STATUS_WAITING:
                    break
                if time.monotonic() - start >= timeout:
                    module_result['status'] = STATUS_TIMEOUT
                    module_result['failed'] = True
                    module_result['msg'] = 'the server at %s was not ready after %.0f s (timeout); phase %s, last health: %s' % (
                        args['url'], timeout, module_result.get('phase'), module_result.get('health'))
                    break
                fresh = [note for note in module_result.get('notes') or [] if note not in printed]
                printed.update(fresh)
                display.display(format_heartbeat(host, dict(module_result, notes=fresh), args['log_lines']))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

        module_result.pop('new_lines', None)
        module_result.pop('invocation', None)
        module_result['elapsed'] = round(time.monotonic() - start, 1)
        result.update(module_result)
        return result
