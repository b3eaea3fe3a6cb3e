# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Weights attestation: what SGLang's ``/weights_checker`` answers, and whether a server loaded the
weights the other replicas of its model group serve (module ``sglang_weights_checksum``).

SGLang 0.5.11 and later route ``/weights_checker`` (GET and POST, auth level ADMIN_OPTIONAL: the admin
key where the server has one, else the API key). Its body is ``CheckWeightsReqInput`` (``action``:
``checksum``, ``snapshot``, ``reset_tensors`` or ``compare``; ``allow_quant_error``); a checksum answers
``{"success", "message", "ranks": [{"checksums": {tensor: "%016x"}, "per_gpu_checksum": sha256 hex,
"parallelism_info": {tp_rank, tp_size, dp_rank, dp_size, pp_rank, pp_size, rank, size}}, ...],
"per_engine_checksum": sha256 hex}`` (HTTP 200, 400 where ``success`` is false). ``per_gpu_checksum``
covers the target model's weights on that rank (dequantized), so it depends on the layout: only servers
of one tp/pp/dp layout are compared; and on how the release names and fuses the model's parameters: only
servers of one release (``version`` of ``/server_info``, where both are known) are compared. The drafter's weights
are not covered.

Pure functions: every request goes through a ``request`` callable of ``_server_api``.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.llmops.serving.plugins.module_utils._server_api import raw_server_info
from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version

PATH = '/weights_checker'
# The first release that routes /weights_checker (tests/releases/fixtures, http.routes: 0.5.11, the
# oldest checked, to 0.5.23).
SINCE = (0, 5, 11)
# How many hex digits of a checksum a message shows (RETURN has them whole).
SHOWN = 16
LAYOUT_KEYS = ('tp_size', 'pp_size', 'dp_size')


def route_problem(engine, version):
    """Why this server has no /weights_checker (a note), or None where it has one or the version is unknown."""
    if engine and engine != 'sglang':
        return '%s has no /weights_checker (SGLang has, from %s)' % (engine, _dotted(SINCE))
    try:
        parsed = parse_version(version) if version else None
    except ValueError:
        parsed = None
    if parsed is not None and parsed < SINCE:
        return 'SGLang %s has no /weights_checker (%s and later route it)' % (version, _dotted(SINCE))
    return None


def _dotted(version):
    return '.'.join(str(part) for part in version)


def short(checksum):
    """A checksum as messages show it: its first SHOWN hex digits."""
    return str(checksum or '')[:SHOWN]


def layout(answer):
    """``tp<N> pp<N> dp<N>`` of a checksum answer (from its first rank's parallelism_info), or None."""
    ranks = answer.get('ranks') if isinstance(answer, dict) else None
    if not isinstance(ranks, list) or not ranks or not isinstance(ranks[0], dict):
        return None
    info = ranks[0].get('parallelism_info') or {}
    if not isinstance(info, dict):
        return None
    return ' '.join('%s%s' % (key[:2], info.get(key, 1)) for key in LAYOUT_KEYS)


def read_version(request, timeout):
    """The SGLang version a server reports (``/server_info``, else ``/get_server_info``), or None."""
    dummy, info = raw_server_info(request, timeout)
    version = info.get('version') if isinstance(info, dict) else None
    return str(version) if version else None


def read_checksum(request, timeout):
    """Ask one server for its checksum: ``{checksum, layout, ranks, status, note, version}``. ``checksum`` is the
    answer's ``per_engine_checksum`` (None where there is none; ``note`` then says why); ``version`` is left None
    (read_version)."""
    result = dict(checksum=None, layout=None, ranks=0, status=None, note=None, version=None)
    try:
        status, body = request('POST', PATH, {'action': 'checksum'}, timeout=timeout)
    except Exception as exc:  # every network error means "no answer"
        result['note'] = 'no answer from %s (%s)' % (PATH, exc)
        return result
    result['status'] = status
    try:
        answer = json.loads(body)
    except (ValueError, TypeError):
        answer = None
    if status == 404:
        result['note'] = 'answers 404 on %s: its release does not route it' % PATH
    elif status in (401, 403):
        result['note'] = ('refused the key on %s (HTTP %d): it is an admin endpoint; set sglang_server_admin_api_key to '
                          'the admin key of the servers' % (PATH, status))
    elif not isinstance(answer, dict) or not answer.get('success') or not engine_checksum(answer):
        message = answer.get('message') if isinstance(answer, dict) else None
        result['note'] = 'could not compute its checksum (HTTP %s%s)' % (status, ': %s' % message if message else '')
    else:
        result.update(checksum=engine_checksum(answer), layout=layout(answer), ranks=len(answer.get('ranks') or []))
    return result


