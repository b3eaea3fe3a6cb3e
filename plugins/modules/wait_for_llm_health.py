#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: wait_for_llm_health
short_description: Wait until an SGLang or vLLM server is ready, or say why it is not
version_added: 1.0.0
description:
  - Polls the server's health endpoint every O(interval) seconds on the managed host,
    follows its log (a file from a byte offset, or the systemd journal of a unit) and
    watches its process (PID, pidfile or systemd unit), and returns as soon as the server
    is ready, its process has exited (C(crashed)), a fatal line appeared in its log
    (C(fatal_log)), nothing progressed for O(stall_timeout) seconds (C(stalled)) or
    O(timeout) has passed (C(timeout)).
  - The process and the log are checked every 0.1 s, so a crash is reported within about
    a second whatever O(interval) is.
  - The action plugin of the same name runs this module in slices of O(heartbeat_interval)
    seconds, carrying the log offset and the phases seen between slices, and prints a
    heartbeat per host after each slice (elapsed time, startup phase, health, and the new
    log lines since the previous heartbeat).
  - Health answers are told apart. Connection refused means not listening yet (imports,
    weight loading, CUDA graph capture); HTTP 503 means SGLang's warm-up request has not
    finished, unless the server had already answered healthy, when it means that SGLang's
    1-token health generation timed out (busy or stuck, not starting) on V(/health), or that
    the server is paused, shutting down or unhealthy on V(/ready); other 5xx, other
    answers (wrong O(health_path) or API key), timeouts and TLS errors are reported as such.
  - Startup phases are recognised from SGLang and vLLM log lines (matched loosely, since
    versions reword them) and from the health answers. Each phase is listed once, when it
    first began (SGLang initialises and loads the drafter after the target), and the
    current phase never goes back. C(compile) is vLLM's torch.compile, only when it runs
    (not on V(--enforce-eager) starts).
  - A failure message lists the exception lines that ended the tracebacks in the log
    (such as C(ValueError) and its message), so the cause shows even when the traceback is long.
  - After the server is ready, O(smoke) sends one real generation and checks it produced
    tokens; O(min_accept_length) then fails the task when speculative decoding is on and
    the drafter's acceptance length is below the floor (a drafter that loaded with the wrong
    tensor names serves at about 1.0).
  - Works with C(delegate_to=localhost) for a remote URL; leave the log and process
    options unset then.
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.server_api
  - llmops.serving.server_api.http
attributes:
  check_mode:
    support: none
    details: In check mode the task is skipped; the server is not probed.
  diff_mode:
    support: none
    details: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    details: Only reads; RV(ignore:changed) is always false.
  action:
    support: full
    description: An action plugin runs the module repeatedly and prints heartbeats.
    details: Heartbeats are printed between runs of the module.
  async:
    support: none
    description: Supports being used with the C(async) keyword.
    details: Heartbeats need the action plugin to wait; do not use C(async).
  platform:
    support: full
    platforms: posix
    description: Target OS/families that can be operated against.
    details: Process and log watching read C(/proc), files and C(journalctl) on Linux.
