# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of plugins/filter/server.py: the filters expose _server_role and turn its errors into AnsibleFilterError."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.server import FilterModule

FILTERS = FilterModule().filters()
PLAN = {'launcher': 'process', 'action': 'start', 'version': '0.5.15', 'speculative': {'depth': None},
        'url': 'http://127.0.0.1:30000'}


def test_server_result():
    assert FILTERS['server_result'](PLAN, {}, {}, None, 'sglang', 'true')['state'] == 'check mode'


def test_errors_are_filter_errors():
    with pytest.raises(AnsibleFilterError, match='server_result'):
        FILTERS['server_result']({}, {}, {}, None, 'sglang')
