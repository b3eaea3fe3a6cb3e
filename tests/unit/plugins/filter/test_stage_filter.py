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


def test_summaries():
    result = {'path': '/m/target-1', 'files_copied': 4, 'files': 4, 'bytes_copied': 1200, 'seconds': 0.5,
              'bytes_per_second': 2400, 'pruned': [], 'in_use': {}}
    assert _stage.stage_summary('target', result) == 'target -> /m/target-1: 4 of 4 files copied (1200 bytes, 0.5 s, 2400 B/s)'
    again = dict(result, files_copied=0, bytes_copied=0, seconds=0.0, bytes_per_second=None, pruned=['/m/target-0'],
                 in_use={'/m/target-x': ['/etc/llmops/a.env']})
    assert _stage.stage_summary('target', again) == ('target -> /m/target-1: 0 of 4 files copied (0 bytes, 0.0 s), '
                                                     'pruned /m/target-0, kept (in use) /m/target-x')
    assert _stage.warm_summary({'bytes': 10, 'files': 2, 'seconds': 0.25, 'budget_bytes': 100, 'skipped_bytes': 0}) == \
        'page cache warm-up: 10 bytes in 2 files, 0.25 s (bound 100 bytes, skipped 0 bytes)'
