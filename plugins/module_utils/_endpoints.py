# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where a server or router answers, from the address it binds: a wildcard bind (every address) is
reached at 127.0.0.1 on its own host and at its inventory address from the others; any other bind at
that address. IPv6 addresses are bracketed in ``address:port``. Pure functions, exposed to roles by
``plugins/filter/endpoints.py``."""

from __future__ import annotations

WILDCARD_BINDS = ('0.0.0.0', '::', '')
LOCAL_ADDRESS = '127.0.0.1'
# The sglang_server role's defaults, for hosts whose variables leave them out.
SERVER_BIND = '127.0.0.1'
SERVER_PORT = 30000


def is_wildcard(bind):
    return str(bind) in WILDCARD_BINDS


def host_port(address, port):
    """``address:port``, ``[address]:port`` for an IPv6 address."""
    address = str(address)
    return ('[%s]:%d' if ':' in address else '%s:%d') % (address, int(port))


def url(address, port, path=''):
    return 'http://%s%s' % (host_port(address, port), path)


def local_url(bind, port, path=''):
    """The URL of a service that binds ``bind``, from its own host."""
    return url(LOCAL_ADDRESS if is_wildcard(bind) else bind, port, path)


def server_endpoint(host, variables, address=None):
    """``{bind, port, address, target, url, local_url}`` of the sglang server of inventory host ``host``
    whose variables are ``variables``: ``address`` (given, else the bind address, else for a wildcard
    bind ``ansible_host``, else ``host``) is where other hosts reach it, ``target`` that address and
    the port, ``url`` the URL at that address."""
    bind = str(variables.get('sglang_server_host', SERVER_BIND))
    port = int(variables.get('sglang_server_port', SERVER_PORT))
    if address is None:
        address = variables.get('ansible_host', host) if is_wildcard(bind) else bind
    return {'bind': bind, 'port': port, 'address': address, 'target': host_port(address, port),
            'url': url(address, port), 'local_url': local_url(bind, port)}


# A server's role in prefill/decode disaggregation (the sglang_server role's variables, its default bootstrap port).
DISAGGREGATION_MODES = ('prefill', 'decode')
BOOTSTRAP_PORT = 8998


def worker_urls(hosts, hostvars):
    """``{host: URL}`` the router reaches the server of each of ``hosts`` at: the host's
    ``sglang_router_worker_url`` where set, else the URL of its server's endpoint. A host whose
    ``sglang_server_disaggregation_mode`` is prefill or decode maps to ``{url, worker_type, bootstrap_port}``
    instead (its ``sglang_server_disaggregation_bootstrap_port``, default 8998, for a prefill; None for a decode)."""
    urls = {}
    for host in hosts:
        variables = hostvars[host]
        if 'sglang_router_worker_url' in variables:
            urls[host] = variables['sglang_router_worker_url']
        else:
            urls[host] = server_endpoint(host, variables)['url']
        mode = variables.get('sglang_server_disaggregation_mode')
        if mode in DISAGGREGATION_MODES:
            port = variables.get('sglang_server_disaggregation_bootstrap_port')
            urls[host] = {'url': urls[host], 'worker_type': mode,
                          'bootstrap_port': (int(port) if port not in (None, '') else BOOTSTRAP_PORT)
                          if mode == 'prefill' else None}
    return urls