options:
  health_path:
    description:
      - Path of the endpoint that says the server is ready. SGLang's V(/health_generate) also runs a generation.
      - Default (unset) V(/ready) where the server has it, else V(/health). SGLang has V(/ready) from 0.5.20 on
        (200 once the warm-up request has passed and the server is neither paused nor shutting down; no API key
        needed); its V(/health) answers 200 only after a 1-token generation. V(/ready) is asked first; an answer
        that shows the route is not there (404 from SGLang before 0.5.20, vLLM or the stand-in server of a
        multi-node rank >= 1; 401 or 403 from SGLang before 0.5.20 with an API key and none sent) switches to
        V(/health) for the rest of the wait, with a note in RV(notes). Connection refused and 503 decide nothing.
        This needs no version, so it also holds for a server whose version is unknown or not SGLang.
    type: str
  timeout:
    description: Overall deadline in seconds (wall clock, not a number of tries).
    type: float
    default: 900.0
  interval:
    description: Seconds between health probes (start to start).
    type: float
    default: 1.0
  stall_timeout:
    description:
      - Fail with status C(stalled) when neither the log nor the health answer has changed
        for this many seconds (a hung start). V(0) disables the check.
      - Only active when a log is followed (O(log_path) or O(systemd_unit)); without a log,
        only O(timeout) applies.
      - SGLang prints progress bars while loading weights and capturing CUDA graphs, so
        300 s of silence is a hang; raise it for engines that compile silently for longer.
    type: float
    default: 300.0
  heartbeat_interval:
    description:
      - Seconds between heartbeat lines printed on the controller (one per host). Each
        heartbeat is one module run over the connection, so values under a few seconds
        cost more than they show.
    type: float
    default: 60.0
  log_path:
    description:
      - Log file of the server to follow (stdout and stderr of the launcher). A missing file
        is reported in heartbeats and as a warning; rotation (another file at the path) and
        truncation are detected.
      - Takes precedence over the journal of O(systemd_unit) for the log.
    type: path
  log_start:
    description:
      - Where to start reading O(log_path) on the first slice. V(beginning) sees the lines
        written before the task started (use it when the log is truncated at each start);
        V(end) ignores them (use it for a log appended to across restarts).
    type: str
    default: beginning
    choices: [beginning, end]
  systemd_unit:
    description:
      - systemd unit running the server. Its main process is watched (the exit code comes
        from C(ExecMainStatus)); without O(log_path), its journal for the current
        invocation is followed.
    type: str
  log_lines:
    description: Most new log lines one heartbeat shows, and the length of RV(log_tail).
    type: int
    default: 20
  pid:
    description: PID of the server process to watch.
    type: int
  pidfile:
    description:
      - File holding the PID of the server process; read again at every check, so it may
        appear after the task started. A changed PID counts as a restart (crash).
    type: path
  fatal_patterns:
    description:
      - Python regular expressions; a log line matching one means the start failed.
        Replaces the defaults when set (see O(extra_fatal_patterns) to add to them).
      - 'The defaults match: C(CUDA out of memory), C(OutOfMemoryError), C(Traceback),
        C(Initialization failed), C(memory capacity is unbalanced), C(Not enough memory),
        C(KeyError), C(Received sigquit from a child process), C(Scheduler hit an exception),
        vLLM C(Engine core initialization failed), argparse errors
        (C(: error: unrecognized arguments)), NCCL errors, C(Fatal Python error),
        C(Segmentation fault).'
    type: list
    elements: str
  extra_fatal_patterns:
    description: Regular expressions added to O(fatal_patterns) (or to the defaults).
    type: list
    elements: str
    default: []
  success_threshold:
    description: Consecutive healthy probes needed before the server counts as ready.
    type: int
    default: 1
  smoke:
    description:
      - After ready, send one real generation. V(generate) uses SGLang's native
        C(/generate) (its C(meta_info) gives the acceptance length); V(completions) uses the
        OpenAI C(/v1/completions) (SGLang and vLLM).
      - The smoke fails when the answer has no tokens. Empty text with tokens only warns
        (a model whose output decodes to special tokens).
    type: str
    default: none
    choices: [none, completions, generate]
  smoke_model:
    description: Model name for O(smoke=completions); default the first of C(/v1/models).
    type: str
  smoke_prompt:
    description: Prompt of the smoke request (greedy decoding).
    type: str
    default: The capital of France is
  smoke_max_tokens:
    description: Tokens the smoke request generates.
    type: int
    default: 32
  smoke_timeout:
    description: Seconds the smoke request may take.
    type: float
    default: 120.0
  warm_sampled:
    description:
      - After the smoke, send one sampled request (temperature 1.0, 4 tokens) and wait for it, so that
        what only a sampled request uses is built before the server takes traffic.
      - SGLang 0.5.15.post1 with EAGLE-3 builds FlashInfer's sampling module (C(nvcc), minutes) on the
        first sampled request when its JIT cache has none, and answers nothing, C(/health) included,
        meanwhile (seen on an H200). Greedy smoke and benchmark requests never take that path.
      - Needs O(smoke). The time it took is RV(warm_sampled.seconds); with the JIT cache warm it is that of
        a short request. On by default, since a server that stalls at its first sampled request is not ready
        to serve; the role C(sglang_server) relies on this default.
    type: bool
    default: true
  warm_sampled_timeout:
    description: Seconds the O(warm_sampled) request may take (a cold FlashInfer build included).
    type: float
    default: 600.0
  min_accept_length:
    description:
      - With speculative decoding on, fail when the acceptance length (tokens per
        verification step) measured for the smoke request is below this floor. A healthy
        EAGLE-3 drafter gives well above 1.5; one with dropped weights about 1.0.
      - Taken from C(/generate)'s C(meta_info), else from C(/metrics) around the request
        (vLLM C(spec_decode_num_accepted_tokens_total) / C(num_drafts_total) deltas), else
        C(/server_info) C(internal_states[0].avg_spec_accept_length) (may be null),
        else SGLang's C(sglang:spec_accept_length) gauge.
      - Needs O(smoke). Skipped when the server reports speculative decoding off, and on a prefill server
        (O(disaggregation_mode=prefill)), which generates no speculative tokens (acceptance shows on the decode);
        fails when it cannot be measured.
    type: float
  disaggregation_mode:
    description:
      - The server's prefill/decode disaggregation mode (SGLang C(--disaggregation-mode)), V(prefill) or V(decode);
        null (the default) is a server that does both.
      - SGLang refuses a generation sent straight to a prefill or decode server (not through the router) without a
        C(bootstrap_room) (HTTP 400, C(Disaggregated request received without bootstrap room id)). With V(prefill)
        or V(decode), every request this module sends (O(smoke), O(warm_sampled)) carries
        C(bootstrap_host=2.2.2.2) (SGLang's fake bootstrap host, as its own C(/health_generate) sends) and a random
        C(bootstrap_room), so that it runs on that server alone, without a peer.
      - Any other value is refused (an empty string counts as null).
    type: str
    version_added: 1.1.0
notes:
  - Polls locally on the managed host, so O(interval=1) costs no connection round trips.
  - The exit code of a PID that is not the module's child is known only while it is a
    zombie; with O(systemd_unit) it always is.
seealso:
  - module: llmops.serving.drafter_checkpoint
  - module: ansible.builtin.wait_for
"""

EXAMPLES = r"""
- name: Wait for SGLang started as a systemd unit, then check real output and the drafter
  llmops.serving.wait_for_llm_health:
    url: http://127.0.0.1:30000
    systemd_unit: sglang.service
    smoke: generate
    min_accept_length: 1.5
    heartbeat_interval: 30

- name: Wait for a server started with a pidfile and a log file
  llmops.serving.wait_for_llm_health:
    url: http://127.0.0.1:30000
    pidfile: /run/sglang/sglang.pid
    log_path: /var/log/sglang/server.log
    stall_timeout: 600
    extra_fatal_patterns:
      - 'ncclUnhandledCudaError'

- name: Check a remote vLLM endpoint from the controller
  llmops.serving.wait_for_llm_health:
    url: https://llm.example.com
    api_key: "{{ vault_llm_api_key }}"
    smoke: completions
    timeout: 120
  delegate_to: localhost
"""

RETURN = r"""
status:
  description:
    - V(ready), V(crashed) (process exited), V(fatal_log) (fatal log line, process still
      running or not watched), V(stalled) (no progress for O(stall_timeout)), V(timeout).
  returned: always
  type: str
  sample: ready
elapsed:
  description: Seconds from the start of the task to the verdict.
  returned: always
  type: float
  sample: 97.4
phase:
  description: Startup phase at the verdict (the furthest one reached).
  returned: always
  type: str
  sample: ready
phases:
  description: Phases seen, in order, with the elapsed seconds when each began and the log line that announced it.
  returned: always
  type: list
  elements: dict
  sample:
    - {phase: launching, elapsed: 0.0}
    - {phase: load_weights, elapsed: 38.2, line: "[2026-12-02 10:01:12] Load weight begin. avail mem=139.09 GB"}
    - {phase: ready, elapsed: 97.4}
health_path:
  description: The endpoint whose answers decided readiness (see O(health_path)).
  returned: always
  type: str
  sample: /ready
health:
  description: The last health answer in words.
  returned: always
  type: str
  sample: HTTP 503, starting (warm-up not finished)
last_http_status:
  description: HTTP status of the last health probe; null when it got no HTTP answer.
  returned: always
  type: int
  sample: 200
log_tail:
  description: Last O(log_lines) lines of the log (progress bars reduced to their last state).
  returned: always
  type: list
  elements: str
fatal_line:
  description: The log line that matched a fatal pattern, and the lines that followed it.
  returned: when a fatal line was seen
  type: list
  elements: str
exceptions:
  description:
    - The lines that ended the Python tracebacks in the log (exception name and message), in order, without
      the engine's log prefix. The first is usually the root cause, the later ones wrap it (vLLM's
      C(RuntimeError) C(Engine core initialization failed)). Also in the failure message.
  returned: when a traceback in the log reached its exception line
  type: list
  elements: str
  sample:
    - "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM."
    - "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}"
