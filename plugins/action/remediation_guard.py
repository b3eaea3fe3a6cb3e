# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.remediation_guard: the guard's state file (locked, replaced
atomically, mode 0600) and its journal of decisions; the decisions are module_utils/_guard.py's.
Reads only its task's arguments (the fleet, where given as a host pattern, is resolved against the
inventory)."""

from __future__ import annotations

import fcntl
import json
import os
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url
from ansible.plugins.loader import lookup_loader
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.module_utils import _guard
from ansible_collections.llmops.serving.plugins.module_utils._procs import STAT_STARTTIME, read_stat
from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically
from ansible.plugins.action import ActionBase
from ansible_collections.llmops.serving.plugins.modules.remediation_guard import ARGUMENT_SPEC, DEFAULTS

display = Display()


def with_defaults(args):
    """The task's arguments with each option left out or null at its default (the module's DEFAULTS)."""
    return dict(args, **dict((name, value) for name, value in DEFAULTS.items() if args.get(name) is None))


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_identity(pid):
    """[pid, start time] of a process, or None where it is gone."""
    fields = read_stat(pid)
    return [pid, fields[STAT_STARTTIME]] if fields and len(fields) > STAT_STARTTIME else None


def run_alive(owner):
    return run_identity(owner[0]) == list(owner)


def guarded(args, now, check_mode=False, owner=None):
    """Decide (or finish) under the lock of the state file; returns the decision."""
    path = args['state_file']
    folder = os.path.dirname(path) or '.'
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with open(path + '.lock', 'a') as lock:
        os.chmod(path + '.lock', 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = _read(path)
            if args['state'] == 'finished':
                new = _guard.finish(state, args['host'], args['outcome'], now)
                decision = {'host': args['host'], 'action': 'ignore', 'reason': 'finished',
                            'msg': '%s: %s' % (args['host'], args['outcome']), 'collapsed': [],
                            'fleet_size': len(args['hosts']), 'fleet_alert': False, 'retry_after': 0}
            else:
                decision, new = _guard.decide(
                    state, args['host'], args['hosts'], args['collapsed_hosts'], now,
                    cooldown=args['cooldown'], max_per_hour=args['max_per_hour'],
                    max_collapsed_share=args['max_collapsed_share'], report_window=args['report_window'],
                    stale_after=args['stale_after'], owner=owner, owner_alive=run_alive)
            if not check_mode:
                write_atomically(path, json.dumps(new, sort_keys=True).encode('utf-8'), 0o600)
                entry = dict(decision, at=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now)))
                journal = os.path.join(folder, 'decisions.jsonl')
                fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, 'a') as f:
                    f.write(json.dumps(entry, sort_keys=True) + '\n')
            return decision
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def raise_fleet_alert(url, decision, opener=open_url):
    """POST the fleet-wide alert to the Alertmanager at ``url``; None where it took it, else why not."""
    try:
        response = opener(url + '/api/v2/alerts', data=json.dumps(_guard.fleet_alert(decision)), method='POST',
                          headers={'Content-Type': 'application/json'}, timeout=10)
        status = response.getcode()
    except Exception as exc:  # pylint: disable=broad-exception-caught  # any failure is reported, none stops the run
        return to_text(exc)
    return None if status == 200 else 'HTTP %s' % status


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = with_defaults(self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1])
        if args['state'] == 'planned':
            result.update(_guard.remediation_plan(args['previous'], args['fallback'], args['rollback_to']), changed=False)
            return result
        if not args['host']:
            raise AnsibleActionFail('remediation_guard: missing required arguments: host')
        if args['hosts'] is None:
            args['hosts'] = self._fleet(args['fleet'], task_vars) if args['fleet'] else []
        try:
            # The playbook run (the worker's parent, ansible-playbook) holds the remediation in progress.
            decision = guarded(args, time.time(), check_mode=self._task.check_mode, owner=run_identity(os.getppid()))
        except OSError as exc:
            raise AnsibleActionFail('the guard state %s cannot be used: %s' % (args['state_file'], exc))
        if decision['reason'] in ('unknown_host', 'fleet_wide'):
            display.warning(decision['msg'])
        result.update(decision)
        result['state_file'] = args['state_file']
        result['alert_raised'] = False
        if decision['fleet_alert'] and args['alertmanager_url'] and not self._task.check_mode:
            error = raise_fleet_alert(args['alertmanager_url'], decision)
            result['alert_raised'] = error is None
            if error:
                display.warning('the fleet-wide alert could not be raised in Alertmanager %s: %s' % (args['alertmanager_url'], error))
        result['changed'] = decision['action'] == 'remediate' or args['state'] == 'finished'
        return result

    def _fleet(self, pattern, task_vars):
        """The hosts of the inventory that match ``pattern`` (a pattern or a list of them), whatever the --limit."""
        hostnames = lookup_loader.get('ansible.builtin.inventory_hostnames', loader=self._loader, templar=self._templar)
        return hostnames.run(pattern if isinstance(pattern, list) else [pattern], variables=task_vars)
