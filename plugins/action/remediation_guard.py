# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.remediation_guard: the guard's state file (locked, replaced
atomically, mode 0600) and its journal of decisions; the decisions are module_utils/_guard.py's."""

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
from ansible_collections.llmops.serving.plugins.module_utils._options import validated
from ansible_collections.llmops.serving.plugins.filter.fleet import server_hosts
from ansible_collections.llmops.serving.plugins.modules.remediation_guard import ARGUMENT_SPEC
from ansible_collections.llmops.serving.plugins.plugin_utils._role_action import RoleAction

display = Display()

# The options that the variables of playbooks/remediate.yml give where the task leaves them out.
VARIABLES = {
    'host': 'llmops_remediate_host',
    'collapsed_hosts': 'llmops_collapsed_hosts',
    'state_file': 'llmops_remediate_state_file',
    'cooldown': 'llmops_remediate_cooldown',
    'max_per_hour': 'llmops_remediate_max_per_hour',
    'max_collapsed_share': 'llmops_remediate_max_collapsed_share',
    'report_window': 'llmops_remediate_report_window',
    'alertmanager_url': 'llmops_remediate_alertmanager_url',
}


def fleet_pattern(task_vars, resolve):
    """The host pattern of the fleet, as the plays of playbooks/remediate.yml and status.yml take it: llmops_hosts,
    else the servers' group (sglang_router_worker_group) or every host but the routers (sglang_router_group)."""
    if 'llmops_hosts' in task_vars:
        return resolve('llmops_hosts')
    groups = [resolve(name) if name in task_vars else default
              for name, default in (('sglang_router_worker_group', 'sglang_servers'), ('sglang_router_group', 'sglang_routers'))]
    return server_hosts(task_vars['groups'], *groups)


def play_defaults(args, task_vars, fleet):
    """The options the play gives where the task leaves them out: ``hosts``, every server of the inventory
    whatever the --limit (``fleet()`` reads them), and ``outcome``, ``failed`` where the play set
    ``llmops_remediate_failure``, else ``remediated``."""
    merged = dict(args)
    if 'hosts' not in merged:
        merged['hosts'] = fleet()
    if 'outcome' not in merged:
        merged['outcome'] = 'failed' if 'llmops_remediate_failure' in task_vars else 'remediated'
    return merged


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


class ActionModule(RoleAction):
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        resolve = self.role_variable
        args = play_defaults(self._task.args, task_vars, lambda: self._fleet(task_vars, resolve))
        args, errors = validated(ARGUMENT_SPEC, args, task_vars, resolve, VARIABLES)
        if errors:
            raise AnsibleActionFail('remediation_guard: %s' % '; '.join(errors))
        try:
            # The playbook run (the worker's parent, ansible-playbook) holds the remediation in progress.
            decision = guarded(args, time.time(), check_mode=self._task.check_mode, owner=run_identity(os.getppid()))
        except OSError as exc:
            raise AnsibleActionFail('the guard state %s cannot be used: %s' % (args['state_file'], exc))
        if decision['reason'] in ('unknown_host', 'fleet_wide'):
            display.warning(decision['msg'])
        result.update(decision)
        result['alert_raised'] = False
        if decision['fleet_alert'] and args['alertmanager_url'] and not self._task.check_mode:
            error = raise_fleet_alert(args['alertmanager_url'], decision)
            result['alert_raised'] = error is None
            if error:
                display.warning('the fleet-wide alert could not be raised in Alertmanager %s: %s' % (args['alertmanager_url'], error))
        result['changed'] = decision['action'] == 'remediate' or args['state'] == 'finished'
        return result

    def _fleet(self, task_vars, resolve):
        pattern = fleet_pattern(task_vars, resolve)
        hostnames = lookup_loader.get('ansible.builtin.inventory_hostnames', loader=self._loader, templar=self._templar)
        return hostnames.run(pattern if isinstance(pattern, list) else [pattern], variables=task_vars)
