"""plugins/module_utils/_startup_log.py: phases and fatal patterns on genuine SGLang and vLLM logs,
traceback roots, display lines and the masking of API keys."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _startup_log as startup_log
from ansible_collections.llmops.serving.plugins.module_utils import _wait as wait
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils._health_helpers import (
    TESTS,
    GOOD_RUNS,
    STARTUP_ORDER,
    VLLM_CRASH,
    VLLM_EAGER_START,
    SGLANG_H200_START,
    VLLM_ROOT_CAUSE,
    VLLM_WRAPPER,
    scan,
    read_lines,
    exceptions_of,
    unreachable_waiter,
    append,
)
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import (
    FIXTURES,
)


# ------------------------------------------------------------------ phases, fatal patterns
@pytest.mark.parametrize('run', GOOD_RUNS)
def test_genuine_good_start_has_every_phase_in_order_and_no_fatal_line(run):
    phases, fatal = scan(os.path.join(FIXTURES, run, 'log'))
    assert phases == STARTUP_ORDER
    assert fatal == []


@pytest.mark.parametrize('log, expected', [
    ('scheduler-exception-during-cuda-graph-capture.log', 'Scheduler hit an exception: Traceback'),
    ('unknown-flag.log', 'sglang serve: error: unrecognized arguments: --num-speculative-tokens 16'),
])
def test_genuine_failed_starts_are_caught_by_default_fatal_patterns(log, expected):
    phases, fatal = scan(os.path.join(FIXTURES, 'failures', log))
    assert fatal and expected in fatal[0]
    assert 'ready' not in phases


@pytest.mark.parametrize('line, phase', [
    ('[2026-12-02 10:01:04] Init torch distributed begin.', 'distributed_init'),
    ('[2026-12-02 10:01:12] Load weight begin. avail mem=139.09 GB', 'load_weights'),
    ('INFO 12-02 10:00:01 [gpu_model_runner.py:2000] Starting to load model /m...', 'load_weights'),
    ('[x] KV Cache is allocated. #tokens: 100, K size: 1 GB', 'kv_cache'),
    ('INFO [kv_cache_utils.py:1] GPU KV cache size: 43,520 tokens', 'kv_cache'),
    ('[x] Capture cuda graph begin. This can take up to several minutes. avail mem=10 GB', 'cuda_graphs'),  # 0.5.11
    ('[x] Capture target prefill CUDA graph begin. backend=breakable', 'cuda_graphs'),  # 0.5.15
    ('INFO Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%', 'cuda_graphs'),  # vLLM
    ('INFO [backends.py:1] Compiling a graph for dynamic shape takes 12.3 s', 'compile'),
    ('[x] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)', 'http_server'),
    ('INFO [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:8000', 'http_server'),
    ('[x] The server is fired up and ready to roll!', 'ready'),
    ('[x] Prefill batch, #new-seq: 1, #new-token: 26', None),
])
def test_phase_lines_of_sglang_and_vllm_versions(line, phase):
    assert startup_log.match_phase(line) == phase


@pytest.mark.parametrize('line, fatal', [
    ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', True),
    ('RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.', True),
    ('RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.', True),
    ("KeyError: 'midlayer.self_attn.qkv_proj.weight'", True),
    ('[x] Initialization failed. warmup error: Traceback (most recent call last):', True),
    ('RuntimeError: Engine core initialization failed. See root cause above.', True),
    ('[x] Unexpected error during package walk: cutlass.cute.experimental', False),
    ("quant_api.py:1731: SyntaxWarning: invalid escape sequence '\\.'", False),
    ('[x] accept len: 1.00, accept rate: 0.00', False),
])
def test_default_fatal_patterns(line, fatal):
    compiled = startup_log.compile_patterns(startup_log.DEFAULT_FATAL_PATTERNS)
    assert (startup_log.find_fatal(line, compiled) is not None) is fatal


def test_vllm_crash_exceptions_root_cause_first_then_its_wrappers():
    tracker = exceptions_of(read_lines(VLLM_CRASH))
    assert tracker.exceptions[0].startswith(VLLM_ROOT_CAUSE)
    assert len(tracker.exceptions[0]) == startup_log.MAX_EXCEPTION_CHARS + 3  # the parameter set is cut
    # the worker's prefix is gone; EngineCore's prefixed and unprefixed copies count once
    assert tracker.exceptions[1:] == [
        'Exception: WorkerProc initialization failed due to an exception in a background process. '
        'See stack trace for root cause.',
        VLLM_WRAPPER,
    ]
    assert tracker.open == []


def test_sglang_scheduler_exception_ends_with_the_missing_module():
    tracker = exceptions_of(read_lines(os.path.join(FIXTURES, 'failures', 'scheduler-exception-during-cuda-graph-capture.log')))
    assert tracker.exceptions == ["ModuleNotFoundError: No module named 'cutlass'"]


@pytest.mark.parametrize('path', [os.path.join(FIXTURES, run, 'log') for run in GOOD_RUNS] + [VLLM_EAGER_START, SGLANG_H200_START])
def test_genuine_good_starts_have_no_exception(path):
    assert exceptions_of(read_lines(path)).exceptions == []


@pytest.mark.parametrize('lines, exceptions', [
    # interleaved lines of other processes and warnings do not end a traceback
    (['Traceback (most recent call last):', '  File "a.py", line 1, in <module>', '[x] INFO:     127.0.0.1 - "GET /health"',
      '/opt/x/semantic.py:1670: UserWarning: tl.where is deprecated', '[x] Received sigquit from a child process.',
      'AssertionError'], ['AssertionError']),
    # the message of an exception line may be anything; a bare name must look like an exception
    (['Traceback (most recent call last):', 'Done', 'torch.OutOfMemoryError: CUDA out of memory.'],
     ['torch.OutOfMemoryError: CUDA out of memory.']),
    # two processes' tracebacks, interleaved
    (['(Worker pid=1) ERROR 12-02 10:16:15 [a.py:9] Traceback (most recent call last):',
      '(EngineCore pid=2) ERROR 12-02 10:16:15 [b.py:9] Traceback (most recent call last):',
      '(EngineCore pid=2) ERROR 12-02 10:16:15 [b.py:9]   File "b.py", line 2',
      '(Worker pid=1) ERROR 12-02 10:16:15 [a.py:9] KeyError: \'lm_head.weight\'',
      '(EngineCore pid=2) ERROR 12-02 10:16:15 [b.py:9] Exception: WorkerProc initialization failed'],
     ["KeyError: 'lm_head.weight'", 'Exception: WorkerProc initialization failed']),
    # an exception-looking line outside a traceback is not one
    (['[x] Exception: not in a traceback'], []),
])
def test_traceback_tracker(lines, exceptions):
    assert exceptions_of(lines).exceptions == exceptions


@pytest.mark.parametrize('line, phase', [
    # every --enforce-eager start of vLLM says this: it must not announce a compile
    ('(APIServer pid=10461) WARNING 12-02 10:15:13 [vllm.py:1703] Enforce eager set, disabling torch.compile, '
     'CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none', None),
    ('(EngineCore pid=1) INFO 12-02 10:00:01 [backends.py:1105] Using cache directory: /root/.cache/vllm/torch_compile_cache/'
     'a1b2/rank_0_0/backbone for vLLM\'s torch.compile', 'compile'),
    ("(EngineCore pid=1) INFO 12-02 10:00:01 [backends.py:1102] vLLM's torch.compile cache is disabled.", 'compile'),
    ('(EngineCore pid=1) INFO 12-02 10:00:09 [backends.py:1167] Dynamo bytecode transform time: 5.12 s', 'compile'),
    ('(EngineCore pid=1) INFO 12-02 10:00:20 [monitor.py:20] torch.compile took 18.40 s in total', 'compile'),
    ('[x] server_args=ServerArgs(enable_torch_compile=False, torch_compile_max_bs=32)', None),
])
def test_compile_phase_only_when_vllm_compiles(line, phase):
    assert startup_log.match_phase(line) == phase


def test_genuine_vllm_eager_start_has_no_compile_phase():
    phases, fatal = scan(VLLM_EAGER_START)
    assert phases == ['distributed_init', 'load_weights', 'kv_cache', 'http_server']
    assert fatal == []


def test_genuine_sglang_h200_start_timeline(tmp_path):
    """The phases of the recorded H200 run (events.jsonl of tests/gpu/results/2026-12-02-h200/
    phase-a/h200-proof/03-deploy) from its server.log, announced by the right lines."""
    waiter = unreachable_waiter(SGLANG_H200_START)
    assert waiter.run(0.3) == wait.STATUS_WAITING
    assert [(p['phase'], p.get('line')) for p in waiter.phases] == [
        ('launching', None),
        ('distributed_init', '[2026-12-02 11:29:28] Init torch distributed begin.'),
        ('load_weights', '[2026-12-02 11:29:34] Load weight begin. avail mem=139.09 GB'),
        ('kv_cache', '[2026-12-02 11:29:36] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 17469560, '
                     'K size: 16.66 GB, V size: 16.66 GB'),
        ('cuda_graphs', [line for line in read_lines(SGLANG_H200_START) if 'CUDA graph begin' in line][0][:300]),
        ('http_server', '[2026-12-02 11:30:32] INFO:     Application startup complete.'),
        ('ready', '[2026-12-02 11:30:36] The server is fired up and ready to roll!'),
    ]
    assert waiter.phases[4]['line'].startswith('[2026-12-02 11:29:36] Capture target prefill CUDA graph begin. backend=')
    assert waiter.phase == 'ready' and waiter.tracebacks.exceptions == [] and waiter.fatal is None


SGLANG_0511_START = os.path.join(TESTS, 'fixtures', 'sglang-0.5.11-h200-proof', 'unfixed-layers0.server.log')


PHASES_0511 = [
    ('launching', ''),
    ('distributed_init', 'Init torch distributed begin.'),
    ('load_weights', 'Load weight begin. avail mem=139.13 GB'),
    ('kv_cache', 'KV Cache is allocated. #tokens: 21854358, K size: 2'),
    ('cuda_graphs', 'Capture cuda graph begin. This can take up to sev'),
    ('compile', 'Compiling a graph for dynamic shape takes 0.10 s'),
    ('http_server', 'INFO:     Application startup complete.'),
    ('ready', 'The server is fired up and ready to roll!'),
]


def test_genuine_sglang_0511_start_timeline():
    """0.5.11 captures the target's graphs before it loads the drafter: the phases still only go forward."""
    waiter = unreachable_waiter(SGLANG_0511_START)
    assert waiter.run(0.3) == wait.STATUS_WAITING
    # Each phase with the start of its line, after the time stamp.
    assert [(p['phase'], (p.get('line') or '')[22:][:len(start)]) for p, (dummy, start) in zip(waiter.phases, PHASES_0511)] \
        == PHASES_0511
    assert len(waiter.phases) == len(PHASES_0511)
    assert waiter.tracebacks.exceptions == [] and waiter.fatal is None