exit_code:
  description: Exit code of the server process (negative signal number when killed); null when unknown.
  returned: when RV(status) is V(crashed)
  type: int
  sample: 1
server_info:
  description: What the server reports about itself (C(/server_info), older SGLang's C(/get_server_info) or vLLM's C(/version)).
  returned: when RV(status) is V(ready)
  type: dict
  contains:
    engine:
      description: V(sglang) or V(vllm) when recognised.
      type: str
      returned: always
    version:
      description: Server version.
      type: str
      returned: when reported
    speculative_algorithm:
      description: For example V(EAGLE3); null with speculative decoding off.
      type: str
      returned: when reported
    speculative_depth:
      description: Draft tokens verified per step (C(speculative_num_draft_tokens)).
      type: int
      returned: when reported
  sample: {engine: sglang, version: 0.5.15.post1, speculative_algorithm: EAGLE3, speculative_depth: 5}
smoke:
  description: Result of the smoke generation.
  returned: when O(smoke) is not V(none) and the server became ready
  type: dict
  contains:
    ok:
      description: Whether the request produced tokens.
      type: bool
      returned: always
    text:
      description: Generated text.
      type: str
      returned: always
    tokens:
      description: Generated tokens.
      type: int
      returned: always
    accept_length:
      description: Acceptance length measured for the request; null without speculative decoding.
      type: float
      returned: always
    accept_length_source:
      description: Where RV(smoke.accept_length) came from.
      type: str
      returned: always
      sample: generate:meta_info
  sample: {ok: true, text: ' Paris.', tokens: 32, accept_length: 4.92, accept_length_source: 'generate:meta_info'}
