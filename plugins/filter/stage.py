# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter about warm starts; each filter is documented in the YAML file of its
name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _stage


def jit_cache_env(cache_dir):
    """The environment variables that put every engine JIT cache under ``cache_dir``."""
    return _stage.jit_cache_env(str(cache_dir))


class FilterModule:
    def filters(self):
        return {'jit_cache_env': jit_cache_env}
