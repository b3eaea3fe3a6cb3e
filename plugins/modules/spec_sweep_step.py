#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: spec_sweep_step
short_description: One step of the spec_sweep role, decided from the task's arguments
version_added: 1.1.0
description:
  - Runs in the C(spec_sweep) role (C(playbooks/benchmark.yml)) on the controller. Reads only the task's arguments
    and returns what the role needs for the step O(step); the role keeps it with C(register).
  - V(settings) - takes the sweep's settings (O(host), O(depths) ... O(report_dir)) and the server's (O(engine) ...
    O(simulator)), refuses settings the sweep cannot run (depths that are no integers of at least 2, no
    concurrency level, no round, depths without a drafter) and returns what every candidate starts from (the
    drafter and extra arguments, resolved once), the candidates, the API, the tier table's file, the report
    folder, whether routers front the host (the inventory's groups O(router_group) and O(worker_group)), the
    message of a check-mode run (RV(would_measure)), the message refusing extra vars the candidates set
    (RV(extra_vars_message)) and RV(options), the settings every later step reads from O(settings).
  - Every later step takes O(settings), the result of V(settings).
  - V(start), V(deployed) - the start time of the candidate O(candidate), then (O(progress) being the result of
    V(start)) its launch result O(server_result) and command O(command) once it was deployed.
  - V(benchmark) - runs M(llmops.serving.llm_benchmark) (one module run, on the host the task is delegated to)
    against the server just started (O(server_result)) and returns its figures and RV(record), what
    C(results.json) keeps of the candidate. V(failed) returns the record of a candidate that failed (in the
    role's C(rescue), from O(failed_result) and O(failed_task)).
  - V(report) - ranks the candidates O(results) and returns RV(results), the content of C(results.json), the
    record of the best candidate, where the report is, and RV(chart), the SVG of C(chart.svg).
  - V(check) - after the rollout, runs a short M(llmops.serving.llm_benchmark) (4 requests) and says whether
    the server runs O(candidate), the best one (RV(verified), RV(verdict)).
  - V(tiers) - the C(--speculative-adaptive-config) tier table built from the best of O(results) per concurrency
    level with the file it is written to, and RV(measure), the candidate that runs it.
  - V(restored) - after the host's own configuration was deployed again, what the server runs (RV(restored)),
    from O(server_result).
  - Changes nothing, on any host. The decisions are the pure functions of C(module_utils/_spec_sweep.py) and
    C(module_utils/_sweep.py).
options:
  step:
    description: The step of the sweep.
    type: str
    required: true
    choices: [settings, start, deployed, benchmark, failed, report, check, restored, tiers]
  host:
    description: With O(step=settings), the host whose server is swept (C(inventory_hostname)).
    type: str
  depths:
    description: With O(step=settings), the speculative depths to measure (C(spec_sweep_depths)).
    type: raw
  baseline:
    description: With O(step=settings), whether to measure without speculative decoding (C(spec_sweep_baseline)).
    type: raw
  adaptive:
    description: With O(step=settings), whether to measure SGLang's adaptive mode (C(spec_sweep_adaptive)).
    type: raw
  adaptive_tiers:
    description: With O(step=settings), whether to measure a tier table from the best per load (C(spec_sweep_adaptive_tiers)).
    type: raw
  concurrency:
    description: With O(step=settings), the concurrency levels (C(spec_sweep_concurrency)).
    type: raw
  num_prompts:
    description: With O(step=settings), requests per round (C(spec_sweep_num_prompts)).
    type: raw
  input_len:
    description: With O(step=settings), prompt words (C(spec_sweep_input_len)).
    type: raw
  output_len:
    description: With O(step=settings), output tokens (C(spec_sweep_output_len)).
    type: raw
  dataset:
    description: With O(step=settings), a prompt file (C(spec_sweep_dataset)); empty or null for generated prompts.
    type: raw
  warmup_requests:
    description: With O(step=settings), warm-up requests (C(spec_sweep_warmup_requests)).
    type: raw
  rounds:
    description: With O(step=settings), rounds per concurrency level (C(spec_sweep_rounds)).
    type: raw
  min_duration:
    description: With O(step=settings), seconds a round lasts at least (C(spec_sweep_min_duration)).
    type: raw
  max_spread:
    description: With O(step=settings), the widest spread of the rounds that still ranks (C(spec_sweep_max_spread)).
    type: raw
  api:
    description: With O(step=settings), the API to benchmark (C(spec_sweep_api)); empty or null for the engine's.
    type: raw
  url:
    description: With O(step=settings), the URL to benchmark (C(spec_sweep_url)); empty or null for the server's.
    type: raw
  benchmark_host:
    description: With O(step=settings), the host that sends the load (C(spec_sweep_benchmark_host)), for the report.
    type: raw
  timeout:
    description: With O(step=settings), the timeout of a request in seconds (C(spec_sweep_timeout)).
    type: raw
  max_failed_ratio:
    description: With O(step=settings), the share of requests that may fail (C(spec_sweep_max_failed_ratio)).
    type: raw
  report_dir:
    description: With O(step=settings), the report folder on the controller (C(spec_sweep_report_dir)).
    type: raw
  engine:
    description: With O(step=settings), the engine (C(sglang_server_engine)); null means V(sglang).
    type: str
  drafter:
    description: With O(step=settings), the drafter (C(sglang_server_speculative_draft_model_path)); null means none.
    type: str
  extra_args:
    description: With O(step=settings), the server's extra arguments (C(sglang_server_extra_args)), a list; null means none.
    type: raw
  model_path:
    description: With O(step=settings), the target model (C(sglang_server_model_path)).
    type: str
  served_model_name:
    description: With O(step=settings), the model name the server serves (C(sglang_server_served_model_name)).
    type: str
  port:
    description: With O(step=settings), the server's port (C(sglang_server_port)); null means 30000.
    type: int
  config_dir:
    description: With O(step=settings), where the tier table is written (C(sglang_server_config_dir)); null means C(/etc/llmops).
    type: str
  server_name:
    description: With O(step=settings), the server's name (C(sglang_server_name)); null means V(main).
    type: str
  router_group:
    description: With O(step=settings), the inventory group of the routers (C(sglang_router_group)); null means V(sglang_routers).
    type: str
  worker_group:
    description: With O(step=settings), the inventory group of the routers' workers (C(sglang_router_worker_group)); null means V(sglang_servers).
    type: str
  simulator:
    description: With O(step=settings), whether the server is the simulator of C(tests/sim) (C(llmops_simulator)).
    type: raw
  api_key:
    description: With O(step=benchmark) or O(step=check), the server's API key (C(sglang_server_api_key)), sent with the requests.
    type: str
  admin_api_key:
    description:
      - With O(step=benchmark) or O(step=check), the server's admin key (C(sglang_server_admin_api_key)), sent only to
        C(/flush_cache), an admin endpoint.
    type: str
    version_added: 1.1.0
  settings:
    description: With every step but V(settings), the result of the step V(settings).
    type: dict
  server_result:
    description:
      - What the C(sglang_server) role reports of the server it last started (C(sglang_server_result)).
      - Its URL is benchmarked unless O(url) was set; with O(step=deployed) it is the candidate's launch, with
        O(step=restored) what runs.
    type: raw
  command:
    description: With O(step=deployed), the launch command of the candidate (C(sglang_server_plan.command)).
    type: raw
  version:
    description: With O(step=failed), the engine version the plan found, for the label of an adaptive candidate.
    type: raw
  candidate:
    description: With O(step=start), V(deployed), V(benchmark), V(failed), the candidate measured; with O(step=check), the best one.
    type: dict
  progress:
    description: With O(step=deployed), V(benchmark), V(failed), what V(start) (then V(deployed)) returned of the candidate.
    type: dict
  failed_result:
    description: With O(step=failed), the failed task's result (C(ansible_failed_result)).
    type: raw
  failed_task:
    description: With O(step=failed), the name of the failed task (C(ansible_failed_task.name)).
    type: raw
  results:
    description: With O(step=report) or O(step=tiers), the records of the candidates measured.
    type: list
    elements: dict
  tiers:
    description: With O(step=report), the result of the step V(tiers), or null where none ran.
    type: dict
  applied:
    description: With O(step=report), the candidate rolled out (C(spec_sweep_applied)), or null.
    type: raw
  restored:
    description: With O(step=report), what the server runs after the restore (C(spec_sweep_restored)), or null.
    type: raw
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
    host: "{{ inventory_hostname }}"
    depths: [16, 10, 5]
    concurrency: [1, 8]
    rounds: 3
    report_dir: /tmp/spec_sweep_report
    drafter: /models/drafter
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
options:
  description: With O(step=settings), the settings the later steps read from O(settings) (never the API key).
  type: dict
  returned: success
chart:
  description: With O(step=report), C(chart.svg), the chart of the sweep (SVG text).
  type: str
  returned: success
'''

from ansible.module_utils.basic import AnsibleModule

RAW_OPTIONS = ('depths', 'baseline', 'adaptive', 'adaptive_tiers', 'concurrency', 'num_prompts', 'input_len', 'output_len',
               'dataset', 'warmup_requests', 'rounds', 'min_duration', 'max_spread', 'api', 'url', 'benchmark_host', 'timeout',
               'max_failed_ratio', 'report_dir', 'extra_args', 'simulator', 'server_result', 'command', 'version', 'failed_result',
               'failed_task', 'applied', 'restored')

ARGUMENT_SPEC = dict(
    step=dict(type='str', required=True, choices=['settings', 'start', 'deployed', 'benchmark', 'failed', 'report', 'check', 'restored', 'tiers']),
    host=dict(type='str'),
    engine=dict(type='str'),
    drafter=dict(type='str'),
    model_path=dict(type='str'),
    served_model_name=dict(type='str'),
    port=dict(type='int'),
    config_dir=dict(type='str'),
    server_name=dict(type='str'),
    router_group=dict(type='str'),
    worker_group=dict(type='str'),
    api_key=dict(type='str', no_log=True),
    admin_api_key=dict(type='str', no_log=True),
    settings=dict(type='dict'),
    candidate=dict(type='dict'),
    progress=dict(type='dict'),
    results=dict(type='list', elements='dict'),
    tiers=dict(type='dict'),
    **dict((name, dict(type='raw')) for name in RAW_OPTIONS)
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.spec_sweep_step runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
