#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: sglang_server
short_description: Plan one SGLang (or vLLM) server and write its launch files
version_added: 1.1.0
description:
  - Runs on the controller (its action plugin); the C(sglang_server) role runs it with every role option passed
    by name. A null option is unset (the role's default is filled in by the role).
  - With O(state=planned) (changes nothing, on any host) refuses, naming the host and the variable, before anything
    on the host is touched, a host missing from its own O(group_hosts), a O(tp_size) that is not a multiple of the
    group's hosts or needs more GPUs than O(gpus) or C(CUDA_VISIBLE_DEVICES) of O(env) names, those two naming
    different GPUs or one GPU twice, and launch settings the launch command refuses whatever the release. Then runs
    M(llmops.serving.sglang_launch_check) on the host and refuses a model or drafter path that does not exist there
    and flags the installed release does not have; reads the state of the process (M(llmops.serving.server_process))
    or of the unit; renders the launch files on the controller from the role's templates and compares them with the
    host's (M(llmops.serving.launch_files) in check mode); and returns the plan with the decision, RV(plan.action).
    Three module runs on the host.
  - With O(state=present) renders the launch files of O(plan) and writes them, in one M(llmops.serving.launch_files)
    run - the configuration and log directories, the environment file, the API key file (O(api_key); removed
    without a key), the admin key file (O(admin_api_key); removed without one), the shim and the unit or launch
    script.
  - With O(state=started) or O(state=restarted) also creates the server's user where the plan found it missing
    (M(ansible.builtin.user)) and starts or restarts the server, detached (M(llmops.serving.server_process)) or
    through its unit (M(ansible.builtin.systemd_service), enabled), and returns its PID (RV(pid)).
  - With O(state=stopped) stops the server and its whole process tree, whichever launcher started it (O(launcher)
    empty - both) - the process-launched server and every process of its session (M(llmops.serving.server_process)),
    and the unit, stopped and disabled, where its file exists.
  - With O(state=status) (changes nothing) reads whether the server runs (M(llmops.serving.server_process), and the
    unit where its file exists) and what it says of itself (M(llmops.serving.llm_server_info)).
  - The environment file and the key files are secrets of M(llmops.serving.launch_files) - never shown in a
    diff - and the server's environment is never part of the result.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.controller_action
attributes:
  check_mode:
    details: O(state=planned) changes nothing; O(state=present) reports the files that would change and changes nothing.
    support: full
  diff_mode:
    details: With O(state=present), the diff of M(llmops.serving.launch_files); the secrets' content is replaced by a placeholder.
    support: full
  idempotent:
    support: full
options:
  state:
    description:
      - V(planned) plans the server and changes nothing (RV(plan)); V(present) writes the launch files of O(plan).
      - V(started) also starts or restarts the server as O(plan) decided (RV(plan.action)), V(restarted) restarts it in
        any case; V(stopped) stops it (no O(plan) needed); V(status) reads its state (RV(status)).
    type: str
    choices: [planned, present, started, restarted, stopped, status]
    default: planned
  plan:
    description:
      - The plan of an earlier O(state=planned) run (its RV(plan)); required unless O(state=planned).
      - A plan with C(restored=true) (the role's rollback, whose launch files M(llmops.serving.last_good_config) put
        back) writes no launch file and reloads systemd before the restart.
    type: dict
  restored:
    description:
      - With O(state=planned), the result of M(llmops.serving.last_good_config) with C(state=restored) (a rollback) - the
        plan is that record's launcher, command, version and depth, with the group's layout and the names of the unit
        and launch files, RV(plan.action) V(restart) and C(restored=true); nothing on the host is read.
      - RV(outcome) says what the rollback's result is before its restart; where nothing was put back RV(plan) is empty.
    type: dict
  smoke:
    description:
      - Whether the health check after a start sends a smoke request (RV(plan.smoke)); V(true) when null.
    type: bool
  min_accept_length:
    description:
      - The acceptance floor of the health check after a start, with a drafter (RV(plan.min_accept_length)).
    type: float
  rollback_reason:
    description: With O(restored), why the rollback runs, the start of RV(outcome.reason).
    type: str
  stop_timeout:
    description: Seconds between C(SIGTERM) and C(SIGKILL) when the server stops (M(llmops.serving.server_process)); 60 when null.
    type: float
  restart:
    description: Restart the server even where nothing changed (V(false) when null).
    type: bool
  shim:
    description: Path of the launcher shim on the host, the first argument of the launch command (C(<config_dir>/llmops_launch.py) when null).
    type: path
  engine:
    description: The role variable C(sglang_server_engine) (see the C(sglang_server) role's argument specification); V(sglang) when null.
    type: str
    choices: [sglang, vllm]
  model_path:
    description: The role variable C(sglang_server_model_path) (see the C(sglang_server) role's argument specification).
    type: str
  served_model_name:
    description: The role variable C(sglang_server_served_model_name) (see the C(sglang_server) role's argument specification); V('') when null.
    type: str
  tp_size:
    description: The role variable C(sglang_server_tp_size) (see the C(sglang_server) role's argument specification); V(8) when null.
    type: int
  dist_timeout:
    description: The role variable C(sglang_server_dist_timeout) (see the C(sglang_server) role's argument specification).
    type: int
  host:
    description: The role variable C(sglang_server_host) (see the C(sglang_server) role's argument specification); V(127.0.0.1) when null.
    type: str
  port:
    description: The role variable C(sglang_server_port) (see the C(sglang_server) role's argument specification); V(30000) when null.
    type: int
  mem_fraction_static:
    description: The role variable C(sglang_server_mem_fraction_static) (see the C(sglang_server) role's argument specification).
    type: float
  max_running_requests:
    description: The role variable C(sglang_server_max_running_requests) (see the C(sglang_server) role's argument specification).
    type: int
  cuda_graph_max_bs:
    description: The role variable C(sglang_server_cuda_graph_max_bs) (see the C(sglang_server) role's argument specification).
    type: int
  enable_metrics:
    description: The role variable C(sglang_server_enable_metrics) (see the C(sglang_server) role's argument specification); V(true) when null.
    type: bool
  trust_remote_code:
    description: The role variable C(sglang_server_trust_remote_code) (see the C(sglang_server) role's argument specification); V(false) when null.
    type: bool
  extra_args:
    description: The role variable C(sglang_server_extra_args) (see the C(sglang_server) role's argument specification); V([]) when null.
    type: raw
  speculative_algorithm:
    description: The role variable C(sglang_server_speculative_algorithm) (see the C(sglang_server) role's argument specification); V(EAGLE3) when null.
    type: str
  speculative_draft_model_path:
    description: The role variable C(sglang_server_speculative_draft_model_path) (see the C(sglang_server) role's argument specification); V('') when null.
    type: str
  speculative_depth:
    description: The role variable C(sglang_server_speculative_depth) (see the C(sglang_server) role's argument specification).
    type: int
  speculative_num_steps:
    description: The role variable C(sglang_server_speculative_num_steps) (see the C(sglang_server) role's argument specification).
    type: int
  speculative_eagle_topk:
    description: The role variable C(sglang_server_speculative_eagle_topk) (see the C(sglang_server) role's argument specification).
    type: int
  speculative_num_draft_tokens:
    description: The role variable C(sglang_server_speculative_num_draft_tokens) (see the C(sglang_server) role's argument specification).
    type: int
  speculative_adaptive:
    description: The role variable C(sglang_server_speculative_adaptive) (see the C(sglang_server) role's argument specification); V(false) when null.
    type: bool
  speculative_adaptive_config:
    description: The role variable C(sglang_server_speculative_adaptive_config) (see the C(sglang_server) role's argument specification); V('') when null.
    type: str
  group_hosts:
    description: The role variable C(sglang_server_group_hosts) (see the C(sglang_server) role's argument specification); V([]) when null.
    type: list
    elements: str
  dist_init_port:
    description: The role variable C(sglang_server_dist_init_port) (see the C(sglang_server) role's argument specification); V(20000) when null.
    type: int
  gpus:
    description: The role variable C(sglang_server_gpus) (see the C(sglang_server) role's argument specification); V([]) when null.
    type: list
    elements: str
  env:
    description: The role variable C(sglang_server_env) (see the C(sglang_server) role's argument specification); V({}) when null.
    type: dict
  python:
    description: The role variable C(sglang_server_python) (see the C(sglang_server) role's argument specification); V(/usr/bin/python3) when null.
    type: path
  launcher:
    description: The role variable C(sglang_server_launcher) (see the C(sglang_server) role's argument specification); V('') when null.
    type: str
    choices: ['', systemd, process]
  help_cache_dir:
    description: The role variable C(sglang_server_help_cache_dir) (see the C(sglang_server) role's argument specification).
    type: str
  name:
    description: The role variable C(sglang_server_name) (see the C(sglang_server) role's argument specification); V(main) when null.
    type: str
  config_dir:
    description: The role variable C(sglang_server_config_dir) (see the C(sglang_server) role's argument specification); V(/etc/llmops) when null.
    type: path
  run_dir:
    description: The role variable C(sglang_server_run_dir) (see the C(sglang_server) role's argument specification); V(/run/llmops) when null.
    type: path
  user:
    description: The role variable C(sglang_server_user) (see the C(sglang_server) role's argument specification).
    type: str
  user_home:
    description: The role variable C(sglang_server_user_home) (see the C(sglang_server) role's argument specification); V(/var/lib/sglang) when null.
    type: path
  state_dir:
    description: The role variable C(sglang_server_state_dir) (see the C(sglang_server) role's argument specification); V(/var/lib/llmops/last-good) when null.
    type: path
  user_groups:
    description: The role variable C(sglang_server_user_groups) (see the C(sglang_server) role's argument specification); V([]) when null.
    type: list
    elements: str
  api_key:
    description: The role variable C(sglang_server_api_key) (see the C(sglang_server) role's argument specification); V('') when null.
    type: str
  admin_api_key:
    description:
      - The role variable C(sglang_server_admin_api_key) (see the C(sglang_server) role's argument specification); V('') when null.
      - The key of the server's admin endpoints (SGLang C(--admin-api-key)), which the launcher shim reads from a
        0600 file and passes to the server, never on a command line. O(state=planned) refuses it for an engine or
        release without C(--admin-api-key), naming the host.
    type: str
    version_added: 1.1.0
  log_path:
    description:
      - The role variable C(sglang_server_log_path) (see the C(sglang_server) role's argument specification).
      - C(/var/log/llmops/sglang-<name>.log) when null.
    type: path
  nccl_port:
    description:
      - The role variable C(sglang_server_nccl_port) (see the C(sglang_server) role's argument specification),
        C(--nccl-port); null leaves SGLang's (a random free port).
      - Two servers on one host need distinct ports (M(llmops.serving.fleet_preflight) refuses a clash).
    type: int
    version_added: 1.1.0
  disaggregation_mode:
    description:
      - The role variable C(sglang_server_disaggregation_mode) (see the C(sglang_server) role's argument specification),
        C(--disaggregation-mode) - V(prefill) or V(decode); null is a server that does both prefill and decode.
      - Any other value is refused.
    type: str
    version_added: 1.1.0
  disaggregation_transfer_backend:
    description:
      - The role variable C(sglang_server_disaggregation_transfer_backend), C(--disaggregation-transfer-backend); null
        leaves the release's default, V(mooncake). One of V(mooncake), V(mooncake_tcp), V(nixl), V(fake).
      - V(mooncake_tcp) needs SGLang 0.5.13 or newer (the release sets C(MC_FORCE_TCP=1) itself); V(fake) moves no KV
        and is refused on a prefill. A backend the installed release lacks is refused, naming the release.
    type: str
    version_added: 1.1.0
  disaggregation_bootstrap_port:
    description:
      - The role variable C(sglang_server_disaggregation_bootstrap_port), C(--disaggregation-bootstrap-port) of a prefill
        (where the decode servers reach it); V(8998) when null. Not passed to a decode.
    type: int
    version_added: 1.1.0
  disaggregation_ib_device:
    description: The role variable C(sglang_server_disaggregation_ib_device), C(--disaggregation-ib-device); null lets SGLang detect them.
    type: str
    version_added: 1.1.0
  disaggregation_kv_checksum:
    description:
      - The role variable C(sglang_server_disaggregation_kv_checksum), C(--disaggregation-enable-kv-checksum) (SGLang
        0.5.21 or newer); V(false) when null.
    type: bool
    version_added: 1.1.0
  tls_cert:
    description:
      - The role variable C(sglang_server_tls_cert), the path B(on the controller) of the server's certificate (PEM);
        the server then serves HTTPS (C(--ssl-certfile), C(--ssl-keyfile)); its certificate installed as
        C(<config_dir>/sglang-<name>.tls.crt).
      - Unset (null or V('')) serves plain HTTP.
    type: path
    version_added: 1.1.0
  tls_key:
    description:
      - The role variable C(sglang_server_tls_key), the path on the controller of the certificate's private key
        (PEM, unencrypted), installed as C(<config_dir>/sglang-<name>.tls.key), mode 0600, owned by the server's
        user. Its content never appears in output or diffs.
    type: path
    version_added: 1.1.0
  tls_ca_cert:
    description:
      - The role variable C(llmops_tls_ca_cert), the path on the controller of the CA certificate (PEM) that signed
        O(tls_cert), installed as C(<config_dir>/sglang-<name>.ca.crt) and passed as C(--ssl-ca-certs); the health
        checks on the host verify the server with it (the plan's C(ca_path)).
      - The plan refuses a certificate that this CA did not sign, or a key that is not the certificate's.
    type: path
    version_added: 1.1.0
  tls_refresh:
    description:
      - The role variable C(sglang_server_tls_refresh), C(--enable-ssl-refresh); SGLang reloads the certificate and
        key when their files change, without a restart.
      - Default V(false).
    type: bool
    version_added: 1.1.0
notes:
  - The role's options are documented in the C(sglang_server) role's argument specification.
seealso:
  - module: llmops.serving.launch_files
  - module: llmops.serving.sglang_launch_check
  - module: llmops.serving.server_process
'''

EXAMPLES = r'''
- name: Plan the server of this host
  llmops.serving.sglang_server:
    state: planned
    engine: sglang
    model_path: /srv/models/Llama-3.1-8B-Instruct
    tp_size: 1
    port: 30000
    speculative_draft_model_path: /srv/models/EAGLE3-LLaMA3.1-Instruct-8B
  register: planned

- name: Show what would run
  ansible.builtin.debug:
    msg: "{{ planned.plan.action }}: {{ planned.plan.command | llmops.serving.shell_join }}"

- name: Write the launch files where the plan found a difference
  llmops.serving.sglang_server:
    state: present
    plan: "{{ planned.plan }}"
    engine: sglang
    model_path: /srv/models/Llama-3.1-8B-Instruct
  when: planned.plan.files_changed
'''

RETURN = r'''
plan:
  description: The server's plan.
  type: dict
  returned: with O(state=planned)
  contains:
    launcher:
      description: C(systemd) or C(process).
      type: str
    version:
      description: The installed engine's version.
      type: str
      sample: 0.5.15.post1
    command:
      description: The launch command (the API key is not part of it).
      type: list
      elements: str
    speculative:
      description: The speculative settings that really run (adaptive included), P(llmops.serving.speculative_settings#filter).
      type: dict
    model_config:
      description: The model's C(config.json) where the model is a folder on the host, else empty.
      type: dict
    gpus:
      description: The GPUs (index or UUID) the server uses on this host.
      type: list
      elements: str
      sample: ['0', '1', '2', '3']
    gpus_from:
      description: The setting that chose them, for messages.
      type: str
      sample: sglang_server_tp_size 4 on the GPUs of sglang_server_gpus
    group:
      description: The hosts of this host's multi-node group, rank 0 first; empty without one.
      type: list
      elements: str
    nnodes:
      description: Hosts of the group (1 without one).
      type: int
    node_rank:
      description: This host's rank in its group (0 without one).
      type: int
    dist_init_addr:
      description: The group's rendezvous address (rank 0's inventory address and C(sglang_server_dist_init_port)); empty without a group.
      type: str
    unit:
      description: The server's systemd unit, C(llmops-sglang-<sglang_server_name>.service) .
      type: str
    unit_file:
      description: The unit's file, in C(/etc/systemd/system).
      type: str
    env_file:
      description: The server's environment file, in C(sglang_server_config_dir).
      type: str
    script:
      description: The launch script of the process launcher, in C(sglang_server_config_dir).
      type: str
    shim:
      description: The launcher shim, in C(sglang_server_config_dir).
      type: str
    api_key_file:
      description: The file the shim reads the API key from, in C(sglang_server_config_dir) (there only with a key).
      type: str
    admin_api_key_file:
      description: The file the shim reads the admin key from, in C(sglang_server_config_dir) (there only with an admin key).
      type: str
      version_added: 1.1.0
    pidfile:
      description: The pidfile of the process launcher, in C(sglang_server_run_dir).
      type: str
    url:
      description: Where the server answers on its host (P(llmops.serving.local_url#filter) of C(sglang_server_host) and C(sglang_server_port)).
      type: str
    switch_user:
      description: Whether the server runs as C(sglang_server_user) rather than root.
      type: bool
    home:
      description: The home of the user the server runs as (C(sglang_server_user_home), else C(/root)).
      type: str
    templates:
      description: The launch files rendered from the role's templates besides the environment file, the shim and the unit or the script.
      type: list
      elements: dict
      sample: [{src: llmops_launch.py.j2, dest: /etc/llmops/llmops_launch.py, mode: '0755'}]
    last_good:
      description:
        - The last good record these launch files, command and drafter make (M(llmops.serving.last_good_config)'s
          C(name), C(state_dir), C(files), C(fingerprints) and C(metadata)); the API key file is not part of it.
      type: dict
    running:
      description: Whether the server runs (the pidfile of the process launcher, else the unit's state).
      type: bool
    pid:
      description: The server's PID where it runs.
      type: int
    enabled:
      description: Whether the unit is enabled (always true with the process launcher).
      type: bool
    files_changed:
      description: Whether a launch file differs from the host's.
      type: bool
    changed_files:
      description: The launch files that differ from the host's (M(llmops.serving.launch_files) in check mode).
      type: list
      elements: str
    users_to_fix:
      description: The server's user where it does not exist or is not in one of its groups.
      type: list
      elements: str
    last_good_current:
      description: Whether the last good record already holds these files, the launch command and the drafter.
      type: bool
    previous_version:
      description: The version of the newest last good record (the summary's "from"), null without one.
      type: str
    smoke:
      description: The health check's smoke request, C(generate) (SGLang's native API), C(completions) or C(none) (O(smoke) false).
      type: str
    min_accept_length:
      description: O(min_accept_length) where O(speculative_draft_model_path) is set, else null.
      type: float
    disaggregation:
      description:
        - The server's part in prefill/decode disaggregation - C(mode) (V(prefill), V(decode) or null),
          C(transfer_backend) (the one that runs, V(mooncake) where unset) and C(bootstrap_port) (a prefill's, else null).
      type: dict
      version_added: 1.1.0
      sample: {mode: prefill, transfer_backend: mooncake_tcp, bootstrap_port: 8998}
    previous_command:
      description: The launch command of the newest last good record (what the server last passed its checks with); empty without one.
      type: list
      elements: str
      version_added: 1.1.0
    action:
      description:
        - V(start) where the server does not run, V(restart) where a launch file changed or O(restart) is set,
          else V(none).
      type: str
      choices: [none, start, restart]
missing_paths:
  description: The model or drafter settings whose path does not exist on the host, and the path.
  type: dict
  returned: when one is missing
  sample: {sglang_server_model_path: /srv/models/gone}
changed_files:
  description: The paths created, rewritten or removed; in check mode those that would be (M(llmops.serving.launch_files)).
  returned: unless O(state=planned)
  type: list
  elements: str
  sample: [/etc/llmops/sglang-main.sh]
users_to_fix:
  description: The server's user where it does not exist or is not in one of its groups.
  returned: with O(state=present)
  type: list
  elements: str
  sample: [sglang]
status:
  description: With O(state=status), the server's state.
  returned: with O(state=status)
  type: dict
  contains:
    running:
      description: Whether the server runs (its pidfile, else its unit is active).
      type: bool
    pid:
      description: Its PID (the pidfile's, else the unit's main PID), null where it does not run.
      type: int
    healthy:
      description: Whether it answered its health check.
      type: bool
    unauthorized:
      description: Whether it refused the request for its info (the API key is missing or wrong).
      type: bool
    version:
      description: The version it reports.
      type: str
    depth:
      description: The speculative depth it runs.
      type: int
    adaptive:
      description: Whether it runs adaptive speculation.
      type: bool
    accept_length:
      description: Its acceptance length.
      type: float
    accept_length_source:
      description: Where the acceptance length comes from (M(llmops.serving.llm_server_info)).
      type: str
    msg:
      description: What M(llmops.serving.llm_server_info) said.
      type: str
outcome:
  description: With O(restored), what the rollback's result is before its restart.
  returned: with O(restored)
  type: dict
  contains:
    state:
      description: C(rolled_back) where a record was put back, else C(failed) (the server is left stopped).
      type: str
    record:
      description: The record M(llmops.serving.last_good_config) selected (its C(selected)), else empty.
      type: dict
    reason:
      description: O(rollback_reason), with why the server is left stopped where nothing was put back.
      type: str
started:
  description: Whether the server was started or restarted (in check mode, would be).
  returned: with O(state=started) or O(state=restarted)
  type: bool
pid:
  description: The server's PID (the unit's main PID with systemd); the plan's where nothing started.
  returned: with O(state=started) or O(state=restarted)
  type: int
process_pid:
  description: RV(pid) with the process launcher, else null (M(llmops.serving.wait_for_llm_health)'s O(llmops.serving.wait_for_llm_health#module:pid)).
  returned: with O(state=started) or O(state=restarted)
  type: int
systemd_unit:
  description:
    - The unit with the systemd launcher, else null
      (M(llmops.serving.wait_for_llm_health)'s O(llmops.serving.wait_for_llm_health#module:systemd_unit)).
  returned: with O(state=started) or O(state=restarted)
  type: str
launcher:
  description: The plan's launcher, C(systemd) or C(process).
  returned: with O(state=started) or O(state=restarted)
  type: str
'''

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    state=dict(type='str', choices=['planned', 'present', 'started', 'restarted', 'stopped', 'status'], default='planned'),
    plan=dict(type='dict'),
    restart=dict(type='bool'),
    shim=dict(type='path'),
    stop_timeout=dict(type='float'),
    restored=dict(type='dict'),
    rollback_reason=dict(type='str'),
    smoke=dict(type='bool'),
    min_accept_length=dict(type='float'),
    engine=dict(type='str', choices=['sglang', 'vllm']),
    model_path=dict(type='str'),
    served_model_name=dict(type='str'),
    tp_size=dict(type='int'),
    dist_timeout=dict(type='int'),
    host=dict(type='str'),
    port=dict(type='int'),
    mem_fraction_static=dict(type='float'),
    max_running_requests=dict(type='int'),
    cuda_graph_max_bs=dict(type='int'),
    enable_metrics=dict(type='bool'),
    trust_remote_code=dict(type='bool'),
    extra_args=dict(type='raw'),
    speculative_algorithm=dict(type='str'),
    speculative_draft_model_path=dict(type='str'),
    speculative_depth=dict(type='int'),
    speculative_num_steps=dict(type='int'),
    speculative_eagle_topk=dict(type='int'),
    speculative_num_draft_tokens=dict(type='int', no_log=False),
    speculative_adaptive=dict(type='bool'),
    speculative_adaptive_config=dict(type='str'),
    group_hosts=dict(type='list', elements='str'),
    dist_init_port=dict(type='int'),
    gpus=dict(type='list', elements='str'),
    env=dict(type='dict'),
    python=dict(type='path'),
    launcher=dict(type='str', choices=['', 'systemd', 'process']),
    help_cache_dir=dict(type='str'),
    name=dict(type='str'),
    config_dir=dict(type='path'),
    run_dir=dict(type='path'),
    user=dict(type='str'),
    user_home=dict(type='path'),
    state_dir=dict(type='path'),
    user_groups=dict(type='list', elements='str'),
    api_key=dict(type='str', no_log=True),
    admin_api_key=dict(type='str', no_log=True),
    log_path=dict(type='path'),
    nccl_port=dict(type='int'),
    disaggregation_mode=dict(type='str'),
    disaggregation_transfer_backend=dict(type='str'),
    disaggregation_bootstrap_port=dict(type='int'),
    disaggregation_ib_device=dict(type='str'),
    disaggregation_kv_checksum=dict(type='bool'),
    tls_cert=dict(type='path'),
    tls_key=dict(type='path', no_log=False),
    tls_ca_cert=dict(type='path'),
    tls_refresh=dict(type='bool'),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg='llmops.serving.sglang_server runs on the controller (its action plugin)')


if __name__ == '__main__':
    main()
