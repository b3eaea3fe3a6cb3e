# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters about staged models and warm starts; each filter is documented in the YAML file of its
name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _stage


def jit_cache_env(cache_dir):
    """The environment variables that put every engine JIT cache under ``cache_dir``."""
    return _stage.jit_cache_env(str(cache_dir))


def model_stage_args(item, manifest=None, **args):
    """llmops.serving.model_stage's arguments for one checkpoint of ``model_stage_models``."""
    return _stage.stage_args(dict(item), manifest, **args)


def staged_paths(results):
    """Name -> staged directory, from a registered loop of llmops.serving.model_stage (its ``results``)."""
    return _stage.staged_paths(results.get('results', []) if isinstance(results, dict) else results)


class FilterModule:
    def filters(self):
        return {'jit_cache_env': jit_cache_env, 'model_stage_args': model_stage_args, 'staged_paths': staged_paths}
