"""plugins/module_utils/_log_follow.py: log following (rotation, truncation) and journal following with a
stand-in journalctl."""

from __future__ import annotations

import json
import os
import sys
import time

from ansible_collections.llmops.serving.plugins.module_utils import _log_follow as log_follow
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils._health_helpers import (
    append,
)


def test_log_follower_returns_complete_lines_and_resumes_from_its_state(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'one\ntwo\npar')
    follower = log_follow.LogFollower(str(log))
    assert follower.poll() == ['one', 'two']
    assert follower.poll() == []
    state = follower.export()
    follower.close()
    append(log, 'tial\nthree\n')
    resumed = log_follow.LogFollower(str(log), state)  # next module invocation
    assert resumed.poll() == ['partial', 'three']
    assert resumed.offset == os.path.getsize(log)


def test_log_follower_detects_truncation(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'old line 1\nold line 2\n')
    follower = log_follow.LogFollower(str(log))
    assert len(follower.poll()) == 2
    append(log, 'new\n', mode='w')
    assert follower.poll() == ['new']
    assert 'truncated' in follower.events[0]


def test_log_follower_detects_rotation_and_reads_the_rest_of_the_old_file(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a\n')
    follower = log_follow.LogFollower(str(log))
    assert follower.poll() == ['a']
    os.rename(str(log), str(log) + '.1')
    append(str(log) + '.1', 'b (written before the writer reopened)\n')
    append(log, 'c\n')
    assert follower.poll() == ['b (written before the writer reopened)', 'c']
    assert 'rotated' in follower.events[0]


def test_log_follower_detects_rotation_between_invocations(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a\nb\n')
    follower = log_follow.LogFollower(str(log))
    follower.poll()
    state = follower.export()
    follower.close()
    os.rename(str(log), str(log) + '.1')
    append(log, 'fresh\n')
    resumed = log_follow.LogFollower(str(log), state)
    assert resumed.poll() == ['fresh']
    assert 'rotated' in resumed.events[0]


def test_log_follower_reports_a_missing_file_until_it_appears(tmp_path):
    log = tmp_path / 'later.log'
    follower = log_follow.LogFollower(str(log))
    assert follower.poll() == [] and follower.missing
    append(log, 'hello\n')
    assert follower.poll() == ['hello'] and not follower.missing


def test_log_follower_can_start_at_the_end(tmp_path):
    log = tmp_path / 'server.log'
    append(log, 'a previous run\n')
    follower = log_follow.LogFollower(str(log), start='end')
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
        return 0, 'inv-42\n', ''

    def poll_until(follower, count):
        lines, deadline = [], time.monotonic() + 10
        while len(lines) < count and time.monotonic() < deadline:
            lines += follower.poll()
        return lines

    follower = log_follow.JournalFollower('sglang.service', run=run)
    assert poll_until(follower, 2) == ['Load weight begin. avail mem=139.09 GB', 'bytes \ufffd message']
    follower.close()
    assert calls == [['systemctl', 'show', '-p', 'InvocationID', '--value', 'sglang.service']]
    (tmp_path / 'journal.json').write_text(json.dumps(entries))
    resumed = log_follow.JournalFollower('sglang.service', follower.export(), run=run)
    assert poll_until(resumed, 1) == ['The server is fired up and ready to roll!']
    resumed.close()
    argvs = [json.loads(line) for line in (tmp_path / 'argv').read_text().splitlines()]
    assert argvs[0][-3:] == ['_SYSTEMD_INVOCATION_ID=inv-42', '+', 'INVOCATION_ID=inv-42']
    assert argvs[1][argvs[1].index('--after-cursor') + 1] == 'c2'
    assert len(calls) == 1  # the invocation ID travelled in the state
