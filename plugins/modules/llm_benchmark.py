#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_benchmark
short_description: Benchmark an LLM inference server with streamed requests
version_added: 1.0.0
description:
  - Sends O(num_prompts) streamed requests to an SGLang (or any OpenAI-compatible)
    server, at most O(concurrency) at a time, for each concurrency level, O(rounds) times,
    and reports request and token throughput, time to first token (TTFT), inter-token
    latency (ITL), time per output token (TPOT) and end-to-end latency (mean, p50, p90,
    p99) with the definitions of C(sglang.benchmark.serving) (C(sglang.bench_serving)) of
    SGLang 0.5.15.post1, plus the speculative decoding acceptance length, optional goodput
    under SLOs, and the client's own CPU time.
  - ITL is per token, as C(sglang.bench_serving) computes it - each gap between streamed
    chunks divided by the tokens the chunk carries, counted once per token. With
    speculative decoding a chunk carries several tokens; the undivided gap between chunks
    is RV(runs[].chunk_gap_ms).
  - Every figure of a run is the median over its rounds, with min, median and max in
    RV(runs[].spread), so that the spread between rounds shows whether two servers can be
    ranked.
  - Requests that fail (HTTP error, timeout, malformed event, body cut short, stream
    truncated) count as failed with their message; they never stop the run.
  - Acceptance length is the mean of the per-request figures when the server gives them
    (SGLang C(/generate) C(meta_info)); else C(internal_states[0].avg_spec_accept_length)
    from C(/server_info) (or C(/get_server_info) where a server lacks it) when O(flush_cache=true) reset it before the run; else it is
    derived from C(/metrics) (vLLM C(spec_decode_num_accepted_tokens_total) /
    C(spec_decode_num_drafts_total) + 1 over the run, or SGLang's C(spec_accept_length)
    gauge).
  - Tokens are counted from the server's own cumulative figures on each streamed chunk,
    so chunks that carry several tokens (speculative decoding) are counted correctly.
  - Runs where the module runs; use C(delegate_to) to send the load from elsewhere.
author:
  - llmops.serving contributors (@llmops)
requirements:
  - Python standard library only; the C(requests) library is used when installed (see O(http_library)).
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.server_api
attributes:
  check_mode:
    support: none
    details: Nothing is sent in check mode; the task is skipped.
  diff_mode:
    support: none
    details: The module changes no configuration, so there is nothing to diff.
  idempotent:
    support: full
    details: The module never reports a change; O(flush_cache) only empties the server's prefix cache.
