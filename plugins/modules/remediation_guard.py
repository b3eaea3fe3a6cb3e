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
  - An option the task leaves out is taken from its variable where that is set, else it has its default.
    O(host) comes from C(llmops_remediate_host); O(collapsed_hosts) from C(llmops_collapsed_hosts); O(state_file),
    O(cooldown), O(max_per_hour), O(max_collapsed_share), O(report_window) and O(alertmanager_url) from
    C(llmops_remediate_<option>), e.g. C(llmops_remediate_cooldown).
  - Left out, O(hosts) is every server of the inventory whatever the C(--limit), as the plays of the collection
    pick them (C(llmops_hosts), else the group C(sglang_router_worker_group) or every host but the routers), and
    O(outcome) is V(failed) where the play set C(llmops_remediate_failure), else V(remediated).
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
    description: The inventory name of the host whose acceptance collapsed; left out, C(llmops_remediate_host).
    type: str
    required: true
  state:
    description:
      - V(decided) decides about a collapse report.
      - V(finished) records O(outcome) for O(host) and lets the next remediation run.
    type: str
    choices: [decided, finished]
    default: decided
  outcome:
    description:
      - With O(state=finished), what the remediation did (V(remediated), V(failed)...).
      - Left out, V(failed) where the play set C(llmops_remediate_failure), else V(remediated).
    type: str
    default: remediated
  hosts:
    description: The server hosts of the inventory (the fleet); left out, those the plays of the collection pick.
    type: list
    elements: str
    default: []
  collapsed_hosts:
    description: The hosts the same report says collapsed (an Alertmanager group, a round of the poller).
    type: list
    elements: str
    default: []
  state_file:
    description: The guard's state on the controller.
    type: path
    default: /var/lib/llmops/speculation-guard/state.json
  cooldown:
    description: Seconds after a remediation of a host during which a new collapse of it is not acted on.
    type: float
    default: 1800
  max_per_hour:
    description: Remediations started across the fleet in any hour, at most.
    type: int
    default: 3
  max_collapsed_share:
    description: Share of the fleet that, exceeded by the hosts collapsed at once, means a fleet-wide shift.
    type: float
    default: 0.5
  report_window:
    description: Seconds within which collapse reports count as at once.
    type: float
    default: 600
  stale_after:
    description: Seconds after which a remediation that never finished no longer blocks the next one.
    type: float
    default: 3600
  alertmanager_url:
    description:
      - The Alertmanager in which the first V(fleet_wide) decision of an episode (RV(fleet_alert)) raises the alert
        C(LlmopsSpecFleetWideCollapse) (severity C(critical); its C(summary) is RV(msg), its C(hosts) RV(collapsed)),
        through its API (C(POST /api/v2/alerts)), e.g. V(http://127.0.0.1:9093).
      - Empty, no alert is raised. A failure to raise it is a warning, not a failure of the task. Not in check mode.
    type: str
    default: ''
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
'''

RETURN = r'''
action:
  description: V(remediate) or V(ignore).
  type: str
  returned: always
reason:
  description: V(remediate), V(unknown_host), V(fleet_wide), V(busy), V(cooldown) or V(rate_limit); with O(state=finished), V(finished).
  type: str
  returned: always
msg:
  description: The decision in one line.
  type: str
  returned: always
collapsed:
  description: The known hosts that reported a collapse within the window.
  type: list
  elements: str
  returned: always
fleet_size:
  description: The number of O(hosts).
  type: int
  returned: always
fleet_alert:
  description: Raise the fleet-wide alert now (the first V(fleet_wide) decision of an episode).
  type: bool
  returned: always
retry_after:
  description: Seconds until the cooldown or the hourly budget allows this host again (else 0).
  type: float
  returned: always
alert_raised:
  description: Whether the fleet-wide alert was raised in Alertmanager (O(alertmanager_url)) by this call.
  type: bool
  returned: always
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    host=dict(type='str', required=True),
    state=dict(type='str', choices=['decided', 'finished'], default='decided'),
    outcome=dict(type='str', default='remediated'),
    hosts=dict(type='list', elements='str', default=[]),
    collapsed_hosts=dict(type='list', elements='str', default=[]),
    state_file=dict(type='path', default='/var/lib/llmops/speculation-guard/state.json'),
    cooldown=dict(type='float', default=1800.0),
    max_per_hour=dict(type='int', default=3),
    max_collapsed_share=dict(type='float', default=0.5),
    report_window=dict(type='float', default=600.0),
    stale_after=dict(type='float', default=3600.0),
    alertmanager_url=dict(type='str', default=''),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.remediation_guard runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
