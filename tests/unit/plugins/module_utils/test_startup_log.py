"""plugins/module_utils/_health.py: phases and fatal patterns on genuine SGLang logs, probe
classification over real sockets, log following (rotation, truncation), journal following
with a stand-in journalctl, process watching with real child processes, the wait loop,
and acceptance-length extraction from the recorded endpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _health as health
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import (
    HANG,
    RESET,
    FIXTURES,
    FakeLLMServer,
    fixture_text,
    free_port,
    health_timeline,
    open_url_request,
)

GOOD_RUNS = ('eagle3-good-layers0', 'eagle3-good-mid', 'eagle3-random')
STARTUP_ORDER = ['distributed_init', 'load_weights', 'kv_cache', 'cuda_graphs', 'http_server', 'ready']


def scan(path):
    """Phases (first occurrence, in order) and fatal matches of a whole log file."""
    follower = health.LogFollower(str(path))
    lines = follower.poll() + [follower.partial]
    compiled = health.compile_patterns(health.DEFAULT_FATAL_PATTERNS)
    phases, fatal = [], []
    for line in lines:
        phase = health.match_phase(line)
        if phase and phase not in phases:
            phases.append(phase)
        if health.find_fatal(line, compiled):
            fatal.append(line)
    return phases, fatal


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
    assert health.match_phase(line) == phase


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
    compiled = health.compile_patterns(health.DEFAULT_FATAL_PATTERNS)
    assert (health.find_fatal(line, compiled) is not None) is fatal


# ------------------------------------------------------------------ real vLLM / SGLang logs
UNIT_FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures', 'health')
VLLM_CRASH = os.path.join(UNIT_FIXTURES, 'vllm-0.32.0-cpu-crash-draft-model-prefix.log')
VLLM_EAGER_START = os.path.join(UNIT_FIXTURES, 'vllm-0.32.0-cpu-enforce-eager-start.log')
SGLANG_H200_START = os.path.join(UNIT_FIXTURES, 'sglang-0.5.15.post1-h200-eagle3-depth5-start.log')
VLLM_ROOT_CAUSE = "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM."
VLLM_WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}"


def read_lines(path, count=None):
    with open(path, 'rb') as fh:
        lines = fh.read().decode('utf-8').split('\n')
    return lines[:count]


def exceptions_of(lines):
    tracker = health.TracebackTracker()
    for raw in lines:
        tracker.feed(health.split_display_line(raw))
    return tracker


def test_vllm_crash_exceptions_root_cause_first_then_its_wrappers():
    tracker = exceptions_of(read_lines(VLLM_CRASH))
    assert tracker.exceptions[0].startswith(VLLM_ROOT_CAUSE)
    assert len(tracker.exceptions[0]) == health.MAX_EXCEPTION_CHARS + 3  # the parameter set is cut
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
    assert health.match_phase(line) == phase


def test_genuine_vllm_eager_start_has_no_compile_phase():
    phases, fatal = scan(VLLM_EAGER_START)
    assert phases == ['distributed_init', 'load_weights', 'kv_cache', 'http_server']
    assert fatal == []


def unreachable_waiter(path):
    return health.Waiter(open_url_request('http://127.0.0.1:%d' % free_port()), interval=0.1,
                         log=health.LogFollower(str(path)))


def test_genuine_sglang_h200_start_timeline(tmp_path):
    """The phases of the recorded H200 run (events.jsonl of tests/gpu/results/2026-12-02-h200/
    phase-a/h200-proof/03-deploy) from its server.log, announced by the right lines."""
    waiter = unreachable_waiter(SGLANG_H200_START)
    assert waiter.run(0.3) == health.STATUS_WAITING
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


SGLANG_0511_START = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures',
                                 'sglang-0.5.11-h200-proof', 'unfixed-layers0.server.log')


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
    assert waiter.run(0.3) == health.STATUS_WAITING
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
        health.compile_patterns(['ok', '(unclosed'])


@pytest.mark.parametrize('raw, shown', [
    ('  0%|    | 0/8\rCapturing batches (bs=8):  12%|\rCapturing batches (bs=1): 100%|  \r', 'Capturing batches (bs=1): 100%|'),
    ("server_args=ServerArgs(api_key='s3cret', admin_api_key=None)", "server_args=ServerArgs(api_key='********', admin_api_key=None)"),
    ('python -m sglang.launch_server --api-key s3cret --port 1', 'python -m sglang.launch_server --api-key ******** --port 1'),
    ('\r\r', ''),
])
def test_display_line_keeps_last_progress_state_and_masks_keys(raw, shown):
    assert health.split_display_line(raw) == shown


# ------------------------------------------------------------------ probe classification
@pytest.mark.parametrize('status, kind', [
    (200, health.PROBE_READY), (204, health.PROBE_READY), (503, health.PROBE_STARTING),
    (500, health.PROBE_SERVER_ERROR), (502, health.PROBE_SERVER_ERROR), (404, health.PROBE_CLIENT_ERROR),
    (401, health.PROBE_CLIENT_ERROR),
])
def test_classify_status(status, kind):
    assert health.classify_status(status) == kind


@pytest.fixture
def server():
    fake = FakeLLMServer()
    yield fake
    fake.close()


@pytest.mark.parametrize('answer, kind, status', [
    ((200, b''), health.PROBE_READY, 200),
    ((503, b''), health.PROBE_STARTING, 503),
    ((500, b'{"detail": "boom"}'), health.PROBE_SERVER_ERROR, 500),
    ((404, b''), health.PROBE_CLIENT_ERROR, 404),
    (HANG, health.PROBE_TIMEOUT, None),
    (RESET, health.PROBE_DISCONNECTED, None),
])
def test_probe_over_a_real_socket(server, answer, kind, status):
    server.routes['/health'] = lambda method, body: answer
    probe = health.probe_health(open_url_request(server.url), '/health', timeout=0.5)
    assert (probe['kind'], probe['status']) == (kind, status)


def test_probe_refused():
    probe = health.probe_health(open_url_request('http://127.0.0.1:%d' % free_port()), '/health', 1)
    assert probe['kind'] == health.PROBE_REFUSED
    assert health.describe_probe(probe) == 'connection refused (not listening yet)'


def test_probe_tls_error_against_a_plain_http_port(server):
    server.routes['/health'] = lambda method, body: (200, b'')
    probe = health.probe_health(open_url_request(server.url.replace('http://', 'https://')), '/health', 2)
    assert probe['kind'] == health.PROBE_TLS_ERROR


@pytest.mark.parametrize('probe, text', [
    ({'kind': 'client_error', 'status': 401, 'detail': None}, 'HTTP 401, unexpected answer: check api_key / headers'),
    ({'kind': 'client_error', 'status': 404, 'detail': None}, 'HTTP 404, unexpected answer: check health_path'),
    ({'kind': 'starting', 'status': 503, 'detail': None}, 'HTTP 503, starting (warm-up not finished)'),
    ({'kind': 'tls_error', 'status': None, 'detail': 'wrong version number'}, 'TLS error: wrong version number'),
    (None, 'no probe yet'),
])
def test_describe_probe(probe, text):
    assert health.describe_probe(probe) == text


# ------------------------------------------------------------------ log following
def append(path, text, mode='a'):
    with open(path, mode) as fh:
        fh.write(text)


def test_log_follower_returns_complete_lines_and_resumes_from_its_state(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'one\ntwo\npar')
    follower = health.LogFollower(str(log))
    assert follower.poll() == ['one', 'two']
    assert follower.poll() == []
    state = follower.export()
    follower.close()
    append(log, 'tial\nthree\n')
    resumed = health.LogFollower(str(log), state)  # next module invocation
    assert resumed.poll() == ['partial', 'three']
    assert resumed.offset == os.path.getsize(log)


def test_log_follower_detects_truncation(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'old line 1\nold line 2\n')
    follower = health.LogFollower(str(log))
    assert len(follower.poll()) == 2
    append(log, 'new\n', mode='w')
    assert follower.poll() == ['new']
    assert 'truncated' in follower.events[0]


def test_log_follower_detects_rotation_and_reads_the_rest_of_the_old_file(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a\n')
    follower = health.LogFollower(str(log))
    assert follower.poll() == ['a']
    os.rename(str(log), str(log) + '.1')
    append(str(log) + '.1', 'b (written before the writer reopened)\n')
    append(log, 'c\n')
    assert follower.poll() == ['b (written before the writer reopened)', 'c']
    assert 'rotated' in follower.events[0]


def test_log_follower_detects_rotation_between_invocations(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a\nb\n')
    follower = health.LogFollower(str(log))
    follower.poll()
    state = follower.export()
    follower.close()
    os.rename(str(log), str(log) + '.1')
    append(log, 'fresh\n')
    resumed = health.LogFollower(str(log), state)
    assert resumed.poll() == ['fresh']
    assert 'rotated' in resumed.events[0]


def test_log_follower_reports_a_missing_file_until_it_appears(tmp_path):
    log = tmp_path / 'later.log'
    follower = health.LogFollower(str(log))
    assert follower.poll() == [] and follower.missing
    append(log, 'hello\n')
    assert follower.poll() == ['hello'] and not follower.missing


def test_log_follower_can_start_at_the_end(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a previous run\n')
    follower = health.LogFollower(str(log), start='end')
    assert follower.poll() == []
    append(log, 'this run\n')
    assert follower.poll() == ['this run']


FAKE_JOURNALCTL = r'''#!%s
import json, os, sys, time
with open(os.environ['FAKE_JOURNAL_ARGV'], 'a') as fh:
    fh.write(json.dumps(sys.argv[1:]) + '\n')
entries = json.load(open(os.environ['FAKE_JOURNAL']))
after = sys.argv[sys.argv.index('--after-cursor') + 1] if '--after-cursor' in sys.argv else None
if after:
    entries = entries[[e['__CURSOR'] for e in entries].index(after) + 1:]
for entry in entries:
    sys.stdout.write(json.dumps(entry) + '\n')
sys.stdout.flush()
time.sleep(30)
''' % sys.executable


def test_journal_follower_follows_the_current_invocation_and_resumes_after_its_cursor(tmp_path, monkeypatch):
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'journalctl').write_text(FAKE_JOURNALCTL)
    (bindir / 'journalctl').chmod(0o755)
    entries = [{'__CURSOR': 'c1', 'MESSAGE': 'Load weight begin. avail mem=139.09 GB'},
               {'__CURSOR': 'c2', 'MESSAGE': list(b'bytes \xff message')},
               {'__CURSOR': 'c3', 'MESSAGE': 'The server is fired up and ready to roll!'}]
    (tmp_path / 'journal.json').write_text(json.dumps(entries[:2]))
    monkeypatch.setenv('PATH', '%s:%s' % (bindir, os.environ['PATH']))
    monkeypatch.setenv('FAKE_JOURNAL', str(tmp_path / 'journal.json'))
    monkeypatch.setenv('FAKE_JOURNAL_ARGV', str(tmp_path / 'argv'))
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, 'inv-42\n'

    def poll_until(follower, count):
        lines, deadline = [], time.monotonic() + 10
        while len(lines) < count and time.monotonic() < deadline:
            lines += follower.poll()
        return lines

    follower = health.JournalFollower('sglang.service', run=run)
    assert poll_until(follower, 2) == ['Load weight begin. avail mem=139.09 GB', 'bytes \ufffd message']
    follower.close()
    assert calls == [['systemctl', 'show', '-p', 'InvocationID', '--value', 'sglang.service']]
    (tmp_path / 'journal.json').write_text(json.dumps(entries))
    resumed = health.JournalFollower('sglang.service', follower.export(), run=run)
    assert poll_until(resumed, 1) == ['The server is fired up and ready to roll!']
    resumed.close()
    argvs = [json.loads(line) for line in (tmp_path / 'argv').read_text().splitlines()]
    assert argvs[0][-3:] == ['_SYSTEMD_INVOCATION_ID=inv-42', '+', 'INVOCATION_ID=inv-42']
    assert argvs[1][argvs[1].index('--after-cursor') + 1] == 'c2'
    assert len(calls) == 1  # the invocation ID travelled in the state


# ------------------------------------------------------------------ process watch
@pytest.fixture
def spawn():
    children = []

    def start(code):
        child = subprocess.Popen([sys.executable, '-c', code])
        children.append(child)
        return child
    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError('condition not met within %s s' % timeout)


@pytest.mark.parametrize('code, exit_code', [
    ('raise SystemExit(3)', 3),
    ('import os, signal; os.kill(os.getpid(), signal.SIGKILL)', -9),
])
def test_process_watch_reports_the_exit_code_of_a_zombie(spawn, code, exit_code):
    child = spawn(code)
    watch = health.ProcessWatch(pid=child.pid)
    verdict = wait_for(watch.check)
    assert verdict['exit_code'] == exit_code


def test_process_watch_pidfile_appears_late_then_the_process_is_restarted(spawn, tmp_path):
    pidfile = tmp_path / 'server.pid'
    watch = health.ProcessWatch(pidfile=str(pidfile))
    assert watch.check() is None
    assert watch.notes == ['pidfile %s does not exist (yet)' % pidfile]
    first = spawn('import time; time.sleep(30)')
    pidfile.write_text('%d\n' % first.pid)
    assert watch.check() is None
    resumed = health.ProcessWatch(pidfile=str(pidfile), state=watch.export())  # next slice
    assert resumed.check() is None
    second = spawn('import time; time.sleep(30)')
    pidfile.write_text('%d\n' % second.pid)
    assert 'restarted' in resumed.check()['detail']


def test_process_watch_notices_pid_reuse(tmp_path):
    proc = tmp_path / 'proc'
    (proc / '4242').mkdir(parents=True)
    (proc / '4242' / 'cmdline').write_bytes(b'python\x00')

    def write_stat(starttime, state='S'):
        fields = [state] + ['0'] * 18 + [str(starttime)] + ['0'] * 30
        (proc / '4242' / 'stat').write_text('4242 (python) %s\n' % ' '.join(fields))
    write_stat(1000)
    watch = health.ProcessWatch(pid=4242, proc_root=str(proc))
    assert watch.check() is None
    write_stat(2000)
    assert 'belongs to another process' in watch.check()['detail']


def systemctl_show(**props):
    base = {'LoadState': 'loaded', 'ActiveState': 'active', 'SubState': 'running', 'MainPID': '0',
            'ExecMainCode': '0', 'ExecMainStatus': '0', 'Result': 'success'}
    base.update(props)
    return 0, ''.join('%s=%s\n' % item for item in base.items())


def test_process_watch_systemd_unit_gets_the_exit_code_from_systemd(spawn):
    child = spawn('import time; time.sleep(0.5)')
    answers = {'now': systemctl_show(MainPID=str(child.pid))}
    watch = health.ProcessWatch(unit='sglang.service', run=lambda argv: answers['now'])
    assert watch.check() is None
    child.wait()  # reaped: gone from /proc, so the fast path notices it and asks systemd
    answers['now'] = systemctl_show(ActiveState='failed', SubState='failed', ExecMainCode='1', ExecMainStatus='3',
                                    Result='exit-code')
    verdict = watch.check()
    assert verdict['exit_code'] == 3
    assert verdict['detail'] == 'systemd unit sglang.service is failed (failed, result exit-code)'


@pytest.mark.parametrize('props, exit_code, detail', [
    ({'ActiveState': 'activating', 'SubState': 'auto-restart', 'ExecMainCode': '2', 'ExecMainStatus': '9'}, -9, 'auto-restart'),
    ({'LoadState': 'not-found', 'ActiveState': 'inactive'}, None, 'not found'),
    ({'ActiveState': 'inactive', 'SubState': 'dead'}, None, 'inactive'),
])
def test_process_watch_systemd_unit_states(props, exit_code, detail):
    watch = health.ProcessWatch(unit='sglang.service', run=lambda argv: systemctl_show(**props))
    verdict = watch.check()
    assert verdict['exit_code'] == exit_code and detail in verdict['detail']


# ------------------------------------------------------------------ the wait loop
def make_waiter(server, **kwargs):
    kwargs.setdefault('interval', 0.1)
    return health.Waiter(open_url_request(server.url), **kwargs)


def test_waiter_ready_after_warmup_503s(server):
    server.routes['/health'] = health_timeline((0, 503), (0.4, 200))
    waiter = make_waiter(server)
    assert waiter.run(10) == health.STATUS_READY
    assert [p['phase'] for p in waiter.phases] == ['launching', 'warmup', 'ready']
    assert 0.35 < waiter.elapsed() < 1.5


@pytest.mark.parametrize('threshold, status', [(1, health.STATUS_READY), (2, health.STATUS_TIMEOUT)])
def test_waiter_success_threshold_against_a_flapping_server(server, threshold, status):
    flips = {'n': 0}

    def flapping(method, body):
        flips['n'] += 1
        return (200 if flips['n'] % 2 else 503), b''
    server.routes['/health'] = flapping
    waiter = make_waiter(server, success_threshold=threshold, timeout=1.0)
    assert waiter.run(10) == status


def test_waiter_reports_a_crash_within_a_second_whatever_the_interval(server, spawn):
    child = spawn('import time; time.sleep(0.3); raise SystemExit(7)')
    waiter = make_waiter(server, interval=30, process=health.ProcessWatch(pid=child.pid))
    start = time.monotonic()
    assert waiter.run(30) == health.STATUS_CRASHED
    assert time.monotonic() - start < 1.3
    assert waiter.exit['exit_code'] == 7


def test_waiter_fatal_line_while_the_process_lives(server, spawn, tmp_path):
    log = tmp_path / 'server.log'
    append(log, '[x] Load weight begin. avail mem=139.09 GB\n')
    child = spawn('import time; time.sleep(30)')
    waiter = make_waiter(server, interval=30, log=health.LogFollower(str(log)),
                         process=health.ProcessWatch(pid=child.pid))
    append(log, '[x] Scheduler hit an exception: Traceback (most recent call last):\n  File "x.py"\n'
                "KeyError: 'midlayer.self_attn.qkv_proj.weight'\n")
    assert waiter.run(10) == health.STATUS_FATAL_LOG
    assert waiter.phase == 'load_weights'
    assert waiter.fatal['matches'] == ['[x] Scheduler hit an exception: Traceback (most recent call last):',
                                       "KeyError: 'midlayer.self_attn.qkv_proj.weight'"]


def test_waiter_slices_shorter_than_a_health_answer_still_get_ready(server):
    def slow_healthy(method, body):
        time.sleep(0.5)  # the server's answer time (SGLang: a 1-token generation, ~1 s)
        return 200, b''
    server.routes['/health'] = slow_healthy
    state, elapsed, statuses = None, 0.0, []
    while elapsed < 5 and health.STATUS_READY not in statuses:
        waiter = make_waiter(server, state=state, elapsed=elapsed, timeout=5)
        statuses.append(waiter.run(0.2))
        state, elapsed = waiter.export(), waiter.elapsed()
    assert statuses[0] == health.STATUS_READY
    assert elapsed < 1.5


def test_waiter_stalls_when_neither_log_nor_health_moves(server, tmp_path):
    log = tmp_path / 'server.log'
    append(log, '[x] Capture cuda graph begin.\n')
    waiter = make_waiter(server, stall_timeout=0.6, log=health.LogFollower(str(log)))
    assert waiter.run(10) == health.STATUS_STALLED
    assert waiter.phase == 'cuda_graphs'
    assert 0.5 < waiter.elapsed() < 2


def test_waiter_stall_check_is_off_without_a_log(server):
    waiter = make_waiter(server, stall_timeout=0.3, timeout=1.0)
    assert waiter.run(10) == health.STATUS_TIMEOUT


def test_waiter_slices_carry_phases_log_offset_and_elapsed_time(server, tmp_path):
    server.routes['/health'] = health_timeline((0, 503))
    log = tmp_path / 'server.log'
    append(log, '[x] Init torch distributed begin.\n')
    first = make_waiter(server, log=health.LogFollower(str(log)), timeout=30)
    assert first.run(0.3) == health.STATUS_WAITING
    assert first.new_lines == ['[x] Init torch distributed begin.']
    append(log, '[x] Load weight begin.\n')
    second = make_waiter(server, log=health.LogFollower(str(log), first.log.export()), timeout=30,
                         state=first.export(), elapsed=first.elapsed())
    assert second.run(0.3) == health.STATUS_WAITING
    assert second.new_lines == ['[x] Load weight begin.']
    assert [p['phase'] for p in second.phases] == ['launching', 'distributed_init', 'warmup', 'load_weights']
    assert second.elapsed() >= 0.6


# ------------------------------------------------------------------ after ready
@pytest.mark.parametrize('run, expected', [('eagle3-random', 1.016), ('eagle3-good-mid', 4.92), ('plain', None)])
def test_accept_length_from_recorded_generate_meta_info(run, expected):
    meta = json.loads(fixture_text(run, 'generate.json'))['meta_info']
    value = health.accept_length_from_meta(meta)
    assert value == pytest.approx(expected, abs=0.01) if expected else value is None


def test_accept_length_from_meta_without_the_ratio_field():
    assert health.accept_length_from_meta({'completion_tokens': 64, 'spec_verify_ct': 16}) == 4.0


@pytest.mark.parametrize('run, name, expected', [
    ('eagle3-good-mid', 'ep.get_server_info.after.txt', None),   # avg_spec_accept_length absent
    ('eagle3-random', 'ep.get_server_info.after.txt', 1.0),
    ('eagle3-random', 'ep.get_server_info.txt', None),           # null before traffic
])
def test_server_info_summary_from_recordings(run, name, expected):
    summary = health.summarize_server_info(json.loads(fixture_text(run, name)))
    assert summary['engine'] == 'sglang' and summary['version'] == '0.5.15.post1'
    assert (summary['speculative_algorithm'], summary['speculative_depth']) == ('EAGLE3', 5)
    assert summary['avg_spec_accept_length'] == expected


@pytest.mark.parametrize('served, asked, source', [
    # 0.5.15 answers both and logs a deprecation for every /get_server_info: ask /server_info only.
    (('/server_info', '/get_server_info'), ['/server_info'], '/server_info'),
    (('/get_server_info',), ['/server_info', '/get_server_info'], '/get_server_info'),  # an older SGLang
    (('/version',), ['/server_info', '/get_server_info', '/version'], '/version'),    # vLLM
])
def test_server_info_asks_the_current_endpoint_first(served, asked, source):
    body = {'/version': '{"version": "0.32.0"}'}
    calls = []

    def request(method, path, timeout):
        calls.append(path)
        if path not in served:
            return 404, b'{"detail":"Not Found"}'
        return 200, body.get(path, fixture_text('eagle3-random', 'ep.server_info.txt')).encode()

    summary, dummy = health.fetch_server_info(request, timeout=1)
    assert calls == asked
    assert summary['source'] == source


def test_sglang_gauge_at_zero_means_no_data():
    metrics = health.parse_prometheus(fixture_text('eagle3-random', 'ep.metrics.txt'))
    assert health.accept_length_from_metrics_with_source(None, metrics) == (None, None)


def test_vllm_counter_deltas():
    before = health.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 10.0\n'
                                     'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 5.0\n')
    after = health.parse_prometheus('vllm:spec_decode_num_drafts_total{model_name="m"} 30.0\n'
                                    'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 45.0\n')
    value, source = health.accept_length_from_metrics_with_source(before, after)
    assert value == 3.0 and source.startswith('metrics:vllm:')
    assert health.speculative_enabled({'engine': 'vllm'}, before, after) is True


@pytest.mark.parametrize('kind, answer, ok, tokens, text', [
    ('generate', (200, fixture_text('eagle3-random', 'generate.json')), True, 64, ''),
    ('completions', (200, {'choices': [{'text': ' Paris'}], 'usage': {'completion_tokens': 2}}), True, 2, ' Paris'),
    ('completions', (200, {'choices': [{'text': ''}], 'usage': {'completion_tokens': 0}}), False, 0, ''),
    ('generate', (500, {'detail': 'boom'}), False, None, None),
])
def test_smoke_request(server, kind, answer, ok, tokens, text):
    server.routes['/generate' if kind == 'generate' else '/v1/completions'] = lambda method, body: answer
    server.routes['/v1/models'] = lambda method, body: (200, fixture_text('eagle3-random', 'ep.v1_models.txt'))
    result = health.smoke_request(open_url_request(server.url), kind, 'Hello', 8)
    assert (result['ok'], result['tokens'], result['text']) == (ok, tokens, text)
    if kind == 'completions':
        assert server.requests[-1][3]['model'] == '/tmp/sglmodels/target'


def test_accept_length_message_points_at_the_drafter():
    text = health.accept_length_message(1.016, 1.5, 'generate:meta_info',
                                        {'speculative_algorithm': 'EAGLE3', 'speculative_depth': 5})
    assert text.startswith('the drafter is not being accepted: accept length 1.02 < floor 1.50 (EAGLE3, depth 5')
    assert 'wrong layer names or missing lm_head' in text and 'drafter_checkpoint' in text


def test_waiter_does_not_end_a_slice_while_a_fatal_line_waits_for_its_traceback(server, tmp_path):
    server.routes['/health'] = health_timeline((0, 200))  # a healthy answer must not hide the fatal line
    log = tmp_path / 'server.log'
    append(log, '[x] Scheduler hit an exception: Traceback (most recent call last):\n')
    waiter = make_waiter(server, log=health.LogFollower(str(log)))
    assert waiter.run(0.05) == health.STATUS_FATAL_LOG
    assert waiter.elapsed() >= health.FATAL_GRACE_MAX  # the traceback never ended


def test_waiter_reads_a_traceback_written_in_two_parts_up_to_its_exception(server, tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n')
    rest = threading.Timer(health.FATAL_GRACE + 0.3, append, (log, "KeyError: 'midlayer.self_attn.qkv_proj.weight'\n"))
    rest.start()
    waiter = make_waiter(server, log=health.LogFollower(str(log)))
    try:
        assert waiter.run(10) == health.STATUS_FATAL_LOG
    finally:
        rest.join()
    assert waiter.tracebacks.exceptions == ["KeyError: 'midlayer.self_attn.qkv_proj.weight'"]
    assert waiter.elapsed() < health.FATAL_GRACE_MAX + 0.5


def test_waiter_on_the_real_vllm_crash_keeps_the_root_cause(server, spawn, tmp_path):
    lines = read_lines(VLLM_CRASH)
    value_error = [n for n, line in enumerate(lines) if VLLM_ROOT_CAUSE in line][0]
    log = tmp_path / 'server.log'
    append(log, '\n'.join(lines[:value_error + 1]) + '\n')  # as far as vLLM had written at the verdict
    child = spawn('import time; time.sleep(30)')
    waiter = make_waiter(server, interval=30, log=health.LogFollower(str(log)), process=health.ProcessWatch(pid=child.pid))
    assert waiter.run(10) == health.STATUS_FATAL_LOG
    assert waiter.phase == 'load_weights'
    assert waiter.fatal['line'].endswith('[multiproc_executor.py:953] Traceback (most recent call last):')
    assert [line[:len(VLLM_ROOT_CAUSE)] for line in waiter.tracebacks.exceptions] == [VLLM_ROOT_CAUSE]
    state = waiter.export()['tracebacks']
    assert health.TracebackTracker(json.loads(json.dumps(state))).exceptions == waiter.tracebacks.exceptions
