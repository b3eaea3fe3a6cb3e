#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_server_benchmark
short_description: The sglang_server role's short fixed benchmark of its server, in rounds
version_added: 1.1.0
description:
  - Runs in the C(sglang_server) role (C(tasks_from=benchmark_rounds)), which the C(deploy) role's canary gate runs
    before and after a change.
  - Reads the role's options once and runs M(llmops.serving.llm_benchmark) on the host C(sglang_server_benchmark_rounds)
    times against the server (C(sglang_server_host), C(sglang_server_port)), each round
    C(sglang_server_benchmark_num_prompts) requests of C(sglang_server_benchmark_input_len) words and
    C(sglang_server_benchmark_output_len) tokens at one concurrency level (C(sglang_server_benchmark_concurrency), as
    many warm-up requests), through SGLang's native API (its prefix cache flushed first) or the OpenAI-compatible one,
    with C(sglang_server_served_model_name) and C(sglang_server_api_key) where set.
  - Fails when a request of a round failed (each round runs all the same); the rounds are returned either way.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
attributes:
  check_mode:
    details: Sends requests; skip the task in check mode.
    support: none
  diff_mode:
    details: Changes no configuration.
    support: none
  idempotent:
    details: Never reports a change.
    support: full
options: {}
notes:
  - The role's options are documented in the C(sglang_server) role's argument specification.
seealso:
  - module: llmops.serving.llm_benchmark
author:
  - llmops.serving contributors (@llmops)
'''

EXAMPLES = r'''
- name: Benchmark the server of this host
  llmops.serving.sglang_server_benchmark:
  register: benchmark
  when: not ansible_check_mode

- name: Output throughput of each round
  ansible.builtin.debug:
    msg: "{{ benchmark.rounds | map(attribute='runs') | map('first') | map(attribute='output_throughput') }}"
'''

RETURN = r'''
rounds:
  description: The result of M(llmops.serving.llm_benchmark) of each round, in order.
  returned: always
  type: list
  elements: dict
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False)
    module.fail_json(msg='llmops.serving.sglang_server_benchmark runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