warm_sampled:
  description: Result of the O(warm_sampled) request.
  returned: when O(warm_sampled) and the smoke passed
  type: dict
  contains:
    ok:
      description: Whether the sampled request answered with tokens within O(warm_sampled_timeout).
      type: bool
      returned: always
    seconds:
      description: Seconds it took, a cold FlashInfer build included (82.9 s on an H200, 0.14 s once built).
      type: float
      returned: when it was answered
    error:
      description: Why it failed.
      type: str
      returned: when RV(warm_sampled.ok) is false
  sample: {ok: true, seconds: 0.21}
notes:
  description: What the module noticed on the way (missing log file or pidfile, rotation, truncation).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils._log_follow import JournalFollower, LogFollower
from ansible_collections.llmops.serving.plugins.module_utils._ports import describe, foreign_listeners, local_port
from ansible_collections.llmops.serving.plugins.module_utils._procs import ProcessWatch
from ansible_collections.llmops.serving.plugins.module_utils._server_api import (
    SERVER_ARGUMENT_SPEC,
    accept_length_from_meta,
    accept_length_from_metrics_with_source,
    accept_length_message,
    fetch_metrics,
    fetch_server_info,
    module_request,
    smoke_request,
    speculative_enabled,
)
from ansible_collections.llmops.serving.plugins.module_utils._startup_log import DEFAULT_FATAL_PATTERNS, compile_patterns
from ansible_collections.llmops.serving.plugins.module_utils._wait import (
    STATUS_CRASHED,
    STATUS_FATAL_LOG,
    STATUS_READY,
    STATUS_STALLED,
    STATUS_WAITING,
    Waiter,
    describe_probe,
)

