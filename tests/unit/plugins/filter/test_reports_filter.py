# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of plugins/filter/reports.py read what the playbooks registered; the text itself is
tested with module_utils/_reports.py."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.filter import reports


def test_rollback_filters_take_the_result_first():
    assert reports.rollback_outcome({'state': 'rolled_back'}, 'ns1').startswith('ns1: rolled_back to record None')
