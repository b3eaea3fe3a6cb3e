# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/stage.py: jit_cache_env, the same table as _stage.JIT_CACHE_ENV."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.filter import stage
from ansible_collections.llmops.serving.plugins.module_utils import _stage


def test_jit_cache_env_filter():
    env = stage.FilterModule().filters()['jit_cache_env']('/var/lib/llmops/jit-cache')
    assert env == _stage.jit_cache_env('/var/lib/llmops/jit-cache')
    assert env['TORCHINDUCTOR_CACHE_DIR'] == '/var/lib/llmops/jit-cache/torchinductor'
