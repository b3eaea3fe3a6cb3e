# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_progress.py: the progress lines of long work, the status file, the poll."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _progress
from ansible_collections.llmops.serving.plugins.module_utils._null_unset import without_nulls


@pytest.mark.parametrize('count, text', [
    (0, '0 B'), (1023, '1023 B'), (2048, '2.0 KiB'), (210 * 1024 ** 2, '210.0 MiB'), (int(1.2 * 1024 ** 3), '1.2 GiB'),
])
def test_human_bytes(count, text):
    assert _progress.human_bytes(count) == text


def test_progress_line_with_rate_and_time_left():
    status = {'what': 'staged', 'done': 1024 ** 3, 'total': 4 * 1024 ** 3, 'started': 100.0}
    snap = _progress.snapshot(status, now=108.0)
    assert snap['bytes_per_second'] == 1024 ** 3 // 8 and snap['seconds_left'] == 24.0
    assert _progress.progress_line('ns1', snap) == 'ns1: staged 1.0 GiB of 4.0 GiB (25 %), 128.0 MiB/s, 24 s left'


def test_progress_line_before_anything_is_done():
    snap = _progress.snapshot({'what': 'hashed', 'done': 0, 'total': 100, 'started': 10.0}, now=12.0)
    assert _progress.progress_line('ns2', snap) == 'ns2: hashed 0 B of 100 B (0 %), 2 s so far'


@pytest.mark.parametrize('seconds, text', [(14.2, '14 s'), (600, '10 min'), (3 * 3600 + 120, '3 h 02 min')])
def test_human_seconds(seconds, text):
    assert _progress.human_seconds(seconds) == text


def test_progress_writes_at_most_every_half_second(tmp_path):
    now = [100.0]
    path = str(tmp_path / 'status.json')
    progress = _progress.Progress(path, clock=lambda: now[0])
    progress.phase('staged', 1000)
    progress.add(10)
    assert json.load(open(path))['done'] == 0  # written by phase() just before
    now[0] += 0.6
    progress.add(10)
    assert json.load(open(path))['done'] == 20 and oct(os.stat(path).st_mode & 0o777) == '0o600'


def test_progress_in_the_foreground_writes_nothing():
    progress = _progress.Progress()
    progress.phase('staged', 10)
    progress.add(5)
    assert progress.status['done'] == 5


def test_poll_returns_the_progress_then_the_result(tmp_path):
    path = str(tmp_path / 'status.json')
    _progress.write_status(path, {'pid': os.getpid(), 'what': 'staged', 'done': 5, 'total': 10, 'started': 1.0})
    finished, value = _progress.poll(path, 0)
    assert not finished and value['done'] == 5 and value['total'] == 10
    _progress.write_status(path, {'finished': True, 'result': {'changed': True}})
    finished, value = _progress.poll(path, 0)
    assert finished and value['result'] == {'changed': True} and not os.path.exists(path)


def test_poll_names_a_worker_that_died_without_a_result(tmp_path):
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    path = str(tmp_path / 'status.json')
    _progress.write_status(path, {'pid': dead.pid, 'what': 'staged', 'done': 5, 'total': 10, 'started': 1.0})
    finished, value = _progress.poll(path, 5)
    assert finished and value['failed'] and 'pid %d' % dead.pid in value['msg'] and not os.path.exists(path)


def test_poll_of_a_status_file_that_is_gone(tmp_path):
    finished, value = _progress.poll(str(tmp_path / 'nothing.json'), 0)
    assert finished and value['failed'] and 'is gone' in value['msg']


def test_null_is_unset():
    assert without_nulls({'a': None, 'b': 0, 'c': '', '_ansible_x': None}) == {'b': 0, 'c': '', '_ansible_x': None}


def test_poll_waits_for_a_worker_to_start_then_gives_up(tmp_path):
    path = str(tmp_path / 'status.json')
    _progress.write_status(path, {'pid': None, 'what': 'staged', 'done': 0, 'total': 10, 'started': 100.0})
    finished, value = _progress.poll(path, 0, now=lambda: 110.0)
    assert not finished and value['done'] == 0
    finished, value = _progress.poll(path, 0, now=lambda: 100.0 + _progress.START_TIMEOUT + 1)
    assert finished and value['failed'] and 'never started' in value['msg'] and not os.path.exists(path)
