# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet-wide checks of a rollout, decided before its first batch stops anything.

Pure functions over plain data (host names, each host's plan and variables), used by the
controller-side action plugin ``fleet_preflight``: the batches Ansible will make of the hosts,
which of them would take more servers out of a router than allowed, keys that differ between a
router and its servers, a tensor-parallel size the model's attention heads do not divide, a
multi-node group cut by ``--limit`` or by the batches, and variable names that nothing declares.
Each problem is one sentence naming the host and the variable to fix.
"""

from __future__ import annotations

import difflib
import os
import re

# Prefixes of the variables the collection owns; a name with one of them that nothing in the
# collection mentions is a typo (or a variable of another release).
OWNED_PREFIXES = ('sglang_server_', 'sglang_router_', 'llmops_')
_NAME = re.compile(r'\b((?:%s)[a-z0-9_]*[a-z0-9])\b' % '|'.join(OWNED_PREFIXES))
_SCANNED = ('.yml', '.yaml', '.j2', '.py')


def declared_names(root):
    """Every owned variable name the collection's roles, playbooks and plugins mention
    (argument specs, defaults, facts they set, playbook variables)."""
    names = set()
    for sub in ('roles', 'playbooks', 'plugins'):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, sub)):
            dirnames[:] = [d for d in dirnames if d != '__pycache__']
            for filename in filenames:
                if filename.endswith(_SCANNED):
                    with open(os.path.join(dirpath, filename), encoding='utf-8') as f:
                        names.update(_NAME.findall(f.read()))
    return names


def _holds_words(candidate, words):
    """Whether the '_'-separated words of ``candidate`` include all of ``words``, in order."""
    it = iter(candidate.split('_'))
    return all(word in it for word in words)


def suggestion(name, declared):
    """The declared name that ``name`` most likely meant, or None.

    A declared name whose '_'-separated words include every word typed, in order, comes first
    (a typed ``*_server_draft_model_path`` means ``*_server_speculative_draft_model_path``, not the
    closer-spelled ``*_server_model_path``; this module's own text must not name undeclared
    variables, ``declared_names`` reads it): the one with the fewest words added,
    then the closest spelled, then the first by name. Otherwise the closest spelled name, as
    difflib finds it, if one is close enough."""
    words = [word for word in name.split('_') if word]
    holding = [candidate for candidate in declared if candidate != name and _holds_words(candidate, words)]
    if holding:
        return min(holding, key=lambda candidate: (len(candidate.split('_')),
                                                   -difflib.SequenceMatcher(None, name, candidate).ratio(),
                                                   candidate))
    close = difflib.get_close_matches(name, sorted(declared), n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_names(names, declared):
    """[(name, the declared name it likely meant or None)] for the owned names that nothing declares
    (see ``suggestion``)."""
    out = []
    for name in sorted(names):
        if not name.startswith(OWNED_PREFIXES) or name in declared:
            continue
        out.append((name, suggestion(name, declared)))
    return out


def batch_sizes(serial, count):
    """The sizes of the batches Ansible makes of ``count`` hosts with play keyword ``serial``
    (an integer, a percentage string, or a list of them; the last one repeats)."""
    if serial in (None, '', 0, '0'):
        return [count] if count else []
    steps = serial if isinstance(serial, list) else [serial]
    sizes, left, i = [], count, 0
    while left > 0:
        step = str(steps[min(i, len(steps) - 1)]).strip()
        # as ansible-core's pct_to_int: a percentage of all hosts, at least 1; 0 or less: all
        size = (int(int(step[:-1]) / 100.0 * count) or 1) if step.endswith('%') else int(step)
        size = min(size, left) if size > 0 else left
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def batches(hosts, serial):
    """The hosts (in play order) cut into Ansible's batches."""
    out, start = [], 0
    for size in batch_sizes(serial, len(hosts)):
        out.append(hosts[start:start + size])
        start += size
    return out


def router_overload(batch_list, stopping, workers_of, max_unavailable):
    """Problems for batches that would take more servers out of one router at once than its
    ``sglang_router_max_unavailable`` allows. ``stopping``: the hosts that will stop (a restart);
    ``workers_of``: router -> the server hosts it fronts; ``max_unavailable``: router -> limit."""
    problems = []
    for number, batch in enumerate(batch_list, 1):
        for router in sorted(workers_of):
            out = [h for h in batch if h in stopping and h in workers_of[router]]
            if len(out) > max_unavailable[router]:
                problems.append(
                    'batch %d would take %d servers (%s) out of router %s at once, but sglang_router_max_unavailable '
                    'is %d there: deploy in smaller batches (-e llmops_serial=%d) or raise sglang_router_max_unavailable'
                    % (number, len(out), ', '.join(out), router, max_unavailable[router], max_unavailable[router]))
    return problems


def key_mismatches(router, router_key, servers):
    """Problems where the API key a router sends (``router_key``, its ``sglang_router_api_key``)
    is not the one each of its servers requires (``servers``: host -> its ``sglang_server_api_key``).
    No key appears in a message."""
    problems = []
    for host, server_key in sorted(servers.items()):
        if (server_key or '') == (router_key or ''):
            continue
        if not router_key:
            problems.append(
                'router %s has no API key (sglang_router_api_key is empty there), but server %s requires one '
                '(sglang_server_api_key): the router would serve without a key and could not manage %s; set '
                'sglang_router_api_key (or sglang_server_api_key) for %s too, e.g. in group_vars/all'
                % (router, host, host, router))
        elif not server_key:
            problems.append(
                'router %s sends an API key (sglang_router_api_key) that server %s does not require '
                '(its sglang_server_api_key is empty): set the same key on both' % (router, host))
        else:
            problems.append(
                'the API key of router %s (sglang_router_api_key) differs from the one server %s requires '
                '(sglang_server_api_key): the router could not take %s out or put it back (HTTP 401); set the same '
                'key on both' % (router, host, host))
    return problems


def text_config(config):
    """The language model's part of a config.json (multimodal models such as Kimi-K2.5 nest it)."""
    return config.get('text_config') or config.get('language_config') or config


def tp_problems(host, tp_size, config, config_path):
    """Problems with tensor-parallel size ``tp_size`` for a model whose config.json is ``config``:
    SGLang asserts at load time (after the old server stopped) that TP divides the attention heads
    and that TP and the key/value heads divide one another."""
    if not config or tp_size < 1:
        return []
    text = text_config(config)
    heads = text.get('num_attention_heads')
    kv_heads = text.get('num_key_value_heads', heads)
    problems = []
    if isinstance(heads, int) and heads % tp_size:
        problems.append('%s: sglang_server_tp_size %d does not divide the %d attention heads of the model '
                        '(num_attention_heads in %s); SGLang would refuse it after the old server stopped'
                        % (host, tp_size, heads, config_path))
    elif isinstance(kv_heads, int) and kv_heads and kv_heads % tp_size and tp_size % kv_heads:
        problems.append('%s: sglang_server_tp_size %d and the %d key/value heads of the model '
                        '(num_key_value_heads in %s) do not divide one another; SGLang would refuse it'
                        % (host, tp_size, kv_heads, config_path))
    return problems


def group_problems(group_of, hosts, batch_list):
    """Problems for multi-node groups (``group_of``: host -> its sglang_server_group_hosts) whose
    hosts are not all in the run (``--limit``) or not all in one batch."""
    problems, seen = [], set()
    batch_of = dict((h, i) for i, batch in enumerate(batch_list) for h in batch)
    for host in hosts:
        group = tuple(group_of.get(host) or ())
        if len(group) < 2 or group in seen:
            continue
        seen.add(group)
        missing = [h for h in group if h not in batch_of]
        if missing:
            problems.append('%s: its multi-node group (sglang_server_group_hosts: %s) starts and stops as one, but %s '
                            'is not in this run: add it to --limit (or llmops_hosts)'
                            % (host, ', '.join(group), ', '.join(missing)))
        elif len(set(batch_of[h] for h in group)) > 1:
            problems.append('%s: the hosts of its multi-node group (%s) would fall into different batches: use an '
                            'llmops_serial that is a multiple of the group size (%d), the group listed together'
                            % (host, ', '.join(group), len(group)))
    return problems


def speculation_mixed(group_hosts, drafter_of):
    """Hosts of one inventory group (``group_hosts``: group -> hosts) whose speculation is off
    while other hosts of that group run a drafter (``drafter_of``: host -> drafter path or '')."""
    notes = []
    for group, members in sorted(group_hosts.items()):
        on = [h for h in members if drafter_of.get(h)]
        off = [h for h in members if h in drafter_of and not drafter_of[h]]
        if on and off:
            notes.append('group %s: %s run%s without speculative decoding (no sglang_server_speculative_draft_model_path) '
                         'while %s run%s a drafter' % (group, ', '.join(off), 's' if len(off) == 1 else '',
                                                       ', '.join(on), 's' if len(on) == 1 else ''))
    return notes


# Prefill/decode disaggregation (PD). SGLang checks only the page size and the KV dtype between a prefill and
# a decode, and the router pairs any prefill with any decode: everything else a pair must share is checked
# here, from each server's plan (its launch command and release). Each field: how a message names it, and the
# variable that sets it.
PD_FIELDS = (
    ('model', 'model', 'sglang_server_model_path'),
    ('drafter', 'drafter', 'sglang_server_speculative_draft_model_path'),
    ('speculative', 'speculative settings', 'sglang_server_speculative_depth and the other speculative variables'),
    ('page_size', 'page size', '--page-size in sglang_server_extra_args'),
    ('kv_dtype', 'KV dtype', '--kv-cache-dtype in sglang_server_extra_args'),
    ('release', 'engine release', 'sglang_server_python / sglang_install_version'),
)
# The fields a rolling change must not alter across the prefill and decode servers of one router.
PD_ROLLING_FIELDS = ('model', 'drafter', 'speculative', 'release')
PD_MODES = ('prefill', 'decode')


def _flag_values(argv, flag):
    """The values ``argv`` gives ``flag`` (``--flag value`` or ``--flag=value``), in order."""
    values = []
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            values.append(argv[index + 1])
        elif arg.startswith(flag + '='):
            values.append(arg[len(flag) + 1:])
    return values


def pd_identity(command, version):
    """What a prefill and a decode must share, from a server's launch ``command`` and engine ``version``:
    ``{model, drafter, speculative, page_size, kv_dtype, release}`` as text ('' where the flag is unset)."""
    argv = [str(arg) for arg in command or []]
    speculative = []
    for index, arg in enumerate(argv):
        name = arg.split('=', 1)[0]
        if not name.startswith('--speculative-') or name == '--speculative-draft-model-path':
            continue
        if '=' in arg:
            speculative.append(arg)
        elif index + 1 < len(argv) and not argv[index + 1].startswith('--'):
            speculative.append('%s %s' % (arg, argv[index + 1]))
        else:
            speculative.append(arg)

    def last(flag):
        values = _flag_values(argv, flag)
        return values[-1] if values else ''
    return {'model': last('--model-path') or last('--model'), 'drafter': last('--speculative-draft-model-path'),
            'speculative': ' '.join(speculative), 'page_size': last('--page-size'), 'kv_dtype': last('--kv-cache-dtype'),
            'release': str(version or '')}


def _shown(value):
    return value if value != '' else '(unset)'


def pd_role_problems(label, modes):
    """Problems of the servers one router fronts (``label``: how to name the router; ``modes``: host -> its
    sglang_server_disaggregation_mode, None for none) where any has a mode (a router in PD mode): it needs at
    least one prefill and one decode, and every server a mode."""
    if not any(modes.values()):
        return []
    problems = []
    prefill = sorted(h for h, mode in modes.items() if mode == 'prefill')
    decode = sorted(h for h, mode in modes.items() if mode == 'decode')
    neither = sorted(h for h, mode in modes.items() if mode not in PD_MODES)
    for kind, have, other in (('prefill', prefill, decode), ('decode', decode, prefill)):
        if not have:
            problems.append('%s runs in prefill/decode mode (%s %s sglang_server_disaggregation_mode %s) but has no %s '
                            'server: set sglang_server_disaggregation_mode: %s on at least one of its servers'
                            % (label, ', '.join(other), 'has' if len(other) == 1 else 'have',
                               'decode' if kind == 'prefill' else 'prefill', kind, kind))
    if neither:
        problems.append('%s runs in prefill/decode mode, but %s %s no sglang_server_disaggregation_mode: a server behind '
                        'a PD router is a prefill or a decode; set it, or put the server behind another router'
                        % (label, ', '.join(neither), 'has' if len(neither) == 1 else 'have'))
    return problems


def pd_mismatches(label, members):
    """Problems where the prefill and decode servers of one router (``members``: host -> ``{mode, identity}``,
    identity from ``pd_identity``) differ in a field of ``PD_FIELDS``: one sentence per field, naming each
    value with its hosts and the variable to set."""
    problems = []
    for field, name, variable in PD_FIELDS:
        hosts_of = {}
        for host in sorted(members):
            hosts_of.setdefault(members[host]['identity'][field], []).append(
                '%s (%s)' % (host, members[host]['mode']))
        if len(hosts_of) < 2:
            continue
        problems.append('the prefill and decode servers of %s differ in their %s (%s): %s; SGLang would pair them '
                        'without a word, so every prefill and decode behind one router must share it'
                        % (label, name, variable, '; '.join('%s on %s' % (_shown(value), ', '.join(hosts))
                                                            for value, hosts in sorted(hosts_of.items()))))
    return problems


def pd_rolling_problems(label, changes, pd_hosts, batch_list, mixed_ok):
    """A rollout that would pair old and new servers of one router: ``changes`` (host -> the names of the
    ``PD_ROLLING_FIELDS`` its restart alters, from its last good command to its plan's) of the prefill and decode
    servers ``pd_hosts`` of the router. Refused unless ``mixed_ok`` (llmops_pd_mixed_ok) or every one of
    ``pd_hosts`` restarts with such a change in one batch (no old server is left to pair with a new one)."""
    changed = dict((host, fields) for host, fields in changes.items() if fields)
    if not changed or mixed_ok:
        return []
    batch_of = dict((h, i) for i, batch in enumerate(batch_list) for h in batch)
    if set(changed) == set(pd_hosts) and len(set(batch_of.get(h) for h in pd_hosts)) == 1:
        return []
    names = dict((field, name) for field, name, _variable in PD_FIELDS)
    fields = [names[field] for field in PD_ROLLING_FIELDS if any(field in f for f in changed.values())]
    return ['this deploy changes the %s of prefill/decode servers of %s (%s) one batch at a time: while it rolls, '
            'a server of the new %s would pair with one of the old through the router (SGLang does not check it). '
            'Deploy the change blue-green behind a second router (README, "Prefill/decode disaggregation"), or set '
            'llmops_pd_mixed_ok: true to roll it anyway'
            % (' and '.join(fields), label, ', '.join(sorted(changed)), ' and '.join(fields))]


def pd_changes(identity_before, identity_after):
    """The ``PD_ROLLING_FIELDS`` that differ between two ``pd_identity`` results."""
    return [field for field in PD_ROLLING_FIELDS if identity_before.get(field) != identity_after.get(field)]


def port_clashes(servers):
    """Problems where servers of one address (``servers``: host -> ``{address, ports}``, ports a list of
    (variable, port) it listens on; a null port is left out) would listen on the same port."""
    problems = []
    by_address = {}
    for host in sorted(servers):
        by_address.setdefault(servers[host]['address'], []).append(host)
    for address, hosts in sorted(by_address.items()):
        if len(hosts) < 2:
            continue
        users = {}
        for host in hosts:
            for variable, port in servers[host]['ports']:
                if port not in (None, ''):
                    users.setdefault(int(port), []).append('%s of %s' % (variable, host))
        for port, who in sorted(users.items()):
            if len(set(entry.rsplit(' of ', 1)[1] for entry in who)) > 1:
                problems.append('%s share the address %s and would both listen on port %d (%s): give each server of '
                                'a host its own sglang_server_port, sglang_server_nccl_port and '
                                'sglang_server_disaggregation_bootstrap_port'
                                % (', '.join(hosts), address, port, ', '.join(who)))
    return problems
