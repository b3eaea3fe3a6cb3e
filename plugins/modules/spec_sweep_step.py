#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: spec_sweep_step
short_description: One step of the spec_sweep role, decided from the role's options
version_added: 1.1.0
description:
  - Runs in the C(spec_sweep) role (C(playbooks/benchmark.yml)). Reads the role's options (the C(spec_sweep_*)
    and C(sglang_server_*) variables of the host, as the task sees them) once, and returns what the role needs
    for the step O(step); the role keeps it with C(register).
  - V(settings) - refuses settings the sweep cannot run (depths that are no integers of at least 2, no
    concurrency level, no round, depths without a drafter) and returns what every candidate starts from (the
    drafter and extra arguments, resolved once), the candidates, the API, the tier table's file, the report
    folder, whether routers front the host, the message of a check-mode run (RV(would_measure)) and the message
    refusing extra vars the candidates set (RV(extra_vars_message)).
  - V(start), V(deployed) - the start time of the candidate C(spec_sweep_candidate), then its launch result
    and command once it was deployed.
  - V(benchmark) - runs M(llmops.serving.llm_benchmark) (one module run, on the host the task is delegated to)
    against the server just started and returns its figures and RV(record), what C(results.json) keeps of the
    candidate. V(failed) returns the record of a candidate that failed (in the role's C(rescue)).
  - V(report) - ranks the candidates (filter C(llmops.serving.sweep_ranking)) and returns RV(results), the
    content of C(results.json), the record of the best candidate and where the report is.
  - V(check) - after the rollout, runs a short M(llmops.serving.llm_benchmark) (4 requests) and says whether
    the server runs the best candidate (RV(verified), RV(verdict)).
  - V(tiers) - the C(--speculative-adaptive-config) tier table built from the best candidate per concurrency level
    (filter C(llmops.serving.sweep_adaptive_tiers)) with the file it is written to, and RV(measure), the candidate
    that runs it.
  - V(restored) - after the host's own configuration was deployed again, what the server runs (RV(restored)).
  - Changes nothing, on any host. The decisions are the pure functions of C(module_utils/_spec_sweep.py).
options:
  step:
    description: The step of the sweep.
    type: str
    required: true
    choices: [settings, start, deployed, benchmark, failed, report, check, restored, tiers]
author: llmops.serving maintainers (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
  - llmops.serving.attributes.info_module
notes:
  - The role's options are documented in the C(spec_sweep) role's argument specification.
seealso:
  - module: llmops.serving.llm_benchmark
'''

EXAMPLES = r'''
- name: Check the sweep settings and fix what every candidate starts from
  llmops.serving.spec_sweep_step:
    step: settings
  register: sweep

- name: Say what a real run would measure
  ansible.builtin.debug:
    msg: "{{ sweep.would_measure }}"
'''

RETURN = r'''
would_measure:
  description: With O(step=settings), what a real run would measure, and where its report goes.
  type: str
  returned: success
  sample: Would measure baseline, depth 16 at concurrency 1, 8 (64 prompts each) against http://127.0.0.1:30000, and ...
extra_vars_message:
  description: With O(step=settings), the message refusing the settings the candidates set when they are extra vars (-e).
  type: str
  returned: success
candidates:
  description: With O(step=settings), one entry C({name, depth, adaptive}) per server configuration to measure.
  type: list
  elements: dict
  returned: success
record:
  description: With O(step=benchmark) or O(step=failed), what C(results.json) keeps of the candidate.
  type: dict
  returned: success
runs:
  description: With O(step=benchmark) or O(step=check), the figures per concurrency level (as M(llmops.serving.llm_benchmark)).
  type: list
  elements: dict
  returned: success
server:
  description: With O(step=benchmark) or O(step=check), what the server says about itself.
  type: dict
  returned: success
results:
  description: With O(step=report), the content of C(results.json).
  type: dict
  returned: success
best_candidate:
  description: With O(step=report), the record of the best candidate, or null when every candidate failed.
  type: dict
  returned: success
where:
  description: With O(step=report), the best candidate and where the report is, in one line.
  type: str
  returned: success
verified:
  description: With O(step=check), whether every check request completed and the server runs the best candidate.
  type: bool
  returned: success
verdict:
  description: With O(step=check), what the check found, in one line.
  type: str
  returned: success
measure:
  description: With O(step=tiers), the adaptive candidate that runs the tier table from its file, or null when there is none to measure.
  type: dict
  returned: success
restored:
  description: With O(step=restored), the C(state), C(depth) and C(reason) of the server's own configuration after the sweep.
  type: dict
  returned: success
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    step=dict(type='str', required=True, choices=['settings', 'start', 'deployed', 'benchmark', 'failed', 'report', 'check', 'restored', 'tiers']),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.spec_sweep_step runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