options:
  api:
    description:
      - V(completions) streams from the OpenAI-compatible C(/v1/completions) (any engine).
      - V(generate) streams from SGLang's native C(/generate), which also reports the
        acceptance length of every request.
    type: str
    choices: [completions, generate]
    default: completions
  model:
    description:
      - Model name sent with V(completions) requests. The first entry of C(/v1/models)
        when omitted.
    type: str
  num_prompts:
    description:
      - Number of requests of each round at each concurrency level (at least; see O(min_duration)).
    type: int
    default: 64
  min_duration:
    description:
      - Seconds each round lasts at least. After O(num_prompts) requests the prompts are sent
        again from the first until this time has passed (whichever ends later).
      - Short rounds vary a lot (a round of under a second at concurrency 8 varied by about 30%
        on an H200); use 30 or more for figures that rank configurations.
    type: float
    default: 0
  rounds:
    description:
      - Measurements per concurrency level. Figures are the median over the rounds, with
        min/median/max in RV(runs[].spread) and each round in RV(runs[].rounds).
    type: int
    default: 1
  slo:
    description:
      - Service-level objectives in milliseconds; when given, RV(runs[].goodput) counts the completed
        requests per second that met all of them (as C(vllm bench serve --goodput) does).
    type: dict
    suboptions:
      ttft_ms:
        description: Largest time to first token.
        type: float
      tpot_ms:
        description: Largest time per output token.
        type: float
      e2e_ms:
        description: Largest end-to-end latency.
        type: float
  concurrency:
    description: Requests in flight at once; one benchmark run per value, in order.
    type: list
    elements: int
    default: [1, 8]
  input_len:
    description: Words per synthetic prompt (about one token each). Ignored with O(dataset).
    type: int
    default: 128
  output_len:
    description:
      - Tokens generated per request (C(ignore_eos) makes the length exact); the default
        for dataset lines that give no C(output_len).
    type: int
    default: 128
  dataset:
    description:
      - Path of a prompt file on the host that runs the module, instead of synthetic prompts.
      - A JSON array is read as ShareGPT format (as C(sglang.bench_serving --dataset-name sharegpt)
        reads it) - objects with C(conversations), of which the first turn's C(value) is the
        prompt; conversations of fewer than two turns are skipped; every request asks for O(output_len)
        tokens.
      - Otherwise the file is JSONL - each line a JSON string or an object with C(prompt) and
        optionally C(output_len).
      - Prompts are shuffled with O(seed) and repeated up to O(num_prompts).
    type: path
  warmup_requests:
    description:
      - Requests sent before each concurrency level's rounds, at that concurrency (at least one per
        concurrent slot), and not counted. V(0) sends none.
    type: int
    default: 2
  flush_cache:
    description:
      - POST C(/flush_cache) before each run (SGLang only). It empties the prefix cache
        and resets the server's acceptance-length counter, which otherwise includes
        warm-up traffic.
      - It is an admin endpoint of SGLang - with O(admin_api_key) set, that key is sent for it
        instead of O(api_key).
    type: bool
    default: false
  admin_api_key:
    description:
      - The server's admin key (SGLang C(--admin-api-key)), sent only to C(/flush_cache) - a server with an
        admin key refuses that endpoint to the inference key. Unset or empty, C(/flush_cache) gets O(api_key).
    type: str
    version_added: 1.1.0
  seed:
    description: Seed for synthetic prompts and dataset order.
    type: int
    default: 0
  temperature:
    description: Sampling temperature of every request.
    type: float
    default: 0.0
  timeout:
    description:
      - Seconds one request may take as a whole, from connecting to its last byte (streamed requests,
        C(/v1/models), C(/metrics), C(/server_info), C(/flush_cache)). A streamed request that takes
        longer counts as failed; a server that sends only keep-alive comments is no exception.
    type: float
    default: 600
  http_library:
    description:
      - V(requests) sends the load with the C(requests) library (a session per concurrent request).
      - V(http.client) uses the Python standard library, for hosts without C(requests); it is as fast
        (see C(tests/perf/benchmark_client_throughput.py)).
      - V(auto) picks V(requests) when it is installed, else V(http.client).
    type: str
    choices: [auto, requests, http.client]
    default: auto
  ca_path:
    description:
      - PEM file of the CA that signed the server's or router's certificate, for an C(https://) O(url) (the fleet CA,
        C(llmops_tls_ca_cert)); unset, the system's CAs.
    type: path
    version_added: 1.1.0
  max_failed_ratio:
    description:
      - The task fails when more than this fraction of the requests of any run failed.
        The results are still returned.
    type: float
    default: 0.0
  repeat:
    description:
      - Run the whole benchmark (warm-up, cache flush, every concurrency level with its O(rounds)) this many
        times, one after the other, each a result in RV(repeats) (the C(deploy) role's canary gate takes the
        same short benchmark 3 times before and after a change and judges the spread of the repeats).
      - Every repeat runs whatever the others did; the task fails after the last when one failed, naming each
        (C(round 2 of 3) and its failure).
      - Left out or V(null), one benchmark, and no RV(repeats).
    type: int
    version_added: 1.1.0
  disaggregation_mode:
    description:
      - The prefill/decode disaggregation mode of the server at O(url) (SGLang C(--disaggregation-mode); the
        C(sglang_server) role's C(sglang_server_disaggregation_mode)), V(prefill) or V(decode); left out or V(null),
        a server that does both, or a router.
      - With V(prefill) or V(decode) the task fails before it sends anything - one side of a prefill/decode pair
        cannot be benchmarked alone. SGLang answers it only requests paired through a router in prefill/decode
        mode (HTTP 400 C(Disaggregated request received without bootstrap room id.) to any other); a request
        carrying SGLang's fake bootstrap host runs on one side with no KV from the other (a prefill makes one
        token, a decode decodes without its prompt's KV), so its figures would be wrong; and acceptance shows on
        the decode of a pair only. Benchmark the pair through the router in front of it (its URL as O(url),
        this option unset).
    type: str
    version_added: 1.1.0
notes:
  - The load generator is closed-loop (one thread per concurrent request, each with its
    own HTTP session). Against a server that answers instantly it streams more than
    20,000 tokens per second on one core; RV(runs[].client_cpu_utilisation) near 1.0
    means the client, not the server, was the limit.
seealso:
  - module: llmops.serving.wait_for_llm_health
"""

EXAMPLES = r"""
- name: Benchmark the local SGLang server at 1 and 8 concurrent requests, 3 rounds of at least 30 s each
  llmops.serving.llm_benchmark:
    url: http://127.0.0.1:30000
    api: generate
    num_prompts: 64
    concurrency: [1, 8]
    input_len: 256
    output_len: 256
    rounds: 3
    min_duration: 30
    flush_cache: true
    slo:
      ttft_ms: 500
      tpot_ms: 20
  register: bench

- name: Show the spread of output throughput over the rounds
  ansible.builtin.debug:
    msg: "{{ bench.runs | map(attribute='spread') | map(attribute='output_throughput') }}"

- name: Show output throughput and acceptance per concurrency
  ansible.builtin.debug:
    msg: "{{ bench.runs | map(attribute='output_throughput') }} / {{ bench.runs | map(attribute='accept_length') }}"

- name: Benchmark a vLLM server from the controller with a prompt file
  llmops.serving.llm_benchmark:
    url: http://gpu-node-1:8000
    model: meta-llama/Llama-3.1-8B-Instruct
    dataset: /srv/prompts.jsonl
    concurrency: 16
    api_key: "{{ vault_llm_api_key }}"
  delegate_to: localhost
"""

RETURN = r"""
repeats:
  description:
    - With O(repeat), the result of each repeat, in order (the keys of this result, C(failed) and C(msg)
      where that repeat failed); the other keys of the result are those of the last repeat.
  returned: when O(repeat) is set
  type: list
  elements: dict
  version_added: 1.1.0
runs:
  description:
    - One entry per concurrency level, in the order given. Rates and latency figures are the median
      over the level's rounds; counts (requests, tokens, seconds) are their sum.
  returned: success
  type: list
  elements: dict
  contains:
    concurrency:
      description: Requests in flight at once.
      type: int
      sample: 8
    num_prompts:
      description: Requests sent (all rounds).
      type: int
      sample: 64
    completed:
      description: Requests that streamed to the end.
      type: int
      sample: 64
    failed:
      description: Requests that failed (HTTP error, timeout, malformed event, body cut short, truncated stream).
      type: int
      sample: 0
    truncated:
      description:
        - Failed requests whose stream ended early - without C([DONE]) or a C(finish_reason), or with
          fewer tokens than the exact length asked for.
      type: int
      sample: 0
    errors:
      description: Up to five distinct error messages of failed requests.
      type: list
      elements: str
      sample: []
    duration_s:
      description: Wall-clock seconds from the first request sent to the last one finished.
      type: float
      sample: 12.5
    request_throughput:
      description: Completed requests per second.
      type: float
      sample: 5.12
    input_tokens:
      description: Prompt tokens as counted by the server (null when it did not say).
      type: int
      sample: 8192
    output_tokens:
      description: Generated tokens as counted by the server.
      type: int
      sample: 16384
    output_throughput:
      description: Generated tokens of completed requests per second.
      type: float
      sample: 1310.7
    goodput:
      description: Completed requests per second that met every limit of O(slo); null without O(slo).
      type: float
      sample: 4.8
    good_requests:
      description: Completed requests that met every limit of O(slo); null without O(slo).
      type: int
      sample: 60
    total_throughput:
      description: Prompt plus generated tokens per second.
      type: float
      sample: 1966.1
    tokens_per_chunk:
      description: Mean generated tokens per streamed chunk (above 1 with speculative decoding).
      type: float
      sample: 3.9
    output_tokens_counted_by_server:
      description:
        - Whether the server reported the token count of every request (C(meta_info) or streamed C(usage)).
          When false, one token per chunk was counted (a lower bound) and the module warns.
      type: bool
      sample: true
    ttft_ms:
      description: Time to first token in milliseconds, with keys C(mean), C(p50), C(p90), C(p99).
      type: dict
      sample: {"mean": 35.1, "p50": 33.0, "p90": 41.2, "p99": 60.3}
    itl_ms:
      description:
        - Inter-token latency in milliseconds as C(sglang.bench_serving) computes it - each gap between
          streamed chunks divided by the tokens of the chunk, counted once per token. Where the server
          gives only a final token count, each gap is divided by the mean tokens per chunk.
      type: dict
      sample: {"mean": 5.0, "p50": 4.9, "p90": 5.5, "p99": 7.5}
    chunk_gap_ms:
      description:
        - Time between consecutive streamed chunks in milliseconds (not divided by the tokens of the
          chunk; about RV(runs[].itl_ms) times RV(runs[].tokens_per_chunk)).
      type: dict
      sample: {"mean": 20.0, "p50": 19.5, "p90": 22.0, "p99": 30.1}
    tpot_ms:
      description: Per request (end-to-end - TTFT) / (output tokens - 1), in milliseconds.
      type: dict
      sample: {"mean": 5.1, "p50": 5.0, "p90": 5.6, "p99": 6.0}
    e2e_ms:
      description: End-to-end request latency in milliseconds.
      type: dict
      sample: {"mean": 1340.0, "p50": 1322.0, "p90": 1410.0, "p99": 1502.0}
    accept_length:
      description: Mean speculative acceptance length (tokens per verify step); null without speculative decoding.
      type: float
      sample: 3.87
    accept_length_source:
      description: Where RV(runs[].accept_length) came from.
      type: str
      sample: per_request
      choices: [per_request, server_info, metrics]
    server_counters:
      description:
        - Increase of the server's own C(/metrics) counters over the run, where exposed -
          C(generation_tokens), C(prompt_tokens), C(spec_verify_calls), C(spec_drafts),
          C(spec_draft_tokens), C(spec_accepted_tokens).
      type: dict
      sample: {"generation_tokens": 16384.0, "prompt_tokens": 8192.0}
    client_cpu_s:
      description: CPU seconds the benchmark client used during the run.
      type: float
      sample: 0.4
    client_cpu_ms_per_1k_tokens:
      description: Client CPU milliseconds per 1,000 generated tokens.
      type: float
      sample: 24.4
    client_cpu_utilisation:
      description: Client CPU seconds per wall-clock second; near 1.0 means the client was the bottleneck.
      type: float
      sample: 0.03
    spread:
      description:
        - C(min), C(median) and C(max) over the rounds of every rate (C(output_throughput),
          C(request_throughput), ...) and latency statistic (keys such as C(ttft_ms.p50)).
      type: dict
      sample: {"output_throughput": {"min": 1250.2, "median": 1310.7, "max": 1333.0}}
    rounds:
      description: The figures of each round (the keys above, without C(spread) and C(rounds)), with its number as C(round).
      type: list
      elements: dict
settings:
  description:
    - What was measured - O(num_prompts), O(input_len) (null with O(dataset)), O(output_len), O(seed),
      O(dataset), O(rounds), O(min_duration), O(warmup_requests), O(temperature), O(api), O(slo).
  returned: success
  type: dict
  sample: {"num_prompts": 64, "input_len": 128, "output_len": 128, "seed": 0, "dataset": null, "rounds": 3}
server:
  description:
    - What C(/server_info) (or C(/get_server_info)) said after the last run (version and the server's
      arguments); empty when the server has no such endpoint (vLLM).
  returned: success
  type: dict
  sample: {"version": "0.5.15.post1", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 9}
model:
  description: Model name used for V(completions) requests.
  returned: success
  type: str
  sample: /models/llama
http_library:
  description: HTTP library (and version) that sent the load.
  returned: success
  type: str
  sample: requests 2.32.3
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmops.serving.plugins.module_utils import _benchmark


def _server_args(info):
    """Flat server arguments and version, without the per-scheduler state and with secrets masked."""
    if not isinstance(info, dict):
        return {}
    args = {}
    for key, value in info.items():
        if key == 'internal_states':
            continue
        if value and (key.endswith('api_key') or 'password' in key or 'secret' in key):
            value = '********'
        args[key] = value
    return args


ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    api=dict(type='str', choices=list(_benchmark.APIS), default=_benchmark.API_COMPLETIONS),
    model=dict(type='str'),
    num_prompts=dict(type='int', default=64),
    concurrency=dict(type='list', elements='int', default=[1, 8]),
    input_len=dict(type='int', default=128),
    output_len=dict(type='int', default=128),
    dataset=dict(type='path'),
    min_duration=dict(type='float', default=0.0),
    rounds=dict(type='int', default=1),
    slo=dict(type='dict', options=dict(ttft_ms=dict(type='float'), tpot_ms=dict(type='float'),
                                       e2e_ms=dict(type='float'))),
    warmup_requests=dict(type='int', default=2),
    flush_cache=dict(type='bool', default=False),
    admin_api_key=dict(type='str', no_log=True),
    seed=dict(type='int', default=0),
    temperature=dict(type='float', default=0.0),
    timeout=dict(type='float', default=600.0),
    api_key=dict(type='str', no_log=True),
    http_library=dict(type='str', choices=list(_benchmark.HTTP_LIBRARIES), default='auto'),
    ca_path=dict(type='path'),
    max_failed_ratio=dict(type='float', default=0.0),
    repeat=dict(type='int'),
    # No choices: the role passes null for a server that does both, which AnsibleModule's choices refuse.
    disaggregation_mode=dict(type='str'),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=False,
    )
    params = module.params
    if params['http_library'] == 'requests' and _benchmark.requests is None:
        module.fail_json(msg=missing_required_lib(
            'requests', reason='for http_library=requests', url='https://pypi.org/project/requests/')
            + ' Or set http_library to auto or http.client (the standard library).')
    for key in ('num_prompts', 'input_len', 'output_len', 'rounds'):
        if params[key] < 1:
            module.fail_json(msg='%s must be at least 1, got %d' % (key, params[key]))
    for key in ('min_duration', 'timeout', 'warmup_requests'):
        if params[key] < 0 or (key == 'timeout' and params[key] == 0):
            module.fail_json(msg='%s must be %s, got %s' % (key, 'above 0' if key == 'timeout' else 'at least 0',
                                                            params[key]))
    slo = dict((key, value) for key, value in (params['slo'] or {}).items() if value is not None)
    for key, value in slo.items():
        if value <= 0:
            module.fail_json(msg='slo.%s must be above 0 (milliseconds), got %s' % (key, value))
    if not params['concurrency'] or min(params['concurrency']) < 1:
        module.fail_json(msg='concurrency must list values of at least 1, got %s' % params['concurrency'])
    if not params['url'].startswith(('http://', 'https://')):
        module.fail_json(msg='url must start with http:// or https://, got %s' % params['url'])

    if params['disaggregation_mode'] not in (None, '', 'prefill', 'decode'):
        module.fail_json(msg='disaggregation_mode must be prefill or decode (or null), got %r' % params['disaggregation_mode'])
    if params['disaggregation_mode']:
        module.fail_json(msg=_benchmark.disaggregation_refusal(params['url'], params['disaggregation_mode']))

    repeat = params['repeat']
    if repeat is not None and repeat < 1:
        module.fail_json(msg='repeat must be at least 1, got %d' % repeat)
    if repeat is None:
        output, failure = _run(module, params, slo)
        if failure:
            module.fail_json(msg=failure, **output)
        module.exit_json(**output)
    # The whole benchmark again and again (the canary gate's rounds): every one runs, whatever the others did.
    repeats, failures = [], []
    for number in range(1, repeat + 1):
        output, failure = _run(module, params, slo)
        if failure:
            output.update(failed=True, msg=failure)
            failures.append('round %d of %d: %s' % (number, repeat, failure))
        repeats.append(output)
    output = dict(changed=False, repeats=repeats, **dict(
        (key, value) for key, value in repeats[-1].items() if key not in ('changed', 'failed', 'msg')))
    if failures:
        module.fail_json(msg='; '.join(failures), **output)
    module.exit_json(**output)


