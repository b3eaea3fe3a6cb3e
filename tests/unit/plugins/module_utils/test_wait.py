"""plugins/module_utils/_wait.py: probe classification over real sockets and the wait loop."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _log_follow as log_follow
from ansible_collections.llmops.serving.plugins.module_utils import _procs as procs
from ansible_collections.llmops.serving.plugins.module_utils import _startup_log as startup_log
from ansible_collections.llmops.serving.plugins.module_utils import _wait as wait
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils._health_helpers import (
    VLLM_CRASH,
    VLLM_ROOT_CAUSE,
    read_lines,
    append,
    make_waiter,
)
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import (
    HANG,
    RESET,
    free_port,
    health_answers,
    health_timeline,
    open_url_request,
)


# ------------------------------------------------------------------ probe classification
@pytest.mark.parametrize('status, kind', [
    (200, wait.PROBE_READY), (204, wait.PROBE_READY), (503, wait.PROBE_STARTING),
    (500, wait.PROBE_SERVER_ERROR), (502, wait.PROBE_SERVER_ERROR), (404, wait.PROBE_CLIENT_ERROR),
    (401, wait.PROBE_CLIENT_ERROR),
])
def test_classify_status(status, kind):
    assert wait.classify_status(status) == kind


@pytest.mark.parametrize('answer, kind, status', [
    ((200, b''), wait.PROBE_READY, 200),
    ((503, b''), wait.PROBE_STARTING, 503),
    ((500, b'{"detail": "boom"}'), wait.PROBE_SERVER_ERROR, 500),
    ((404, b''), wait.PROBE_CLIENT_ERROR, 404),
    (HANG, wait.PROBE_TIMEOUT, None),
    (RESET, wait.PROBE_DISCONNECTED, None),
])
def test_probe_over_a_real_socket(server, answer, kind, status):
    server.routes['/health'] = lambda method, body: answer
    probe = wait.probe_health(open_url_request(server.url), '/health', timeout=0.5)
    assert (probe['kind'], probe['status']) == (kind, status)


def test_probe_refused():
    probe = wait.probe_health(open_url_request('http://127.0.0.1:%d' % free_port()), '/health', 1)
    assert probe['kind'] == wait.PROBE_REFUSED
    assert wait.describe_probe(probe) == 'connection refused (not listening yet)'


def test_probe_tls_error_against_a_plain_http_port(server):
    server.routes['/health'] = lambda method, body: (200, b'')
    probe = wait.probe_health(open_url_request(server.url.replace('http://', 'https://')), '/health', 2)
    assert probe['kind'] == wait.PROBE_TLS_ERROR


@pytest.mark.parametrize('probe, text', [
    ({'kind': 'client_error', 'status': 401, 'detail': None}, 'HTTP 401, unexpected answer: check api_key / headers'),
    ({'kind': 'client_error', 'status': 404, 'detail': None}, 'HTTP 404, unexpected answer: check health_path'),
    ({'kind': 'starting', 'status': 503, 'detail': None}, 'HTTP 503, starting (warm-up not finished)'),
    ({'kind': 'tls_error', 'status': None, 'detail': 'wrong version number'}, 'TLS error: wrong version number'),
    (None, 'no probe yet'),
])
def test_describe_probe(probe, text):
    assert wait.describe_probe(probe) == text


def test_waiter_ready_after_warmup_503s(server):
    server.routes['/health'] = health_answers(503, 503, 503, 503)
    waiter = make_waiter(server)
    assert waiter.run(10) == wait.STATUS_READY
    assert [p['phase'] for p in waiter.phases] == ['launching', 'warmup', 'ready']
    assert waiter.elapsed() >= 0.4  # four waits of the interval (0.1 s) after the four 503s


def test_a_503_after_a_healthy_answer_is_a_health_generation_timeout_not_starting(server):
    answers = iter([503, 200])  # warm-up, healthy, then 503 for good

    def after_ready(method, body):
        return next(answers, 503), b''
    server.routes['/health'] = after_ready
    waiter = make_waiter(server, success_threshold=2, timeout=1.5)
    assert waiter.run(10) == wait.STATUS_TIMEOUT
    assert waiter.last_probe['kind'] == wait.PROBE_GENERATION_TIMEOUT
    assert wait.describe_probe(waiter.last_probe).startswith('HTTP 503, health generation timed out')
    # Carried to the next slice: a 503 there is still not "starting".
    again = make_waiter(server, success_threshold=2, timeout=0.5, state=waiter.export())
    again.run(10)
    assert again.last_probe['kind'] == wait.PROBE_GENERATION_TIMEOUT


@pytest.mark.parametrize('threshold, status', [(1, wait.STATUS_READY), (2, wait.STATUS_TIMEOUT)])
def test_waiter_success_threshold_against_a_flapping_server(server, threshold, status):
    flips = {'n': 0}

    def flapping(method, body):
        flips['n'] += 1
        return (200 if flips['n'] % 2 else 503), b''
    server.routes['/health'] = flapping
    waiter = make_waiter(server, success_threshold=threshold, timeout=1.0)
    assert waiter.run(10) == status


def test_waiter_reports_a_crash_within_a_second_whatever_the_interval(server, python_child):
    child = python_child('import time; time.sleep(0.3); raise SystemExit(7)')
    waiter = make_waiter(server, interval=30, process=procs.ProcessWatch(pid=child.pid))
    start = time.monotonic()
    assert waiter.run(30) == wait.STATUS_CRASHED
    assert time.monotonic() - start < 1.3
    assert waiter.exit['exit_code'] == 7


def test_waiter_fatal_line_while_the_process_lives(server, python_child, tmp_path):
    log = tmp_path / 'server.log'
    append(log, '[x] Load weight begin. avail mem=139.09 GB\n')
    child = python_child('import time; time.sleep(30)')
    waiter = make_waiter(server, interval=30, log=log_follow.LogFollower(str(log)),
                         process=procs.ProcessWatch(pid=child.pid))
    append(log, '[x] Scheduler hit an exception: Traceback (most recent call last):\n  File "x.py"\n'
                "KeyError: 'midlayer.self_attn.qkv_proj.weight'\n")
    assert waiter.run(10) == wait.STATUS_FATAL_LOG
    assert waiter.phase == 'load_weights'
    assert waiter.fatal['matches'] == ['[x] Scheduler hit an exception: Traceback (most recent call last):',
                                       "KeyError: 'midlayer.self_attn.qkv_proj.weight'"]


def test_waiter_slices_shorter_than_a_health_answer_still_get_ready(server):
    def slow_healthy(method, body):
        time.sleep(0.5)  # the server's answer time (SGLang: a 1-token generation, ~1 s)
        return 200, b''
    server.routes['/health'] = slow_healthy
    state, elapsed, statuses = None, 0.0, []
    while elapsed < 5 and wait.STATUS_READY not in statuses:
        waiter = make_waiter(server, state=state, elapsed=elapsed, timeout=5)
        statuses.append(waiter.run(0.2))
        state, elapsed = waiter.export(), waiter.elapsed()
    assert statuses[0] == wait.STATUS_READY
    assert elapsed < 1.5


def test_waiter_stalls_when_neither_log_nor_health_moves(server, tmp_path):
    log = tmp_path / 'server.log'
    append(log, '[x] Capture cuda graph begin.\n')
    waiter = make_waiter(server, stall_timeout=0.6, log=log_follow.LogFollower(str(log)))
    assert waiter.run(10) == wait.STATUS_STALLED
    assert waiter.phase == 'cuda_graphs'
    assert 0.5 < waiter.elapsed() < 2


def test_waiter_stall_check_is_off_without_a_log(server):
    waiter = make_waiter(server, stall_timeout=0.3, timeout=1.0)
    assert waiter.run(10) == wait.STATUS_TIMEOUT


def test_waiter_slices_carry_phases_log_offset_and_elapsed_time(server, tmp_path):
    server.routes['/health'] = health_timeline((0, 503))
    log = tmp_path / 'server.log'
    append(log, '[x] Init torch distributed begin.\n')
    first = make_waiter(server, log=log_follow.LogFollower(str(log)), timeout=30)
    assert first.run(0.3) == wait.STATUS_WAITING
    assert first.new_lines == ['[x] Init torch distributed begin.']
    append(log, '[x] Load weight begin.\n')
    second = make_waiter(server, log=log_follow.LogFollower(str(log), first.log.export()), timeout=30,
                         state=first.export(), elapsed=first.elapsed())
    assert second.run(0.3) == wait.STATUS_WAITING
    assert second.new_lines == ['[x] Load weight begin.']
    assert [p['phase'] for p in second.phases] == ['launching', 'distributed_init', 'warmup', 'load_weights']
    assert second.elapsed() >= 0.6


def test_waiter_does_not_end_a_slice_while_a_fatal_line_waits_for_its_traceback(server, tmp_path):
    server.routes['/health'] = health_timeline((0, 200))  # a healthy answer must not hide the fatal line
    log = tmp_path / 'server.log'
    append(log, '[x] Scheduler hit an exception: Traceback (most recent call last):\n')
    waiter = make_waiter(server, log=log_follow.LogFollower(str(log)))
    assert waiter.run(0.05) == wait.STATUS_FATAL_LOG
    assert waiter.elapsed() >= wait.FATAL_GRACE_MAX  # the traceback never ended


def test_waiter_reads_a_traceback_written_in_two_parts_up_to_its_exception(server, tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n')
    rest = threading.Timer(wait.FATAL_GRACE + 0.3, append, (log, "KeyError: 'midlayer.self_attn.qkv_proj.weight'\n"))
    rest.start()
    waiter = make_waiter(server, log=log_follow.LogFollower(str(log)))
    try:
        assert waiter.run(10) == wait.STATUS_FATAL_LOG
    finally:
        rest.join()
    assert waiter.tracebacks.exceptions == ["KeyError: 'midlayer.self_attn.qkv_proj.weight'"]
    assert waiter.elapsed() < wait.FATAL_GRACE_MAX + 0.5


def test_waiter_on_the_real_vllm_crash_keeps_the_root_cause(server, python_child, tmp_path):
    lines = read_lines(VLLM_CRASH)
    value_error = [n for n, line in enumerate(lines) if VLLM_ROOT_CAUSE in line][0]
    log = tmp_path / 'server.log'
    append(log, '\n'.join(lines[:value_error + 1]) + '\n')  # as far as vLLM had written at the verdict
    child = python_child('import time; time.sleep(30)')
    waiter = make_waiter(server, interval=30, log=log_follow.LogFollower(str(log)), process=procs.ProcessWatch(pid=child.pid))
    assert waiter.run(10) == wait.STATUS_FATAL_LOG
    assert waiter.phase == 'load_weights'
    assert waiter.fatal['line'].endswith('[multiproc_executor.py:953] Traceback (most recent call last):')
    assert [line[:len(VLLM_ROOT_CAUSE)] for line in waiter.tracebacks.exceptions] == [VLLM_ROOT_CAUSE]
    state = waiter.export()['tracebacks']
    assert startup_log.TracebackTracker(json.loads(json.dumps(state))).exceptions == waiter.tracebacks.exceptions


# ------------------------------------------------------------------ readiness: /ready where the server has it
def test_readiness_comes_from_ready_where_the_server_has_it(server):
    # SGLang >= 0.5.20: /ready says 503 until the warm-up passed; /health would run a
    # generation (here it never answers healthy, so only /ready can make the server ready)
    server.routes['/ready'] = health_answers(503, 503, 503)
    server.routes['/health'] = lambda method, body: (503, b'')
    waiter = make_waiter(server, timeout=5)
    assert waiter.run(10) == wait.STATUS_READY
    assert waiter.health_path == '/ready' and waiter.notes == []
    assert [p['phase'] for p in waiter.phases] == ['launching', 'warmup', 'ready']
    assert waiter.export()['health_path'] == '/ready'


@pytest.mark.parametrize('missing', [404, 401, 403])
def test_a_server_without_ready_is_waited_for_on_health(server, missing):
    # SGLang before 0.5.20 (404; 401 with an API key and none sent), vLLM, a multi-node rank >= 1
    asked = []

    def no_ready(method, body):
        asked.append('/ready')
        return missing, b''
    server.routes['/ready'] = no_ready
    server.routes['/health'] = health_answers(503, 503, 503)
    waiter = make_waiter(server, timeout=5)
    assert waiter.run(10) == wait.STATUS_READY
    assert waiter.health_path == '/health' and asked == ['/ready']  # asked once, then never again
    assert waiter.notes == ['/ready answered HTTP %d (no such route: SGLang before 0.5.20, vLLM or a node rank '
                            '>= 1): readiness from /health' % missing]
    # the next slice keeps /health without asking /ready again
    again = make_waiter(server, timeout=5, state=waiter.export())
    assert again.run(10) == wait.STATUS_READY and again.health_path == '/health' and asked == ['/ready']


def test_refused_and_503_from_ready_do_not_switch_to_health(server):
    server.routes['/ready'] = lambda method, body: (503, b'')
    server.routes['/health'] = lambda method, body: (200, b'')
    waiter = make_waiter(server, timeout=0.5)
    assert waiter.run(10) == wait.STATUS_TIMEOUT
    assert waiter.health_path == '/ready' and waiter.last_probe['kind'] == wait.PROBE_STARTING


def test_an_explicit_health_path_is_used_as_given(server):
    server.routes['/ready'] = lambda method, body: pytest.fail('/ready asked despite health_path')
    server.routes['/health_generate'] = lambda method, body: (200, b'')
    waiter = make_waiter(server, health_path='/health_generate', timeout=5)
    assert waiter.run(10) == wait.STATUS_READY and waiter.health_path == '/health_generate'


def test_a_503_from_ready_after_ready_is_paused_or_shutting_down_not_a_generation_timeout(server):
    answers = iter([503, 200])  # warm-up, ready, then paused for good

    def after_ready(method, body):
        return next(answers, 503), b''
    server.routes['/ready'] = after_ready
    waiter = make_waiter(server, success_threshold=2, timeout=1.5)
    assert waiter.run(10) == wait.STATUS_TIMEOUT
    assert waiter.last_probe['kind'] == wait.PROBE_NOT_READY
    assert wait.describe_probe(waiter.last_probe) == ('HTTP 503, not ready (503 from /ready after the server was ready: '
                                                      'paused, shutting down or unhealthy)')
