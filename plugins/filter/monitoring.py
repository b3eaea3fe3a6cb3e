# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of the serving_monitoring role. A thin wrapper over module_utils/_monitoring.py;
documented in monitoring_files.yml next to this file."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils import _monitoring


def monitoring_files(directory, dashboard_dir, install_alertmanager=False, validate=False):
    return _monitoring.monitoring_files(directory, dashboard_dir, boolean(install_alertmanager, strict=False),
                                        boolean(validate, strict=False))


class FilterModule:
    def filters(self):
        return {'monitoring_files': monitoring_files}