def _run(module, params, slo):
    """One benchmark: (the result's keys, the failure message or None)."""
    try:
        if params['dataset']:
            prompts = _benchmark.load_dataset(params['dataset'], params['num_prompts'], params['output_len'],
                                              params['seed'])
        else:
            prompts = _benchmark.synthetic_prompts(params['num_prompts'], params['input_len'],
                                                   params['output_len'], params['seed'])
        client = _benchmark.Client(params['url'], api_key=params['api_key'], timeout=params['timeout'],
                                   http_library=params['http_library'], admin_api_key=params['admin_api_key'],
                                   ca_path=params['ca_path'])
        result = _benchmark.benchmark(
            client, params['api'], prompts, params['concurrency'], model=params['model'],
            warmup_requests=params['warmup_requests'], flush_cache=params['flush_cache'],
            temperature=params['temperature'], rounds=params['rounds'], min_duration=params['min_duration'],
            slo=slo or None)
    except (_benchmark.BenchmarkError, OSError) as exc:
        return {'changed': False}, str(exc)

    output = dict(
        changed=False,
        runs=result['runs'],
        server=_server_args(result['server_info']),
        model=result['model'],
        http_library=client.http_library,
        settings=dict(((key, params[key]) for key in (
            'num_prompts', 'output_len', 'seed', 'dataset', 'rounds', 'min_duration', 'warmup_requests',
            'temperature', 'api')), input_len=None if params['dataset'] else params['input_len'], slo=slo or None),
    )
    for run in result['runs']:
        if run['output_tokens_counted_by_server'] is False:
            module.warn('at concurrency %d the server did not say how many tokens each streamed chunk held (no usage '
                        'in the stream), so one token per chunk was counted: %d tokens, the server counted %s'
                        % (run['concurrency'], run['output_tokens'],
                           run['server_counters'].get('generation_tokens', 'nothing (no /metrics)')))
        if run['client_cpu_utilisation'] is not None and run['client_cpu_utilisation'] > 0.9:
            module.warn('at concurrency %d the benchmark client used %.0f%% of a CPU core: the figures may be '
                        'limited by the client, not the server' % (run['concurrency'], 100 * run['client_cpu_utilisation']))
    worst = max(result['runs'], key=lambda run: run['failed'] / float(run['num_prompts']))
    if worst['failed'] > params['max_failed_ratio'] * worst['num_prompts']:
        return output, ('%d of %d requests to %s failed at concurrency %d (max_failed_ratio %s): %s'
                        % (worst['failed'], worst['num_prompts'], params['url'], worst['concurrency'],
                           params['max_failed_ratio'], '; '.join(worst['errors'])))
    return output, None


if __name__ == '__main__':
    main()
