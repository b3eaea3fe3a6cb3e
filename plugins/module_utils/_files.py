# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files replaced atomically: written beside their destination, synced, renamed over it."""

from __future__ import annotations

import os
import tempfile


def write_atomically(path, data, mode, uid=-1, gid=-1):
    """Replace ``path`` by ``data`` (bytes), with ``mode`` and owner ``uid``/``gid`` (-1: the writer's) set before
    the rename, so that a crash leaves the old or the new file and the new one is never seen with other rights."""
    directory = os.path.dirname(path) or '.'
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
    try:
        os.fchmod(fd, mode)
        if uid != -1 or gid != -1:
            os.fchown(fd, uid, gid)
        with os.fdopen(fd, 'wb') as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
