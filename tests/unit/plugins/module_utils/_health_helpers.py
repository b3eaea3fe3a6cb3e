"""Helpers shared by the tests of the start-up log, log following, process watching and the wait loop."""

from __future__ import annotations

import os
import time

from ansible_collections.llmops.serving.plugins.module_utils import _log_follow as log_follow
from ansible_collections.llmops.serving.plugins.module_utils import _startup_log as startup_log
from ansible_collections.llmops.serving.plugins.module_utils import _wait as wait
from ansible_collections.llmops.serving.tests.unit._fake_llm_server import free_port, open_url_request

GOOD_RUNS = ('eagle3-good-layers0', 'eagle3-good-mid', 'eagle3-random')
STARTUP_ORDER = ['distributed_init', 'load_weights', 'kv_cache', 'cuda_graphs', 'http_server', 'ready']
TESTS = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
UNIT_FIXTURES = os.path.join(TESTS, 'unit', 'fixtures', 'health')
VLLM_CRASH = os.path.join(UNIT_FIXTURES, 'vllm-0.32.0-cpu-crash-draft-model-prefix.log')
VLLM_EAGER_START = os.path.join(UNIT_FIXTURES, 'vllm-0.32.0-cpu-enforce-eager-start.log')
SGLANG_H200_START = os.path.join(UNIT_FIXTURES, 'sglang-0.5.15.post1-h200-eagle3-depth5-start.log')
VLLM_ROOT_CAUSE = "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM."
VLLM_WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}"


def scan(path):
    """Phases (first occurrence, in order) and fatal matches of a whole log file."""
    follower = log_follow.LogFollower(str(path))
    lines = follower.poll() + [follower.partial]
    compiled = startup_log.compile_patterns(startup_log.DEFAULT_FATAL_PATTERNS)
    phases, fatal = [], []
    for line in lines:
        phase = startup_log.match_phase(line)
        if phase and phase not in phases:
            phases.append(phase)
        if startup_log.find_fatal(line, compiled):
            fatal.append(line)
    return phases, fatal


def read_lines(path, count=None):
    with open(path, 'rb') as fh:
        lines = fh.read().decode('utf-8').split('\n')
    return lines[:count]


def exceptions_of(lines):
    tracker = startup_log.TracebackTracker()
    for raw in lines:
        tracker.feed(startup_log.split_display_line(raw))
    return tracker


def unreachable_waiter(path):
    return wait.Waiter(open_url_request('http://127.0.0.1:%d' % free_port()), interval=0.1,
                       log=log_follow.LogFollower(str(path)))


def append(path, text, mode='a'):
    with open(path, mode) as fh:
        fh.write(text)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError('condition not met within %s s' % timeout)


def systemctl_show(**props):
    base = {'LoadState': 'loaded', 'ActiveState': 'active', 'SubState': 'running', 'MainPID': '0',
            'ExecMainCode': '0', 'ExecMainStatus': '0', 'Result': 'success'}
    base.update(props)
    return 0, ''.join('%s=%s\n' % item for item in base.items()), ''


def make_waiter(server, **kwargs):
    kwargs.setdefault('interval', 0.1)
    return wait.Waiter(open_url_request(server.url), **kwargs)
