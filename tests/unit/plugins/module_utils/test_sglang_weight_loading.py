"""The weight-loading table of _sglang_args (--load-format choices, loader and prefetch flags,
--weight-cache-mode) against the real argparse table of every recorded release."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args
from ansible_collections.llmops.serving.tests.releases import releases

KNOWN_FLAGS = [flag for dummy, flags in _sglang_args.WEIGHT_LOADING_FLAGS_SINCE for flag in flags]


def _options(version):
    with open(os.path.join(releases.FIXTURES, 'sglang-%s.json' % version), encoding='utf-8') as handle:
        table = json.load(handle)
    return table['options']


@pytest.mark.parametrize('version', releases.versions())
def test_table_matches_the_release(version):
    options = _options(version)
    by_dest = {option['dest']: option for option in options}
    strings = {string for option in options for string in option['options']}
    offered = _sglang_args.weight_loading(version)
    assert sorted(offered['load_formats']) == sorted(by_dest['load_format']['choices'])
    assert by_dest['load_format']['default'] == 'auto'
    assert sorted(offered['flags']) == sorted(flag for flag in KNOWN_FLAGS if flag in strings)
    cache = by_dest.get('weight_cache_mode')
    assert offered['weight_cache_modes'] == (list(cache['choices']) if cache else [])
    if cache:
        assert cache['default'] == 'off'


def test_refusals_name_the_first_release():
    assert _sglang_args.weight_loading_problems('0.5.23', 'instanttensor', ['--weight-cache-mode']) == []
    assert _sglang_args.weight_loading_problems('0.5.15.post1', 'presharded', ['--weight-cache-mode']) == [
        '--load-format presharded needs SGLang 0.5.17 or newer (this is 0.5.15.post1)',
        '--weight-cache-mode needs SGLang 0.5.17 or newer (this is 0.5.15.post1)',
    ]
    assert 'no choice' in _sglang_args.weight_loading_problems('0.5.23', 'tensorizer')[0]
    assert _sglang_args.weight_loading('0.5.9') is None
    assert _sglang_args.weight_loading_problems('0.5.9', 'instanttensor') == []