def test_current_phase_stays_while_sglang_initialises_the_drafter(tmp_path):
    lines = read_lines(SGLANG_H200_START)
    drafter_init = [n for n, line in enumerate(lines) if 'Init torch distributed begin' in line][1]
    log = tmp_path / 'server.log'
    append(log, '\n'.join(lines[:drafter_init + 1]) + '\n')
    waiter = unreachable_waiter(log)
    waiter.run(0.2)
    assert waiter.phase == 'load_weights'
    assert [p['phase'] for p in waiter.phases] == ['launching', 'distributed_init', 'load_weights']


def test_bad_pattern_is_named():
    with pytest.raises(ValueError, match=r"fatal pattern '\(unclosed' is not a valid regular expression"):
        startup_log.compile_patterns(['ok', '(unclosed'])


@pytest.mark.parametrize('raw, shown', [
    ('  0%|    | 0/8\rCapturing batches (bs=8):  12%|\rCapturing batches (bs=1): 100%|  \r', 'Capturing batches (bs=1): 100%|'),
    ("server_args=ServerArgs(api_key='s3cret', admin_api_key=None)", "server_args=ServerArgs(api_key='********', admin_api_key=None)"),
    ('python -m sglang.launch_server --api-key s3cret --port 1', 'python -m sglang.launch_server --api-key ******** --port 1'),
    ('\r\r', ''),
])
def test_display_line_keeps_last_progress_state_and_masks_keys(raw, shown):
    assert startup_log.split_display_line(raw) == shown


