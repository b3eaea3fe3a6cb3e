# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The text lines the playbooks show a person: the routers' workers (playbooks/status.yml), the
good configuration each host goes back to and the server it serves again (playbooks/rollback.yml),
the last steps of the speculation guard's journal (playbooks/status.yml). Pure functions over the
results the roles registered; the filters of plugins/filter/reports.py expose them."""

from __future__ import annotations

import json

# The figures of a journal line shown after its time and step, where the line has them.
JOURNAL_FIGURES = ('state', 'depth', 'accept_length', 'reason')


def router_status_text(statuses):
    """One text of every router and each of its workers, from ``{router: sglang_router_status}``
    in the routers' order: readiness and URL, each worker's health, circuit breaker and load,
    and the workers that should be in the router but are not."""
    text = ''
    for host, status in statuses:
        text += ' %s: router ready=%s %s; ' % (host, status.get('ready'), status.get('url'))
        for worker in status.get('workers') or []:
            kind = ''
            if worker.get('worker_type') in ('prefill', 'decode'):
                kind = worker['worker_type'] + (' bootstrap_port=%s' % worker.get('bootstrap_port')
                                                if worker['worker_type'] == 'prefill' else '') + ' '
            text += '%s: worker %s %shealthy=%s breaker=%s load=%s; ' % (
                host, worker.get('url'), kind, worker.get('healthy'), worker.get('breaker'), worker.get('load'))
        for url in status.get('missing') or []:
            text += '%s: worker %s not in the router; ' % (host, url)
        if 'pairs' in status:  # PD mode: the router pairs any healthy prefill with any healthy decode
            text += '%s: pairs prefill=[%s] x decode=[%s]; ' % (host, ', '.join(status['pairs'].get('prefill') or []),
                                                                ', '.join(status['pairs'].get('decode') or []))
    return text


def journal_rows(journals):
    """``host: <at> <step> state=... depth=... accept_length=... reason=...`` for each line of each
    host's remediation journal (``[(host, [JSON line, ...]), ...]``); a line that is not a JSON
    object is left out."""
    rows = []
    for host, lines in journals:
        for line in lines or []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            rows.append(' '.join(['%s: %s %s' % (host, entry.get('at'), entry.get('step'))] + [
                '%s=%s' % (key, entry[key]) for key in JOURNAL_FIGURES if entry.get(key) is not None]))
    return rows