# Also validated on the controller by the action plugin.
ARGUMENT_SPEC = dict(
    SERVER_ARGUMENT_SPEC,
    health_path=dict(type='str'),
    timeout=dict(type='float', default=900.0),
    interval=dict(type='float', default=1.0),
    stall_timeout=dict(type='float', default=300.0),
    heartbeat_interval=dict(type='float', default=60.0),
    log_path=dict(type='path'),
    log_start=dict(type='str', default='beginning', choices=['beginning', 'end']),
    systemd_unit=dict(type='str'),
    log_lines=dict(type='int', default=20),
    pid=dict(type='int'),
    pidfile=dict(type='path'),
    fatal_patterns=dict(type='list', elements='str'),
    extra_fatal_patterns=dict(type='list', elements='str', default=[]),
    success_threshold=dict(type='int', default=1),
    smoke=dict(type='str', default='none', choices=['none', 'completions', 'generate']),
    smoke_model=dict(type='str'),
    smoke_prompt=dict(type='str', default='The capital of France is'),
    smoke_max_tokens=dict(type='int', default=32, no_log=False),
    smoke_timeout=dict(type='float', default=120.0),
    warm_sampled=dict(type='bool', default=True),
    warm_sampled_timeout=dict(type='float', default=600.0),
    min_accept_length=dict(type='float'),
    # no choices: null (unset) must pass, which choices refuse; checked in main()
    disaggregation_mode=dict(type='str'),
)
MUTUALLY_EXCLUSIVE = [('pid', 'pidfile', 'systemd_unit')]

# The action plugin's state between slices (log offset, phases, elapsed time, slice
# length) is no user option: it travels as this parameter, taken out before validation.
RESUME = '_resume'


class HealthModule(AnsibleModule):
    """AnsibleModule that takes the action plugin's private RESUME parameter out of the parameters."""

    def _load_params(self):
        super(HealthModule, self)._load_params()
        self.resume = self.params.pop(RESUME, None) or {}


def log_description(params):
    if params['log_path']:
        return 'log %s' % params['log_path']
    if params['systemd_unit']:
        return 'journal of %s' % params['systemd_unit']
    return 'no log followed'


def failure_message(status, waiter, process, params, elapsed, notes):
    """Root cause first (the exception that ended the first traceback, else the first fatal
    line), then what happened and where, then the other exceptions. The log lines themselves
    are in the result once (RV(fatal_line), RV(log_tail)), not repeated here."""
    where = 'after %.0f s in phase %s' % (elapsed, waiter.phase)
    health = describe_probe(waiter.last_probe)
    if status == STATUS_CRASHED:
        code = waiter.exit.get('exit_code')
        what = 'the server crashed %s: %s%s; last health: %s' % (
            where, waiter.exit['detail'], '' if code is None else ', exit code %s' % code, health)
    elif status == STATUS_FATAL_LOG:
        watched = process.describe()
        what = 'a fatal line appeared in the %s %s (%s); last health: %s' % (
            log_description(params), where, '%s still runs' % watched if watched else 'the process is not watched', health)
    elif status == STATUS_STALLED:
        what = ('no progress for %.0f s, %s: no new lines in the %s and the health answer stayed "%s"; '
                'the start looks hung (raise stall_timeout if this phase is legitimately quiet)' % (
                    params['stall_timeout'], where, log_description(params), health))
    else:
        what = 'the server at %s was not ready %s (timeout %.0f s); last health: %s' % (
            params['url'], where, params['timeout'], health)
    exceptions = waiter.tracebacks.exceptions
    if exceptions:
        parts = ['root cause: ' + exceptions[0], what]
        parts.extend('then: ' + line for line in exceptions[1:])
    elif waiter.fatal is not None:
        parts = ['root cause: ' + waiter.fatal['matches'][0], what]
    else:
        parts = [what]
    if waiter.fatal is not None:
        parts.append('the log from the first fatal line is in fatal_line below (%s)' % log_description(params))
    elif waiter.tail:
        parts.append('the last log lines are in log_tail below (%s)' % log_description(params))
    if notes:
        parts.append('notes: ' + '; '.join(notes))
    return '\n'.join(parts)


