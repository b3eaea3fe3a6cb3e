# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""sglang-router's worker list, as the drain and the register of a server see it (pure; used by the module
router_worker on the router's host): the entry of one worker, who is out of the router, the refusal of a drain
that would take more than max_unavailable servers out, what register has to do."""

from __future__ import annotations

# What register does with the router's entry of the server: nothing, add it, or remove it and add it afresh
# (an entry whose circuit breaker is open would get no traffic until the breaker's timeout).
KEEP, ADD, RE_ADD = 'none', 'add', 're-add'


def entry_of(listed, url):
    """The first entry of ``listed`` (the router's ``/workers``) whose URL is ``url``, else None."""
    for entry in listed:
        if entry.get('url') == url:
            return entry
    return None


def healthy(listed, url):
    """Whether the router lists ``url`` and reports it healthy."""
    return any(entry.get('url') == url and entry.get('is_healthy') for entry in listed)


def out_of_router(workers, listed, draining):
    """``(out_now, out_after)``: the URLs of ``workers`` ({host: URL}) the router does not list as healthy,
    and those with ``draining`` added (each once, in order)."""
    up = set(entry.get('url') for entry in listed if entry.get('is_healthy'))
    out_now = []
    for url in workers.values():
        if url not in up and url not in out_now:
            out_now.append(url)
    return out_now, out_now + [url for url in dict.fromkeys(draining) if url not in out_now]


def drain_refusal(router, workers, listed, draining, max_unavailable):
    """The message refusing to drain ``draining`` (URLs of the batch) from ``router`` when more than
    ``max_unavailable`` servers of ``workers`` would then be out of it; None when the router can spare them."""
    out_now, out_after = out_of_router(workers, listed, draining)
    if max_unavailable is None or len(out_after) <= max_unavailable:
        return None
    host_of = dict((url, host) for host, url in workers.items())
    return ('draining %s would leave %d of %d servers out of router %s (out already: %s); '
            'sglang_router_max_unavailable is %d: use smaller batches (llmops_serial) or bring the servers that are '
            'out back first.' % (', '.join(host_of.get(url, url) for url in dict.fromkeys(draining)), len(out_after),
                                 len(host_of), router, ', '.join(host_of.get(url, url) for url in out_now) or 'none',
                                 max_unavailable))


def register_action(listed, url, breaker):
    """What register does on a router that lists ``listed`` where the circuit breaker of ``url`` is ``breaker``
    (closed, open, half-open; None when the router has none for it): KEEP, ADD or RE_ADD."""
    if entry_of(listed, url) is None:
        return ADD
    return KEEP if (breaker or 'closed') == 'closed' else RE_ADD
