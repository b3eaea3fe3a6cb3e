# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that expose the bind address -> URL rule of ``module_utils/_endpoints.py`` to roles;
each filter is documented in the YAML file of its name next to this one."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils import _endpoints
from ansible_collections.llmops.serving.plugins.plugin_utils._filters import as_filter


def local_url(bind, port, path='', tls=False):
    return _endpoints.local_url(bind, port, path, tls=bool(tls))


def server_endpoint(host, hostvars, address=None):
    return _endpoints.server_endpoint(host, hostvars[host], address)


def worker_urls(hosts, hostvars):
    return _endpoints.worker_urls(hosts, hostvars)


class FilterModule:
    def filters(self):
        return {name: as_filter(function) for name, function in (
            ('local_url', local_url),
            ('server_endpoint', server_endpoint),
            ('worker_urls', worker_urls),
        )}
