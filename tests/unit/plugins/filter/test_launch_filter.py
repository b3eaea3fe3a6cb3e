"""Tests of plugins/filter/launch.py: the filters expose _sglang_args and turn its
errors into AnsibleFilterError; each filter has its documentation file."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.launch import FilterModule
from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args

FILTERS = FilterModule().filters()
FILTER_DIR = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'plugins', 'filter')


@pytest.mark.parametrize('name', sorted(FILTERS))
def test_every_filter_is_documented(name):
    with open(os.path.join(FILTER_DIR, name + '.yml'), encoding='utf-8') as handle:
        doc = yaml.safe_load(handle)
    assert doc['DOCUMENTATION']['name'] == name
    assert '_value' in doc['RETURN']
    assert 'llmops.serving.' + name in doc['EXAMPLES']


def test_launch_command():
    spec = {'model_path': '/m', 'tp_size': 8,
            'speculative': {'algorithm': 'EAGLE3', 'draft_model_path': '/d', 'depth': 10}}
    argv = _sglang_args.build_argv(spec, version='0.5.11')
    assert argv[argv.index('--speculative-num-steps') + 1] == '9'
    command = FILTERS['launch_command'](argv, '/venv/bin/python', shim='/opt/shim.py')
    assert command[:3] == ['/venv/bin/python', '/opt/shim.py', 'sglang.launch_server']
    assert FILTERS['shell_join'](['a b', 'c']) == "'a b' c"
    assert FILTERS['speculative_settings']({'depth': 5})['num_steps'] == 4
    assert FILTERS['speculative_settings'](None)['depth'] is None


@pytest.mark.parametrize('name, args, kwargs, message', [
    ('speculative_settings', ({'num_draft_tokens': 4},), {}, 'need speculative_num_steps'),
    ('shell_join', ('not a list',), {}, 'list of arguments'),
])
def test_errors_become_filter_errors(name, args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS[name](*args, **kwargs)
