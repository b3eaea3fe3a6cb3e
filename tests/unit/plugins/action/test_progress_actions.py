# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_stage's and page_cache_warm's action plugins (plugin_utils/_progress_action.py): one module run where
there is no long work; else a poll per progress_interval, one line per host each, until the result."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.serving.plugins.action.model_stage import ActionModule as ModelStage
from ansible_collections.llmops.serving.plugins.action.page_cache_warm import ActionModule as PageCacheWarm
from ansible_collections.llmops.serving.plugins.plugin_utils import _progress_action

PROGRESS = {'what': 'staged', 'done': 1024 ** 3, 'total': 4 * 1024 ** 3, 'seconds': 8.0,
            'bytes_per_second': 1024 ** 3 // 8, 'seconds_left': 24.0}


class Task:
    def __init__(self, args):
        self.args = args
        self.async_val = 0
        self.delegate_to = None
        self.check_mode = False


class Shell:
    tmpdir = None


class Connection:
    has_native_async = False
    _shell = Shell()


def run(cls, args, answers, monkeypatch):
    """Run the action with the module's answers in turn; returns (result, module args of each run, lines shown)."""
    plugin = cls.__new__(cls)
    plugin._task = Task(args)
    plugin._connection = Connection()
    calls, lines = [], []
    monkeypatch.setattr(ActionBase, 'run', lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ActionBase, '_remove_tmp_path', lambda self, path: None)

    def execute(self, module_name, module_args, task_vars, wrap_async=False):
        assert module_name == self.MODULE
        calls.append(dict(module_args))
        return dict(answers.pop(0))

    monkeypatch.setattr(ActionBase, '_execute_module', execute)
    monkeypatch.setattr(_progress_action.display, 'display', lines.append)
    result = plugin.run(task_vars={'inventory_hostname': 'ns1'})
    return result, calls, lines


def test_no_long_work_is_one_module_run(monkeypatch):
    result, calls, lines = run(ModelStage, {'name': 't', 'source': '/s', 'exclude': None},
                               [{'changed': False, 'path': '/m/t-1'}], monkeypatch)
    assert result == {'changed': False, 'path': '/m/t-1'} and lines == []
    assert calls == [{'name': 't', 'source': '/s', '_progress': {'interval': 10.0}}]  # null is unset


def test_a_copy_prints_a_line_per_poll_until_its_result(monkeypatch):
    answers = [{'changed': False, 'progress_job': '/tmp/j', 'progress': dict(PROGRESS, done=0)},
               {'changed': False, 'progress_job': '/tmp/j', 'progress': PROGRESS},
               {'changed': False, 'progress_job': '/tmp/j', 'progress': PROGRESS},
               {'changed': True, 'path': '/m/t-1'}]
    result, calls, lines = run(ModelStage, {'name': 't', 'source': '/s', 'progress_interval': 2}, answers, monkeypatch)
    assert result == {'changed': True, 'path': '/m/t-1'}
    assert lines == ['ns1: staged 1.0 GiB of 4.0 GiB (25 %), 128.0 MiB/s, 24 s left'] * 2
    assert [call['_progress'].get('status_file') for call in calls] == [None, '/tmp/j', '/tmp/j', '/tmp/j']
    assert 0 < calls[1]['_progress']['wait'] <= 2


def test_progress_interval_zero_runs_in_one_module_run(monkeypatch):
    result, calls, lines = run(ModelStage, {'name': 't', 'source': '/s', 'progress_interval': 0},
                               [{'changed': True}], monkeypatch)
    assert calls[0]['_progress'] == {} and lines == []


def test_wait_false_returns_the_job_and_job_waits_for_it(monkeypatch):
    started = {'changed': False, 'progress_job': '/tmp/w', 'progress': dict(PROGRESS, done=0)}
    result, calls, lines = run(PageCacheWarm, {'paths': ['/m'], 'wait': False}, [started], monkeypatch)
    assert result == {'changed': False, 'job': '/tmp/w'} and calls[0]['_progress'] == {'interval': 10.0, 'detach': True}
    done = {'changed': False, 'bytes': 10, 'summary': 'page cache warm-up: ...'}
    result, calls, lines = run(PageCacheWarm, {'job': '/tmp/w', 'progress_interval': 1}, [done], monkeypatch)
    assert result == done and calls[0]['_progress']['status_file'] == '/tmp/w' and lines == []


def test_a_job_past_its_timeout_is_stopped(monkeypatch):
    answers = [{'changed': False, 'progress_job': '/tmp/w', 'progress': PROGRESS},
               {'failed': True, 'msg': 'the page cache warm-up was not done after 0 s (timeout); stopped'}]
    result, calls, lines = run(PageCacheWarm, {'job': '/tmp/w', 'timeout': 0}, answers, monkeypatch)
    assert result['failed'] and calls[-1]['_progress'] == {
        'status_file': '/tmp/w', 'cancel': 'the page cache warm-up was not done after 0 s (timeout); stopped'}
