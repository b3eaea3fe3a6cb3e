# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.rollout_lock: says who this run is (user, controller, the PID and start
time of its ansible-playbook process) and, where the lock is refused to us and its holder ran on this
controller, whether that process is gone, in which case the module takes the lock over."""

from __future__ import annotations

import getpass
import os
import socket
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.modules.rollout_lock import ARGUMENT_SPEC

display = Display()


def process_start(pid):
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), None where it is gone."""
    try:
        with open('/proc/%d/stat' % int(pid), 'rb') as handle:
            stat = handle.read().decode('utf-8', 'replace')
    except (OSError, ValueError):
        return None
    return stat[stat.rindex(')') + 2:].split()[19]


def playbook_process(pid=None):
    """The PID of the ansible-playbook process this worker runs for: the nearest ancestor whose command line
    names ansible-playbook (the worker's parent where none does)."""
    pid = pid or os.getpid()
    for dummy in range(16):
        try:
            with open('/proc/%d/stat' % pid, 'rb') as handle:
                stat = handle.read().decode('utf-8', 'replace')
            parent = int(stat[stat.rindex(')') + 2:].split()[1])
            with open('/proc/%d/cmdline' % parent, 'rb') as handle:
                argv = handle.read().split(b'\0')
        except (OSError, ValueError):
            break
        if any(os.path.basename(arg) == b'ansible-playbook' for arg in argv[:2]):
            return parent
        if parent <= 1:
            break
        pid = parent
    return os.getppid()


def this_run():
    """The holder this run records: ``{id, owner, controller, pid}``."""
    controller = socket.gethostname()
    pid = playbook_process()
    return {'id': '%s:%d:%s' % (controller, pid, process_start(pid)), 'owner': getpass.getuser(),
            'controller': controller, 'pid': pid}


def gone(holder, controller):
    """Whether ``holder`` ran on ``controller`` and its ansible-playbook process is no longer there."""
    if holder.get('controller') != controller:
        return False
    pid = holder.get('pid')
    return not pid or '%s:%s:%s' % (controller, pid, process_start(pid)) != holder.get('id')


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        me = this_run()
        args['holder'] = dict(me, playbook=args['playbook'] or '?')
        host = (task_vars or {}).get('inventory_hostname')
        start = time.monotonic()
        try:
            while True:
                outcome = self._lock(args, me['controller'], task_vars)
                waited = time.monotonic() - start
                if not (args['state'] == 'present' and outcome.get('failed') and outcome.get('held_by')
                        and waited < args['wait']) or self._task.check_mode:
                    break
                display.display('[%s] rollout_lock: waiting %.0f of %d s for the rollout lock held by %s'
                                % (host, waited, args['wait'], outcome['held_by']))
                time.sleep(min(args['wait_interval'], max(0.1, args['wait'] - waited)))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(outcome, waited=round(time.monotonic() - start, 1))
        return result

    def _lock(self, args, controller, task_vars):
        """One try: the module's result, run again to take the lock over where its holder's process is gone."""
        outcome = self._execute_module(module_name=self._task.action, module_args=args, task_vars=task_vars)
        held = outcome.get('holder') or {}
        if args['state'] == 'present' and outcome.get('failed') and gone(held, controller):
            outcome = self._execute_module(module_name=self._task.action, module_args=dict(args, gone_id=held['id']),
                                           task_vars=task_vars)
        return outcome
