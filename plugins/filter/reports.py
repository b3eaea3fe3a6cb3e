# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines playbooks/status.yml and playbooks/rollback.yml show. Thin wrappers over
module_utils/_reports.py; each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.llmops.serving.plugins.module_utils import _reports


def rollback_outcome(result, host):
    return _reports.rollback_outcome(host, result)


def remediation_journal_rows(hosts, hostvars):
    journals = []
    for host in hosts:
        registered = hostvars[host].get('status_remediations')
        if isinstance(registered, Mapping) and 'stdout_lines' in registered:
            journals.append((host, registered['stdout_lines']))
    return _reports.journal_rows(journals)


class FilterModule:
    def filters(self):
        return {'rollback_outcome': rollback_outcome, 'remediation_journal_rows': remediation_journal_rows}
