# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One rollout at a time: a lock file per fleet on a host every rollout of that fleet reaches (its
router hosts, else its first server host). Pure decisions (``decide``, ``holder_text``) and the
file operations under an advisory lock of the directory (``LockFile``)."""

from __future__ import annotations

import fcntl
import json
import os
import time

from ansible_collections.llmops.serving.plugins.module_utils._files import write_atomically

# What a holder records: who, from where, which process and playbook, since when, and the run's id.
HOLDER_KEYS = ('id', 'owner', 'controller', 'pid', 'playbook', 'started')


class LockError(Exception):
    pass


def holder_text(holder, now=None):
    """``ops@laptop (ansible-playbook PID 4242, deploy.yml) since 2026-12-07 05:40:00 UTC (12 min ago)``."""
    started = float(holder.get('started') or 0)
    text = '%s@%s (ansible-playbook PID %s, %s) since %s' % (
        holder.get('owner', '?'), holder.get('controller', '?'), holder.get('pid', '?'), holder.get('playbook', '?'),
        time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(started)))
    if now is not None:
        text += ' (%s ago)' % age_text(now - started)
    return text


def age_text(seconds):
    seconds = max(0, int(seconds))
    if seconds < 120:
        return '%d s' % seconds
    if seconds < 7200:
        return '%d min' % (seconds // 60)
    return '%.1f h' % (seconds / 3600.0)


def decide(current, holder, now, stale_after, break_lock, gone_id=None):
    """What to do with the lock held by ``current`` (None: free) for ``holder``: ``('take', reason)``,
    ``('keep', None)`` (this run holds it already) or ``('refuse', reason)``. A holder whose process is known
    to be gone (``gone_id``, checked by the controller that ran it) or older than ``stale_after`` seconds is
    stale: taken over when its process is gone or with ``break_lock``, else refused with the way out."""
    if current is None:
        return 'take', None
    if current.get('id') == holder['id']:
        return 'keep', None
    held = holder_text(current, now)
    if gone_id and current.get('id') == gone_id:
        return 'take', 'took over the rollout lock of %s: that ansible-playbook process is gone' % held
    if now - float(current.get('started') or 0) > stale_after:
        if break_lock:
            return 'take', 'broke the rollout lock of %s: older than %s (llmops_break_lock)' % (
                held, age_text(stale_after))
        return 'refuse', ('another rollout holds the lock: %s, older than %s, so probably dead; nothing was stopped '
                          'or changed. If no rollout of this fleet runs, rerun with -e llmops_break_lock=true'
                          % (held, age_text(stale_after)))
    if break_lock:
        return 'take', 'broke the rollout lock of %s (llmops_break_lock)' % held
    return 'refuse', ('another rollout holds the lock: %s; nothing was stopped or changed. Wait for it to end, or, '
                      'if it is dead, rerun with -e llmops_break_lock=true' % held)


class LockFile(object):
    """The lock file ``<directory>/<name>.json``; every read-decide-write runs under ``flock`` of
    ``<directory>/.<name>.guard``, so two runs that arrive together cannot both take it."""

    def __init__(self, directory, name):
        if not name or '/' in name or name.startswith('.'):
            raise LockError('rollout lock name %r: use letters, digits, "-" or "_"' % name)
        self.directory = directory
        self.path = os.path.join(directory, name + '.json')
        self.guard = os.path.join(directory, '.%s.guard' % name)
        self._fd = None

    def __enter__(self):
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, 0o700)
        self._fd = os.open(self.guard, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self._fd)
        self._fd = None

    def read(self):
        try:
            with open(self.path, 'rb') as handle:
                data = json.loads(handle.read().decode('utf-8'))
        except FileNotFoundError:
            return None
        except ValueError:
            # A torn or foreign file: it names no holder, so nobody is refused because of it.
            return None
        return data if isinstance(data, dict) else None

    def write(self, holder):
        write_atomically(self.path, json.dumps(holder, sort_keys=True).encode('utf-8'), 0o600)

    def remove(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
