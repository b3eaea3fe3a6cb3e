#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: rollout_lock
short_description: One rollout at a time per fleet - take, check or give back the fleet's rollout lock
version_added: 1.1.0
author: llmops.serving maintainers (@llmops)
description:
  - Keeps one lock file per fleet (O(name)) on the host it runs on - the fleet's router hosts, else its first server
    host, so that every rollout of the fleet meets there. C(deploy.yml), C(rollback.yml), C(remediate.yml),
    C(benchmark.yml) and C(stop.yml) take it before the first host changes and give it back at the end.
  - The holder is recorded as who ran the playbook, on which controller, the PID of its C(ansible-playbook)
    process, the playbook and when it started. A second rollout is refused, naming the holder and since when,
    before anything stops.
  - A holder that is gone is stale. The action plugin of the same name checks, on the controller that took the
    lock, whether its C(ansible-playbook) process still runs (same PID and start time); a lock whose process is gone
    is taken over, and said so, so that the rerun of an interrupted rollout continues. A lock held from another
    controller for longer than O(stale_after) is reported as probably dead and taken only with O(break_lock).
  - The file is written atomically (mode 0600) under an advisory lock of its directory, so two runs that arrive
    together cannot both take it.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Tells whether the lock could be taken or given back, refuses as it would, and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The run that holds the lock takes it again without a change.
options:
  name:
    description: The fleet whose rollouts the lock serialises (one lock file per name).
    type: str
    default: fleet
  state:
    description:
      - V(present) takes the lock for this run, or refuses when another run holds it.
      - V(absent) gives it back where this run holds it (a lock of another run is left alone).
      - V(read) only returns the holder.
    type: str
    choices: [present, absent, read]
    default: present
  lock_dir:
    description: Directory of the lock files.
    type: path
    default: /var/lib/llmops/locks
  stale_after:
    description: Seconds after which a lock held from another controller is reported as probably dead.
    type: int
    default: 21600
  break_lock:
    description: Take the lock even where another run holds it (C(-e llmops_break_lock=true)); say so in the result.
    type: bool
    default: false
  playbook:
    description: The playbook the lock is taken for, recorded with the holder.
    type: str
  wait:
    description:
      - With V(present), how many seconds to wait for a lock held by another live run before refusing (0 refuses at
        once). While it waits, the action prints who holds the lock every O(wait_interval) seconds. The speculation
        guard's C(remediate.yml) waits, so that a remediation is deferred while an operator's rollout runs.
    type: int
    default: 0
  wait_interval:
    description: Seconds between two tries while O(wait) lasts.
    type: int
    default: 10
  holder:
    description:
      - Set by the action plugin, not by the task - the holder this run records (id, owner, controller, pid,
        started).
    type: dict
  gone_id:
    description:
      - Set by the action plugin, not by the task - the id of a holder whose process the controller found gone.
    type: str
'''

EXAMPLES = r'''
- name: Take the rollout lock of the fleet (refuses while another rollout runs)
  llmops.serving.rollout_lock:
    name: prod-kimi
    playbook: deploy.yml
    break_lock: "{{ llmops_break_lock }}"
  delegate_to: "{{ groups['sglang_routers'][0] }}"
  run_once: true

- name: Give the rollout lock back
  llmops.serving.rollout_lock:
    name: prod-kimi
    state: absent
  delegate_to: "{{ groups['sglang_routers'][0] }}"
  run_once: true
'''

RETURN = r'''
holder:
  description: Who holds the lock after the task (none where it is free).
  returned: always
  type: dict
  contains:
    id:
      description: The run's id (controller, PID and the process's start time).
      type: str
    owner:
      description: The user who ran the playbook.
      type: str
    controller:
      description: The controller's host name.
      type: str
    pid:
      description: The PID of the C(ansible-playbook) process.
      type: int
    playbook:
      description: The playbook.
      type: str
    started:
      description: When the lock was taken (seconds since the epoch).
      type: float
held_by:
  description: The holder, as a sentence (who, where, PID, playbook, since when).
  returned: when the lock is held
  type: str
  sample: ops@laptop (ansible-playbook PID 4242, deploy.yml) since 2026-12-07 05:40:00 UTC (3 min ago)
replaced:
  description: What the run did with a stale or broken lock of another run (empty where there was none).
  returned: always
  type: str
waited:
  description: Seconds the run waited for another run's lock (O(wait)).
  returned: always
  type: float
lock_file:
  description: The lock file.
  returned: always
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils._rollout_lock import LockError, LockFile, decide, holder_text

ARGUMENT_SPEC = dict(
    name=dict(type='str', default='fleet'),
    state=dict(type='str', choices=['present', 'absent', 'read'], default='present'),
    lock_dir=dict(type='path', default='/var/lib/llmops/locks'),
    stale_after=dict(type='int', default=21600),
    break_lock=dict(type='bool', default=False),
    playbook=dict(type='str'),
    wait=dict(type='int', default=0),
    wait_interval=dict(type='int', default=10),
    holder=dict(type='dict'),
    gone_id=dict(type='str'),
)


def run(params, check_mode, now):
    """The module's result for ``params``: ``(result, failed_msg)``."""
    lock = LockFile(params['lock_dir'], params['name'])
    holder = params['holder'] or {}
    result = {'changed': False, 'replaced': '', 'lock_file': lock.path}
    with lock:
        current = lock.read()
        if params['state'] == 'read':
            result['holder'] = current or {}
        elif params['state'] == 'absent':
            mine = current is not None and current.get('id') == holder.get('id')
            if mine and not check_mode:
                lock.remove()
            result.update(changed=mine, holder={} if mine else (current or {}))
        else:
            if not holder.get('id'):
                raise LockError('holder: the action plugin llmops.serving.rollout_lock sets it; run the module '
                                'through its action (no holder id was given)')
            verdict, reason = decide(current, holder, now, params['stale_after'], params['break_lock'],
                                     params['gone_id'])
            if verdict == 'refuse':
                result.update(holder=current, held_by=holder_text(current, now))
                return result, reason
            if verdict == 'take':
                taken = dict(holder, started=now)
                if not check_mode:
                    lock.write(taken)
                result.update(changed=True, holder=taken, replaced=reason or '')
            else:
                result['holder'] = current
    if result['holder']:
        result['held_by'] = holder_text(result['holder'], now)
    return result, None


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result, refusal = run(module.params, module.check_mode, time.time())
    except (LockError, OSError) as exc:
        module.fail_json(msg='rollout lock %s: %s' % (module.params['name'], exc))
    if refusal:
        module.fail_json(msg=refusal, **result)
    if result['replaced']:
        module.warn(result['replaced'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