def check_after_ready(module, request, result, health_path):
    """Server info, smoke generation and acceptance-length floor. Returns an error or None."""
    params = module.params
    summary, dummy = fetch_server_info(request, params['request_timeout'])
    result['server_info'] = summary
    if params['smoke'] == 'none':
        return None
    metrics_before = fetch_metrics(request, params['request_timeout'])
    smoke = smoke_request(request, params['smoke'], params['smoke_prompt'], params['smoke_max_tokens'],
                          model=params['smoke_model'], timeout=params['smoke_timeout'],
                          disaggregation_mode=params['disaggregation_mode'])
    metrics_after = fetch_metrics(request, params['request_timeout']) if metrics_before is not None else None
    value, source = None, None
    if smoke['ok']:
        value = accept_length_from_meta(smoke.get('meta_info'))
        source = 'generate:meta_info' if value else None
        if value is None:
            value, source = accept_length_from_metrics_with_source(metrics_before, metrics_after)
        if value is None:
            refreshed, dummy = fetch_server_info(request, params['request_timeout'])
            value = refreshed.get('avg_spec_accept_length')
            source = '%s:internal_states.avg_spec_accept_length' % refreshed.get('source') if value else None
    smoke['accept_length'] = round(value, 3) if value else None
    smoke['accept_length_source'] = source
    smoke.pop('meta_info', None)
    result['smoke'] = smoke
    if not smoke['ok']:
        return 'the server answers %s but the smoke request failed: %s' % (health_path, smoke.get('error'))
    if smoke['text'] == '':
        module.warn('the smoke request generated %s tokens that decode to empty text (special tokens only?)' % smoke['tokens'])
    floor = params['min_accept_length']
    if floor is None:
        return None
    if params['disaggregation_mode'] == 'prefill':
        smoke['accept_length_check'] = 'skipped: a prefill server generates no speculative tokens'
        return None
    enabled = speculative_enabled(summary, metrics_after)
    if enabled is False:
        smoke['accept_length_check'] = 'skipped: speculative decoding is off'
        return None
    if value is None:
        return ('min_accept_length is %s but the acceptance length could not be measured: no spec_accept_length '
                'in the response, no speculative counters in /metrics (start SGLang with --enable-metrics) and '
                'no avg_spec_accept_length in /server_info; use smoke: generate with SGLang' % floor)
    if value < floor:
        return accept_length_message(value, floor, source, summary)
    smoke['accept_length_check'] = 'passed: %.2f >= %.2f' % (value, floor)
    return None


def warm_sampled(params, request, result):
    """The O(warm_sampled) request, once the smoke and the floor passed. Returns an error or None."""
    smoke = result.get('smoke') or {}
    warm = smoke_request(request, params['smoke'], params['smoke_prompt'], 4, model=smoke.get('model'),
                         timeout=params['warm_sampled_timeout'], temperature=1.0,
                         disaggregation_mode=params['disaggregation_mode'])
    result['warm_sampled'] = dict((k, warm[k]) for k in ('ok', 'seconds', 'error') if k in warm)
    if not warm['ok']:
        return ('the smoke passed but the sampled warm-up request (warm_sampled) failed within %.0f s: %s'
                % (params['warm_sampled_timeout'], warm.get('error')))
    return None


def foreign_server(url, process):
    """An error when what answers on the URL's port (on this host) is not the process tree
    being watched: a server that fails to bind (``[Errno 98] address already in use``) dies
    while another one, foreign to this deploy, answers health and smoke in its place."""
    port = local_port(url)
    pid = process.unit_main_pid or process.seen_pid
    if port is None or not pid:
        return None
    others = foreign_listeners(port, pid)
    if not others:
        return None
    return ('port %d answers, but not from %s (PID %s): it is held by %s; the server this task waits for did not '
            'get the port (look for "address already in use" in its log) and a foreign server answered in its place'
            % (port, process.describe(), pid, describe(others)))


