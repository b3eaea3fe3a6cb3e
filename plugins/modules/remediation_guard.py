#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: remediation_guard
short_description: Decide whether an acceptance collapse of one server is remediated now
version_added: 1.1.0
description:
  - Runs on the controller (the host of C(ansible-rulebook)), first in C(playbooks/remediate.yml). Keeps a small
    state in O(state_file) (mode 0600, under a lock, replaced atomically) and decides, for one collapse report
    of O(host), in this order
  - V(unknown_host) - O(host) is not one of O(hosts), the servers of the inventory; logged and ignored.
  - V(fleet_wide) - more than O(max_collapsed_share) of O(hosts) (and at least two) reported a collapse within
    O(report_window) seconds (O(collapsed_hosts) of this report and the reports before it; a host remediated
    within O(cooldown) does not count unless its remediation V(failed)), a workload shift, not a bad host.
    Nothing is remediated; RV(fleet_alert) is true once per episode, to raise one fleet-wide alert.
  - V(busy) - another host is being remediated (one at a time); one started more than O(stale_after) seconds ago
    no longer counts.
  - V(cooldown) - O(host) was remediated less than O(cooldown) seconds ago.
  - V(rate_limit) - O(max_per_hour) remediations started across the fleet in the last hour.
  - V(remediate) - go; O(host) is held as in progress until a call with O(state=finished).
  - Every decision is appended to C(decisions.jsonl) beside O(state_file) (mode 0600), one JSON object a line.
  - The decisions are the pure functions of C(module_utils/_guard.py).
  - With O(state=planned), decides where the remediation of a server takes it, from O(previous), the result of
    M(llmops.serving.last_good_config) (O(llmops.serving.last_good_config#module:state=restored), check mode);
    RV(to) is V(previous) where a good configuration was found that differs from the launch files on the host,
    else V(fallback); RV(fallback_depth) is the depth of O(fallback), null for speculative decoding off.
    The state file is not used.
  - Reads only the task's arguments; an option left out or V(null) has the default its description names.
author: llmops.serving maintainers (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
attributes:
  check_mode:
    support: full
    details: Decides and reports, writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each call is one report; the state counts them.
options:
  host:
    description: The inventory name of the host whose acceptance collapsed (C(llmops_remediate_host)); required
      unless O(state=planned).
    type: str
  state:
    description:
      - V(decided) decides about a collapse report.
      - V(finished) records O(outcome) for O(host) and lets the next remediation run.
      - V(planned) decides where the remediation takes the server (O(previous), O(fallback), O(rollback_to)).
      - V(null) means V(decided).
    type: str
    choices: [decided, finished, planned]
  outcome:
    description:
      - With O(state=finished), what the remediation did (V(remediated), V(failed)...).
      - V(null) means V(remediated).
    type: str
  hosts:
    description:
      - The server hosts of the inventory (the fleet).
      - V(null) means the hosts of O(fleet), else none.
    type: list
    elements: str
  fleet:
    description:
      - Where O(hosts) is null, the host pattern (or list of patterns) of the fleet, resolved against the whole
        inventory whatever the C(--limit), as the plays of the collection pick their hosts.
    type: raw
    version_added: 1.1.0
  collapsed_hosts:
    description: The hosts the same report says collapsed (an Alertmanager group, a round of the poller); V(null) means none.
    type: list
    elements: str
  state_file:
    description: The guard's state on the controller. V(null) means C(/var/lib/llmops/speculation-guard/state.json).
    type: path
  cooldown:
    description: Seconds after a remediation of a host during which a new collapse of it is not acted on. V(null) means 1800.
    type: float
  max_per_hour:
    description: Remediations started across the fleet in any hour, at most. V(null) means 3.
    type: int
  max_collapsed_share:
    description: Share of the fleet that, exceeded by the hosts collapsed at once, means a fleet-wide shift. V(null) means 0.5.
    type: float
  report_window:
    description: Seconds within which collapse reports count as at once. V(null) means 600.
    type: float
  stale_after:
    description: Seconds after which a remediation that never finished no longer blocks the next one. V(null) means 3600.
    type: float
  alertmanager_url:
    description:
      - The Alertmanager in which the first V(fleet_wide) decision of an episode (RV(fleet_alert)) raises the alert
        C(LlmopsSpecFleetWideCollapse) (severity C(critical); its C(summary) is RV(msg), its C(hosts) RV(collapsed)),
        through its API (C(POST /api/v2/alerts)), e.g. V(http://127.0.0.1:9093).
      - Empty or V(null), no alert is raised. A failure to raise it is a warning, not a failure of the task. Not in
        check mode.
    type: str
  previous:
    description: With O(state=planned), the result of M(llmops.serving.last_good_config) in check mode (V(restored)).
    type: dict
    version_added: 1.1.0
  fallback:
    description:
      - With O(state=planned), the fallback (C(llmops_remediate_fallback)), a depth, or V(off) (also V(0), V(none),
        V(false), empty) for speculative decoding off. V(null) means V(off).
    type: raw
    version_added: 1.1.0
  rollback_to:
    description: With O(state=planned), the record the rollback goes back to (C(llmops_rollback_to)), returned as RV(rollback_to). V(null) means V(last_good).
    type: str
    version_added: 1.1.0
'''

EXAMPLES = r'''
- name: Decide whether this collapse is remediated now
  llmops.serving.remediation_guard:
    host: gpu-a01
    hosts: "{{ groups['sglang_servers'] }}"
    collapsed_hosts: [gpu-a01]
  register: guard

- name: Let the next remediation run
  llmops.serving.remediation_guard:
    host: gpu-a01
    state: finished
    outcome: remediated

- name: Decide between the previous good configuration and the fallback
  llmops.serving.remediation_guard:
    state: planned
    previous: "{{ previous_good }}"
    fallback: 3
  register: plan
'''

RETURN = r'''
to:
  description: With O(state=planned), V(previous) or V(fallback).
  type: str
  returned: with O(state=planned)
fallback_depth:
  description: With O(state=planned), the depth of the fallback, null for speculative decoding off.
  type: int
  returned: with O(state=planned)
rollback_to:
  description: With O(state=planned), O(rollback_to).
  type: str
  returned: with O(state=planned)
action:
  description: V(remediate) or V(ignore).
  type: str
  returned: unless O(state=planned)
reason:
  description: V(remediate), V(unknown_host), V(fleet_wide), V(busy), V(cooldown) or V(rate_limit); with O(state=finished), V(finished).
  type: str
  returned: unless O(state=planned)
msg:
  description: The decision in one line.
  type: str
  returned: unless O(state=planned)
collapsed:
  description: The known hosts that reported a collapse within the window.
  type: list
  elements: str
  returned: unless O(state=planned)
fleet_size:
  description: The number of O(hosts).
  type: int
  returned: unless O(state=planned)
fleet_alert:
  description: Raise the fleet-wide alert now (the first V(fleet_wide) decision of an episode).
  type: bool
  returned: unless O(state=planned)
retry_after:
  description: Seconds until the cooldown or the hourly budget allows this host again (else 0).
  type: float
  returned: unless O(state=planned)
state_file:
  description: O(state_file), the guard's state (the call with O(state=finished) names it again).
  type: str
  returned: unless O(state=planned)
  version_added: 1.1.0
alert_raised:
  description: Whether the fleet-wide alert was raised in Alertmanager (O(alertmanager_url)) by this call.
  type: bool
  returned: unless O(state=planned)
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    host=dict(type='str'),
    state=dict(type='str', choices=['decided', 'finished', 'planned']),
    outcome=dict(type='str'),
    hosts=dict(type='list', elements='str'),
    fleet=dict(type='raw'),
    collapsed_hosts=dict(type='list', elements='str'),
    state_file=dict(type='path'),
    cooldown=dict(type='float'),
    max_per_hour=dict(type='int'),
    max_collapsed_share=dict(type='float'),
    report_window=dict(type='float'),
    stale_after=dict(type='float'),
    alertmanager_url=dict(type='str'),
    previous=dict(type='dict'),
    fallback=dict(type='raw'),
    rollback_to=dict(type='str'),
)

# The value of an option left out or null.
DEFAULTS = dict(state='decided', outcome='remediated', collapsed_hosts=[], state_file='/var/lib/llmops/speculation-guard/state.json',
                cooldown=1800.0, max_per_hour=3, max_collapsed_share=0.5, report_window=600.0, stale_after=3600.0,
                alertmanager_url='', fallback='off', rollback_to='last_good')


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.remediation_guard runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
