# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the serving_monitoring role writes its files (module_utils/_monitoring.py, filter monitoring_files)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.filter.monitoring import monitoring_files, monitoring_unreachable


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


def test_servers_on_loopback_of_another_host_are_refused_one_line_each():
    servers = [{'host': 'mon', 'target': '127.0.0.1:30000', 'loopback': True},
               {'host': 'gpu-a', 'target': '10.0.0.2:30000', 'loopback': False},
               {'host': 'gpu-b', 'target': '127.0.0.1:30001', 'loopback': True},
               {'host': 'gpu-c', 'target': 'localhost:30000', 'loopback': True}]
    lines = monitoring_unreachable(servers, 'mon').split('\n')
    assert lines[0] == ('gpu-b: the server listens on 127.0.0.1:30001, which Prometheus on mon cannot reach. Set sglang_server_host '
                        'to 0.0.0.0 (or an address of the host) for gpu-b, or serving_monitoring_address to the address Prometheus '
                        'should scrape.')
    assert len(lines) == 2 and lines[1].startswith('gpu-c: the server listens on localhost:30000')
    assert monitoring_unreachable(servers[:2], 'mon') == '' and monitoring_unreachable([], 'mon') == ''
