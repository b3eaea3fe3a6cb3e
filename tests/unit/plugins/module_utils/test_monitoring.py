# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the serving_monitoring role writes its files (module_utils/_monitoring.py, filter monitoring_files)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.filter.monitoring import monitoring_files


def test_the_files_of_a_site_that_runs_its_own_alertmanager():
    assert monitoring_files('/etc/prometheus', '/etc/prometheus') == {
        'dirs': ['/etc/prometheus'], 'targets': '/etc/prometheus/llmops-sglang-targets.json',
        'rules': '/etc/prometheus/llmops-sglang.rules.yml', 'dashboard': '/etc/prometheus/llmops-sglang-dashboard.json',
        'alertmanager': '/etc/prometheus/alertmanager.yml', 'alertmanager_checked': False}


@pytest.mark.parametrize('install, validate, path, checked', [
    (True, False, '/etc/prometheus/alertmanager.yml', True),
    ('false', 'yes', '/srv/mon/alertmanager.yml', True),
    ('no', False, '/srv/mon/alertmanager.yml', False),
])
def test_the_alertmanager_configuration_and_its_check(install, validate, path, checked):
    files = monitoring_files('/srv/mon', '/srv/dash', install, validate)
    assert (files['alertmanager'], files['alertmanager_checked'], files['dirs']) == (path, checked, ['/srv/mon', '/srv/dash'])
    assert files['dashboard'] == '/srv/dash/llmops-sglang-dashboard.json'
