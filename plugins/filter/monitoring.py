# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of the serving_monitoring role and the servers it cannot scrape. Thin wrappers over
module_utils/_monitoring.py; each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils import _monitoring


def monitoring_files(directory, dashboard_dir, install_alertmanager=False, validate=False):
    return _monitoring.monitoring_files(directory, dashboard_dir, boolean(install_alertmanager, strict=False),
                                        boolean(validate, strict=False))


def monitoring_unreachable(servers, prometheus_host):
    return _monitoring.unreachable_servers(servers, prometheus_host)


class FilterModule:
    def filters(self):
        return {'monitoring_files': monitoring_files, 'monitoring_unreachable': monitoring_unreachable}
