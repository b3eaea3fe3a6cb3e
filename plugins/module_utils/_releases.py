# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an engine release is installed: one virtualenv per set of pins, side by side.

Private helper (not an API). The one rule that names the virtualenv of a release, used by the
``sglang_install`` role (where it installs) and the ``sglang_server`` role (which python it runs
where the user did not set one), both through the filters of ``plugins/filter/releases.py``.
"""

from __future__ import annotations

import hashlib
import os
import re

DEFAULT_ROOT = '/opt/llmops'
DEFAULT_PYTHON = '/usr/bin/python3'


def _normal(pin):
    """``name==version`` with the name as pip compares it (PEP 503: lower case, runs of -_. as -)."""
    name, version = pin.partition('==')[::2]
    return '%s==%s' % (re.sub(r'[-_.]+', '-', name.strip()).lower(), version.strip().lower())


def venv_name(package, version, packages=()):
    """``<package>-<version>``, and where more packages are pinned, ``-`` and the first 8 hex digits
    of the SHA-256 of those pins (normalised and sorted, so their order and spelling do not
    matter): another torch pin is another virtualenv, never an upgrade in place."""
    if not version or '/' in str(version) or str(version).startswith('.'):
        raise ValueError('an engine version such as 0.5.23 is needed to name its virtualenv, got %r' % (version,))
    package = re.sub(r'[-_.]+', '-', str(package or 'sglang')).lower()
    name = '%s-%s' % (package, version)
    extra = sorted(set(_normal(pin) for pin in packages or ()))
    if extra:
        name += '-' + hashlib.sha256('\n'.join(extra).encode()).hexdigest()[:8]
    return name


def venv_path(package, version, packages=(), root=DEFAULT_ROOT):
    """The virtualenv of a release: ``<root>/<venv_name>``."""
    return os.path.join(root or DEFAULT_ROOT, venv_name(package, version, packages))


def server_python(version=None, venv=None, package='sglang', packages=(), root=DEFAULT_ROOT):
    """The python a server runs where ``sglang_server_python`` is not set: that of the virtualenv
    ``venv`` (``sglang_install_venv`` set by hand), else that of the release ``version``
    (``sglang_install_version``), else the system's python (no release is managed here)."""
    if venv:
        return os.path.join(venv, 'bin', 'python')
    if version:
        return os.path.join(venv_path(package, version, packages, root), 'bin', 'python')
    return DEFAULT_PYTHON


def venv_of(python):
    """The virtualenv directory of a ``<venv>/bin/python`` path, or None for another python."""
    parts = str(python or '').rstrip('/').split('/')
    if len(parts) >= 3 and parts[-2] == 'bin' and parts[-1].startswith('python'):
        return '/'.join(parts[:-2]) or None
    return None


def is_venv(path):
    """A virtualenv directory (``pyvenv.cfg`` in it), not a symbolic link."""
    return os.path.isdir(path) and not os.path.islink(path) and os.path.isfile(os.path.join(path, 'pyvenv.cfg'))


def venv_users(venvs, proc='/proc'):
    """``{venv: [PID, ...]}``: the processes whose command line starts with a python of the virtualenv
    (``<venv>/bin/...``; a venv's python is a link to the system's, so its executable does not tell)."""
    from ansible_collections.llmops.serving.plugins.module_utils._procs import read_process
    users = {venv: [] for venv in venvs}
    prefixes = [(venv, os.path.join(venv, 'bin', '')) for venv in venvs]
    for name in os.listdir(proc):
        info = read_process(int(name), proc) if name.isdigit() and int(name) != os.getpid() else None
        if info is None or not info.cmdline:
            continue
        for venv, prefix in prefixes:
            if info.cmdline[0].startswith(prefix):
                users[venv].append(info.pid)
    return users


def record_users(state_dirs):
    """``{venv: ['<server>:<record id>', ...]}``: the virtualenvs whose python a kept good configuration
    (``_last_good``, every record of every server under ``state_dirs``) runs. ValueError for an
    unreadable record: pruning then keeps everything."""
    from ansible_collections.llmops.serving.plugins.module_utils._last_good import Record
    users = {}
    for state_dir in state_dirs:
        names = sorted(os.listdir(state_dir)) if os.path.isdir(state_dir) else []
        for filename in names:
            if not filename.endswith('.json') or filename.startswith('.'):
                continue
            server = filename[:-len('.json')]
            for item in Record(state_dir, server).history():
                venv = venv_of(item['metadata'].get('python'))
                if venv:
                    users.setdefault(os.path.normpath(venv), []).append('%s:%s' % (server, item['id']))
    return users


def disk_usage(path):
    """Bytes of the files under ``path`` (links not followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def survey(root, keep=(), state_dirs=(), extra=(), proc='/proc'):
    """Every virtualenv directly under ``root`` (and those of ``extra`` that exist), newest name last,
    each ``{path, bytes, in_use, records, kept, why}``: kept when a process runs it, a kept good
    configuration names it, or it is one of ``keep`` (virtualenvs or pythons in them)."""
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    paths = [os.path.join(root, name) for name in names]
    paths += [os.path.normpath(path) for path in extra if os.path.normpath(path) not in paths]
    venvs = [path for path in paths if is_venv(path)]
    users, records = venv_users(venvs, proc), record_users(state_dirs)
    wanted = set(os.path.normpath(venv_of(path) or path) for path in keep if path)
    out = []
    for venv in venvs:
        why = (['run by PID %s' % ', '.join(str(pid) for pid in users[venv])] if users[venv] else []) \
            + (['named by the good configuration(s) %s' % ', '.join(records[venv])] if venv in records else []) \
            + (['wanted by this host\'s settings'] if venv in wanted else [])
        out.append(dict(path=venv, bytes=disk_usage(venv), in_use=users[venv], records=records.get(venv, []),
                        kept=bool(why), why='; '.join(why) or 'nothing needs it'))
    return out


def prune_summary(removed, freed_bytes, venvs, check_mode=False):
    """One line on a prune: what was (or would be) removed, the space freed and what was kept (needed)."""
    return '%s %s, %s MiB freed; kept (needed): %s' % (
        'would remove' if check_mode else 'removed', ', '.join(removed) or 'nothing', round(freed_bytes / 1048576, 1),
        ', '.join(venv['path'] for venv in venvs if venv['kept']) or 'none')
