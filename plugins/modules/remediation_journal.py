#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: remediation_journal
short_description: Append a step of a remediation to the server's journal, or read its last steps
version_added: 1.1.0
description:
  - The journal of the speculation guard's remediations of one server (C(playbooks/remediate.yml)), one JSON
    object a line in O(path) on the server's host (mode 0600), each with the time (UTC), the host and the step.
  - With O(state=recorded), appends the record of O(step). V(started) records the hosts the guard's O(decision)
    saw collapsed (O(host) alone without a decision), O(fallback) and O(trigger); V(outcome) records the
    configuration the remediation left the server on (C(rolled_back) where O(plan) went to the previous good
    configuration, else C(fallback)) with the state, pid, depth and acceptance length of O(result); every other
    step is recorded with O(reason) where it is given.
  - With O(state=read), returns the last O(lines) steps (C(playbooks/status.yml) shows them).
author: llmops.serving maintainers (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Returns the record and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each call with O(state=recorded) appends one step; O(state=read) changes nothing.
options:
  state:
    description: V(recorded) appends O(step); V(read) reads the last O(lines) steps. V(null) means V(recorded).
    type: str
    choices: [recorded, read]
  path:
    description: The journal. V(null) means C(/var/lib/llmops/remediations.jsonl).
    type: path
  host:
    description: The inventory name of the server's host, recorded with each step and named in RV(rows).
    type: str
    required: true
  step:
    description: With O(state=recorded), the step of the remediation.
    type: str
    choices: [started, drained, previous_failed, outcome, remediated, failed, left_out_of_routers]
  reason:
    description: Why, for a step that failed (V(previous_failed), V(failed), V(left_out_of_routers)).
    type: str
  decision:
    description: With O(step=started), the result of M(llmops.serving.remediation_guard) that let the remediation run.
    type: dict
  fallback:
    description: With O(step=started), the fallback (C(llmops_remediate_fallback)). V(null) means V(off).
    type: raw
  trigger:
    description: With O(step=started), what triggered the remediation. V(null) means V(by hand).
    type: str
  plan:
    description:
      - With O(step=outcome), where the remediation took the server
        (M(llmops.serving.remediation_guard), O(llmops.serving.remediation_guard#module:state=planned)).
    type: dict
  result:
    description: With O(step=outcome), what the C(sglang_server) role reports of the server (C(sglang_server_result)).
    type: dict
  lines:
    description: With O(state=read), how many of the last steps to read. V(null) means 5.
    type: int
seealso:
  - module: llmops.serving.remediation_guard
'''

EXAMPLES = r'''
- name: Record the drain
  llmops.serving.remediation_journal:
    host: "{{ inventory_hostname }}"
    step: drained

- name: Read the last remediations of the server
  llmops.serving.remediation_journal:
    host: "{{ inventory_hostname }}"
    state: read
  register: journal

- name: Show them
  ansible.builtin.debug:
    msg: "{{ journal.rows }}"
'''

RETURN = r'''
record:
  description: With O(state=recorded), the step appended (in check mode, the one that would be).
  type: dict
  returned: success
  sample: {"at": "2026-12-07T05:10:26.123456Z", "host": "gpu-a01", "step": "drained"}
entries:
  description: With O(state=read), the last steps, oldest first (lines that are no JSON object left out).
  type: list
  elements: dict
  returned: success
rows:
  description:
    - With O(state=read), one line of text per step, the host, the time and the step, then C(state=), C(depth=),
      C(accept_length=), C(reason=) where the step has them.
  type: list
  elements: str
  returned: success
'''

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import _guard, _reports

DEFAULT_PATH = '/var/lib/llmops/remediations.jsonl'

ARGUMENT_SPEC = dict(
    state=dict(type='str', choices=['recorded', 'read']),
    path=dict(type='path'),
    host=dict(type='str', required=True),
    step=dict(type='str', choices=['started', 'drained', 'previous_failed', 'outcome', 'remediated', 'failed',
                                   'left_out_of_routers']),
    reason=dict(type='str'),
    decision=dict(type='dict'),
    fallback=dict(type='raw'),
    trigger=dict(type='str'),
    plan=dict(type='dict'),
    result=dict(type='dict'),
    lines=dict(type='int'),
)


def record_of(params):
    """The journal record of the step (without its time)."""
    step = params['step']
    if step == 'started':
        fallback = 'off' if params['fallback'] is None else params['fallback']
        body = _guard.remediation_start(params['decision'], params['host'], fallback, params['trigger'] or 'by hand')
    elif step == 'outcome':
        body = _guard.remediation_outcome(params['result'], params['plan'])
    else:
        body = {'step': step}
        if params['reason'] is not None:
            body['reason'] = params['reason']
    return dict({'host': params['host']}, **body)


def read_last(path, count):
    """The last ``count`` lines of the journal, [] where there is none."""
    try:
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return lines[-count:] if count > 0 else []


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    path = params['path'] or DEFAULT_PATH
    if params['state'] == 'read':
        lines = read_last(path, 5 if params['lines'] is None else params['lines'])
        entries = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
        module.exit_json(changed=False, entries=entries, rows=_reports.journal_rows([(params['host'], lines)]))
    if params['step'] is None:
        module.fail_json(msg='state is recorded but the following is missing: step')
    record = dict({'at': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')},
                  **record_of(params))
    if not module.check_mode:
        try:
            folder = os.path.dirname(path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, 'a', encoding='utf-8') as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(json.dumps(record) + '\n')
        except OSError as exc:
            module.fail_json(msg='the remediation journal %s cannot be written: %s' % (path, exc))
    module.exit_json(changed=True, record=record)


if __name__ == '__main__':
    main()
