# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the serving_monitoring role writes its files (filter ``monitoring_files``)."""

from __future__ import annotations

import posixpath

# The configuration of Debian's Alertmanager, where the role installs it.
INSTALLED_ALERTMANAGER = '/etc/prometheus/alertmanager.yml'


def monitoring_files(directory, dashboard_dir, install_alertmanager=False, validate=False):
    """The files of the role: the Prometheus file_sd targets and the rules in ``directory``, the
    Grafana dashboard in ``dashboard_dir``, the Alertmanager configuration (the installed one's,
    else one beside the rules for the site's own Alertmanager) and whether amtool checks it (it comes
    with the installed Alertmanager, or ``validate`` is set); ``dirs``, the directories to create."""
    return {
        'dirs': list(dict.fromkeys([directory, dashboard_dir])),
        'targets': posixpath.join(directory, 'llmops-sglang-targets.json'),
        'rules': posixpath.join(directory, 'llmops-sglang.rules.yml'),
        'dashboard': posixpath.join(dashboard_dir, 'llmops-sglang-dashboard.json'),
        'alertmanager': INSTALLED_ALERTMANAGER if install_alertmanager else posixpath.join(directory, 'alertmanager.yml'),
        'alertmanager_checked': bool(install_alertmanager or validate),
    }


def unreachable_servers(servers, prometheus_host):
    """Why Prometheus on ``prometheus_host`` cannot scrape some of ``servers`` (the role's server
    entries: host, target, loopback): one line per server of another host that listens on loopback
    only; '' where it can scrape them all."""
    return '\n'.join(
        '%s: the server listens on %s, which Prometheus on %s cannot reach. Set sglang_server_host to 0.0.0.0 '
        '(or an address of the host) for %s, or serving_monitoring_address to the address Prometheus should scrape.'
        % (s['host'], s['target'], prometheus_host, s['host'])
        for s in servers or [] if s.get('loopback') and s['host'] != prometheus_host)