def main():
    module = HealthModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, supports_check_mode=False)
    params = module.params
    request = module_request(module)
    patterns = list(DEFAULT_FATAL_PATTERNS if params['fatal_patterns'] is None else params['fatal_patterns'])
    patterns += params['extra_fatal_patterns']
    try:
        compile_patterns(patterns)
    except ValueError as exc:
        module.fail_json(msg='fatal_patterns / extra_fatal_patterns: %s' % exc)
    if params['min_accept_length'] is not None and params['smoke'] == 'none':
        module.fail_json(msg='min_accept_length needs traffic to measure: set smoke to generate (SGLang) or completions')
    if params['disaggregation_mode'] not in (None, '', 'prefill', 'decode'):
        module.fail_json(msg='disaggregation_mode must be prefill, decode or null, got %r' % (params['disaggregation_mode'],))
    for name in ('interval', 'request_timeout', 'heartbeat_interval'):
        if params[name] <= 0:
            module.fail_json(msg='%s must be greater than 0, got %s' % (name, params[name]))

    resume = module.resume
    saved = resume.get('state') or {}
    log = None
    if params['log_path']:
        log = LogFollower(params['log_path'], saved.get('log'), start=params['log_start'])
    elif params['systemd_unit']:
        log = JournalFollower(params['systemd_unit'], saved.get('journal'), run=module.run_command)
    process = ProcessWatch(pid=params['pid'], pidfile=params['pidfile'], unit=params['systemd_unit'],
                           state=saved.get('process'), run=module.run_command)
    waiter = Waiter(request, health_path=params['health_path'], interval=params['interval'],
                    request_timeout=params['request_timeout'], timeout=params['timeout'],
                    success_threshold=params['success_threshold'], stall_timeout=params['stall_timeout'],
                    fatal_patterns=patterns, log=log, process=process, log_lines=params['log_lines'],
                    state=saved.get('wait'), elapsed=float(resume.get('elapsed') or 0.0))
    status = waiter.run(float(resume.get('slice') or params['timeout']))
    elapsed = waiter.elapsed()

    notes = list(waiter.notes) + list(process.notes)
    # why readiness comes from /health, in every slice after the switch: the verdict may be a
    # later slice's, or the action plugin's own timeout (heartbeats print a note once)
    if waiter.path_note() and waiter.path_note() not in notes:
        notes.append(waiter.path_note())
    if log is not None:
        notes += log.events
        if log.missing:
            notes.append('%s does not exist (yet)' % params['log_path'])
    state = {'wait': waiter.export(), 'process': process.export()}
    if isinstance(log, LogFollower):
        state['log'] = log.export()
    elif log is not None:
        state['journal'] = log.export()
    result = dict(
        changed=False, status=status, elapsed=elapsed, phase=waiter.phase, phases=waiter.phases,
        health=describe_probe(waiter.last_probe), health_path=waiter.health_path,
        last_http_status=(waiter.last_probe or {}).get('status'),
        log_tail=waiter.tail[-params['log_lines']:], new_lines=waiter.new_lines, notes=notes, state=state,
    )
    if waiter.fatal is not None:
        result['fatal_line'] = waiter.fatal['context']
    if waiter.tracebacks.exceptions:
        result['exceptions'] = waiter.tracebacks.exceptions
    if status == STATUS_WAITING:
        module.exit_json(**result)
    if log is not None and log.missing:
        module.warn('%s never appeared: check log_path' % params['log_path'] if not waiter.tail else
                    '%s disappeared while it was followed' % params['log_path'])
    if status == STATUS_CRASHED:
        result['exit_code'] = waiter.exit.get('exit_code')
    if status == STATUS_READY:
        error = foreign_server(params['url'], process) or check_after_ready(module, request, result, waiter.health_path)
        if error is None and params['warm_sampled'] and params['smoke'] != 'none':
            error = warm_sampled(params, request, result)
        if error is None:
            module.exit_json(**result)
        module.fail_json(msg=error, **result)
    module.fail_json(msg=failure_message(status, waiter, process, params, elapsed, notes), **result)


if __name__ == '__main__':
    main()
