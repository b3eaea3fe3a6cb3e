# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every filter of every filter plugin (plugins/filter/*.py) has its documentation file,
<name>.yml next to it, with its name, an example that uses it and a return value."""

from __future__ import annotations

import glob
import importlib
import os

import pytest
import yaml

FILTER_DIR = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'plugins', 'filter')


def all_filters():
    for path in sorted(glob.glob(os.path.join(FILTER_DIR, '*.py'))):
        plugin = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module('ansible_collections.llmops.serving.plugins.filter.' + plugin)
        for name in sorted(module.FilterModule().filters()):
            yield plugin, name


FILTERS = list(all_filters())


def test_the_filters_are_found():
    assert {'launch_command', 'shell_join', 'text_table', 'canary_verdict'} <= {name for dummy, name in FILTERS}


@pytest.mark.parametrize('plugin, name', FILTERS)
def test_every_filter_is_documented(plugin, name):
    with open(os.path.join(FILTER_DIR, name + '.yml'), encoding='utf-8') as handle:
        doc = yaml.safe_load(handle)
    assert doc['DOCUMENTATION']['name'] == name, plugin
    assert '_value' in doc['RETURN']
    assert 'llmops.serving.' + name in doc['EXAMPLES']
