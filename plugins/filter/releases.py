# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters naming where an engine release lives (one virtualenv per release, side by side); each
filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import _releases


def release_venv(version, package='sglang', packages=None, root=_releases.DEFAULT_ROOT):
    try:
        return _releases.venv_path(package, version, packages or [], root)
    except ValueError as exc:
        raise AnsibleFilterError('release_venv: %s' % exc)


def release_python(version, venv=None, package='sglang', packages=None, root=_releases.DEFAULT_ROOT):
    try:
        return _releases.server_python(version, venv, package, packages or [], root)
    except ValueError as exc:
        raise AnsibleFilterError('release_python: %s' % exc)


class FilterModule:
    def filters(self):
        return {'release_venv': release_venv, 'release_python': release_python}
