# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines playbooks/status.yml and playbooks/rollback.yml show. Thin wrappers over
module_utils/_reports.py; each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _reports


def rollback_outcome(result, host):
    return _reports.rollback_outcome(host, result)


class FilterModule:
    def filters(self):
        return {'rollback_outcome': rollback_outcome}