def engine_checksum(answer):
    """The answer's ``per_engine_checksum``; where it has none, a SHA-256 over its ranks' ``per_gpu_checksum`` in
    order (every server asked goes the same way); None where neither is there."""
    if answer.get('per_engine_checksum'):
        return str(answer['per_engine_checksum'])
    ranks = answer.get('ranks')
    if not isinstance(ranks, list) or not ranks:
        return None
    per_gpu = [rank.get('per_gpu_checksum') if isinstance(rank, dict) else None for rank in ranks]
    if not all(per_gpu):
        return None
    return hashlib.sha256(''.join(str(value) for value in per_gpu).encode('utf-8')).hexdigest()


def replica_url(value):
    """The URL of a replica as worker_urls gives it: a string, or a dict with ``url`` (a prefill or decode)."""
    if isinstance(value, dict):
        value = value.get('url')
    return str(value).rstrip('/') if value else None


def difference(own, other):
    """Why ``other`` (a read_checksum result that has a checksum) is not compared with ``own``, or None: another
    layout, or another release where both versions are known."""
    if other.get('layout') != own.get('layout'):
        return 'another layout (%s, this server %s): not compared' % (other.get('layout'), own.get('layout'))
    if own.get('version') and other.get('version') and own['version'] != other['version']:
        return 'another release (SGLang %s, this server %s): not compared' % (other['version'], own['version'])
    return None


def judge(host, own, others, group=None):
    """Whether the server of ``host`` (``own``, from read_checksum) is the outlier of its model group.

    ``others``: ``{name: read_checksum result}`` of the other replicas. Compared are those that answered a
    checksum in the same layout and release (difference). The server is the outlier where it differs from the checksum that more
    than half of the compared replicas report (with one compared replica, where it differs from it).
    Returns ``{outlier, majority, agreeing, compared, msg}``; ``msg`` is the failure message of an outlier,
    else a one-line account."""
    group_text = ' (model group %s)' % group if group else ''
    compared = dict((name, one) for name, one in sorted(others.items())
                    if one.get('checksum') and difference(own, one) is None)
    result = dict(outlier=False, majority=None, agreeing=[], compared=sorted(compared), msg=None)
    if not compared:
        result['msg'] = 'no other serving replica%s to compare %s with: not checked' % (group_text, host)
        return result
    counts = {}
    for one in compared.values():
        counts[one['checksum']] = counts.get(one['checksum'], 0) + 1
    best = max(sorted(counts), key=lambda checksum: counts[checksum])
    if counts[best] * 2 <= len(compared):
        result['msg'] = ('the other replicas%s disagree among themselves (%s): no majority to compare %s with'
                         % (group_text, ', '.join('%s %s' % (name, short(one['checksum'])) for name, one in compared.items()),
                            host))
        return result
    holders = [name for name, one in compared.items() if one['checksum'] == best]
    result.update(majority=best, agreeing=holders)
    if own['checksum'] != best:
        result['outlier'] = True
        result['msg'] = ('%s loaded weights whose checksum %s differs from %s of %s%s'
                         % (host, short(own['checksum']), short(best), ', '.join(holders), group_text))
    else:
        result['msg'] = '%s loaded the weights of %s: checksum %s%s' % (host, ', '.join(holders), short(best), group_text)
    return result