# A key with a quote, a backslash and a double quote: the forms that escaped the first masking.
KEY = 's3\'cr\\et"x'
KEY_PARTS = ('s3', 'cr', 'et"x', 'et\\"x')


@pytest.mark.parametrize('line, kept', [
    ('server_args=ServerArgs(api_key=%r, admin_api_key=None, port=1)' % KEY, ('api_key=\'********\'', 'admin_api_key=None, port=1')),
    ('server_args=ServerArgs(api_key=%r, port=1)' % "s3'cr\\et", ('api_key="********"', 'port=1')),
    ('{"api_key": %s, "port": 1}' % json.dumps(KEY), ('"api_key": "********"', '"port": 1')),
    ('launch: --api-key=%s --port 1' % KEY, ('--api-key=********',)),
    ('launch: --api-key %s --port 1' % "s3cr\\et", ('--api-key ******** --port 1',)),
    ("argv: ['--api-key', %r, '--port', '1']" % KEY, ("'--api-key', '********', '--port', '1'",)),
    ('header Authorization: Bearer %s' % KEY, ('Authorization: Bearer ********',)),
    ("headers {'Authorization': %r}" % ('Bearer ' + KEY), ("'Authorization': 'Bearer ********",)),
    ('"GET /v1/models?api_key=%s&x=1 HTTP/1.1" 401' % "s3cr\\et", ('?api_key=********&x=1',)),
    ('X-API-Key: %s' % KEY, ('X-API-Key: ********',)),
])
def test_every_form_of_the_api_key_is_masked(line, kept):
    shown = startup_log.split_display_line(line)
    assert not any(part in shown for part in KEY_PARTS), shown
    for text in kept:
        assert text in shown


def test_a_long_line_is_folded_once_masked():
    line = "server_args=ServerArgs(api_key='s3cret', " + ', '.join('option_%d=%d' % (n, n) for n in range(800)) + ')'
    folded = startup_log.fold_line(startup_log.split_display_line(line))
    assert folded.startswith("server_args=ServerArgs(api_key='********', option_0=0")
    assert folded.endswith(' ... [%d more characters folded]' % (len(line) + 2 - startup_log.FOLD_KEEP))
    assert len(folded) < startup_log.FOLD_CHARS
    assert startup_log.fold_line('short line') == 'short line'
