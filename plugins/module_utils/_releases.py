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
_PIN = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*==[^=<>!~*,; ]+$')


def _normal(pin):
    """``name==version`` with the name as pip compares it (PEP 503: lower case, runs of -_. as -)."""
    name, _, version = pin.partition('==')
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
