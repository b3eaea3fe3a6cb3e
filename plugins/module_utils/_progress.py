# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Long work on a host that the controller shows as it goes (model_stage, page_cache_warm).

The module does its checks in the foreground. Where long work remains (a copy, a manifest to hash, a
page cache warm-up) and its action plugin asked for progress (the private parameter ``_progress``:
``{'interval': seconds}``), it goes on in a detached worker process, which writes how far it got into
a small status file (mode 0600 in the host's temporary directory), and the module returns at once with
``progress_job``, the status file. The action plugin then calls the module again with
``_progress: {'status_file': ..., 'wait': seconds}``: the module waits on the host for at most that long,
and returns either the progress (bytes done, rate, time left) or the worker's final result, deleting
the status file. Nothing of this runs where there is no long work (a rerun that copies nothing is one
module run, as before).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time

from ansible.module_utils.common.warnings import get_deprecation_messages, get_warning_messages

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import NullIsUnsetModule

PARAMETER = '_progress'
WRITE_EVERY = 0.5  # seconds between two writes of the status file
START_TIMEOUT = 60.0  # seconds a worker may take to write its process id
UNITS = (('GiB', 1024 ** 3), ('MiB', 1024 ** 2), ('KiB', 1024))


def human_bytes(count):
    """``1.2 GiB``, ``210.0 MiB``, ``12 B``."""
    for unit, size in UNITS:
        if count >= size:
            return '%.1f %s' % (count / float(size), unit)
    return '%d B' % count


def human_seconds(seconds):
    if seconds < 120:
        return '%d s' % round(seconds)
    if seconds < 7200:
        return '%d min' % round(seconds / 60.0)
    return '%d h %02d min' % (seconds // 3600, round((seconds % 3600) / 60.0) % 60)


def snapshot(status, now=None):
    """What a status file says, with the rate and the time left: ``{what, done, total, seconds,
    bytes_per_second, seconds_left}`` (the last two None before anything is done)."""
    now = time.time() if now is None else now
    done, total = int(status.get('done') or 0), int(status.get('total') or 0)
    seconds = max(now - float(status.get('started') or now), 0.0)
    rate = int(done / seconds) if done and seconds > 0 else None
    left = (total - done) / float(rate) if rate else None
    return {'what': status.get('what') or 'done', 'done': done, 'total': total, 'seconds': round(seconds, 1),
            'bytes_per_second': rate, 'seconds_left': None if left is None else round(max(left, 0.0), 1)}


def progress_line(host, progress):
    """``<host>: staged 1.2 GiB of 4.0 GiB (30 %), 210.0 MiB/s, 14 s left`` (``progress``: snapshot())."""
    done, total = progress['done'], progress['total']
    percent = int(100 * done / total) if total else 100
    line = '%s: %s %s of %s (%d %%)' % (host, progress['what'], human_bytes(done), human_bytes(total), percent)
    if progress.get('bytes_per_second'):
        line += ', %s/s, %s left' % (human_bytes(progress['bytes_per_second']), human_seconds(progress['seconds_left']))
    else:
        line += ', %.0f s so far' % progress.get('seconds', 0)
    return line


def write_status(path, status):
    tmp = '%s.%d.tmp' % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as handle:
        json.dump(status, handle)
    os.replace(tmp, path)


def read_status(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def poll(path, wait, clock=time.monotonic, sleep=time.sleep, now=time.time):
    """Wait at most ``wait`` seconds for the worker of ``path``. Returns ``(finished, value)``: the
    worker's final status (``result``, or ``failed`` and ``msg``; the status file deleted), or the
    snapshot() of its progress."""
    deadline = clock() + wait
    while True:
        status = read_status(path)
        if status is None:
            return True, {'failed': True, 'msg': 'the status file %s of the background work is gone' % path}
        if status.get('finished'):
            os.unlink(path)
            return True, status
        pid = status.get('pid')
        if not pid and now() - float(status.get('started') or 0) > START_TIMEOUT:
            os.unlink(path)
            return True, {'failed': True, 'msg': 'the background work never started (%s)' % path}
        if pid and not _alive(pid):
            status = read_status(path) or {}
            if not status.get('finished'):
                os.unlink(path)
                return True, {'failed': True, 'msg': 'the background work (pid %d) ended without a result (killed?); '
                                                     'run the task again to finish it' % pid}
            continue
        if clock() >= deadline:
            return False, snapshot(status, now())
        sleep(min(0.2, max(deadline - clock(), 0.01)))


class Progress(object):
    """How far the work got; written to the status file at most every WRITE_EVERY seconds (a no-op in
    the foreground, where nobody watches)."""

    def __init__(self, path=None, clock=time.time):
        self.path = path
        self.clock = clock
        self.status = {'pid': os.getpid(), 'what': 'done', 'done': 0, 'total': 0, 'started': clock()}
        self.written = 0.0

    def phase(self, what, total):
        """A new piece of work: ``what`` (``staged``, ``hashed``, ...) of ``total`` bytes."""
        self.status.update(what=what, done=0, total=int(total), started=self.clock())
        self._write(force=True)

    def add(self, nbytes):
        self.status['done'] += nbytes
        self._write()

    def _write(self, force=False):
        if self.path is None:
            return
        now = self.clock()
        if force or now - self.written >= WRITE_EVERY:
            self.written = now
            write_status(self.path, self.status)


class Job(object):
    """The module's side of the protocol. ``request`` is the action plugin's ``_progress`` parameter
    (empty when the module runs without it: everything stays in the foreground)."""

    def __init__(self, module, request):
        self.module = module
        self.request = request or {}
        self.progress = Progress()
        self.worker = False

    def add(self, nbytes):
        """Count ``nbytes`` more done (in the worker, or nowhere)."""
        self.progress.add(nbytes)

    @property
    def polling(self):
        return bool(self.request.get('status_file'))

    def answer_poll(self):
        """Exit the module with the worker's progress or its final result (``cancel``: stop the worker, and fail
        with ``cancel`` as the message)."""
        path = self.request['status_file']
        if self.request.get('cancel'):
            status = read_status(path) or {}
            if status.get('pid') and not status.get('finished'):
                try:
                    os.kill(status['pid'], signal.SIGTERM)
                except OSError:
                    pass
            if os.path.exists(path):
                os.unlink(path)
            self.module.fail_json(msg=self.request['cancel'])
        finished, value = poll(path, float(self.request.get('wait') or 0))
        if not finished:
            self.module.exit_json(changed=False, progress_job=path, progress=value)
        if value.get('failed'):
            result = dict(value.get('result') or {})
            result.pop('failed', None)
            self.module.fail_json(msg=value.get('msg') or 'the background work failed', **result)
        result = value['result']
        self.module.exit_json(**result)

    def background(self, what, total, detach=False):
        """Go on with ``what`` (``total`` bytes) in a detached worker where the action plugin watches it (or
        ``detach``: the action plugin returns at once, and a later task waits for it): the module exits with
        ``progress_job`` here and the worker returns from this call. Else (or already in the worker) a new phase of
        the progress."""
        if self.worker or not (self.request.get('interval') or (detach and self.request)):
            self.progress.phase(what, total)
            return
        fd, path = tempfile.mkstemp(prefix='.llmops-progress-', suffix='.json')
        os.close(fd)
        progress = Progress(path)
        progress.status['pid'] = None  # the worker's, once it runs
        progress.phase(what, total)
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
            self.module.exit_json(changed=False, progress_job=path, progress=snapshot(progress.status))
        # the first child: a session of its own, then the worker, which nobody waits for
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        self.worker = True
        self.progress = progress
        progress.status['pid'] = os.getpid()
        progress.phase(what, total)

    def _finish(self, status):
        warnings = list(get_warning_messages())
        if warnings:
            status.setdefault('result', {})['warnings'] = warnings
        deprecations = list(get_deprecation_messages())
        if deprecations:
            status.setdefault('result', {})['deprecations'] = deprecations
        status['finished'] = True
        write_status(self.progress.path, status)
        os._exit(0)

    def exit(self, **result):
        if self.worker:
            self._finish({'result': result})
        self.module.exit_json(**result)

    def fail(self, msg, **result):
        if self.worker:
            self._finish({'failed': True, 'msg': msg, 'result': result})
        self.module.fail_json(msg=msg, **result)


class ProgressModule(NullIsUnsetModule):
    """NullIsUnsetModule that takes the action plugin's private ``_progress`` parameter out of the
    parameters (as ``job_request``)."""

    def _load_params(self):
        super(ProgressModule, self)._load_params()
        self.job_request = self.params.pop(PARAMETER, None) or {}
