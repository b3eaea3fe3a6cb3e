# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.fleet_preflight: the checks that need the whole fleet at
once (batches against the routers, keys, multi-node groups, the model's heads against TP,
prefill/decode pairs and ports, undeclared variable names), run once before the first batch of a rollout stops anything.
The decisions are the pure functions of module_utils/_fleet.py; this file only reads its task's
arguments, each host's variables and plan (hostvars) and the inventory's groups, and reports."""

from __future__ import annotations

import os

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.module_utils import _fleet, _tls
from ansible_collections.llmops.serving.plugins.modules.fleet_preflight import ARGUMENT_SPEC, DEFAULTS

display = Display()

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _get(hostvars, host, name, default=None):
    """A variable of a host as that host sees it (templated), or default where it is unset."""
    try:
        value = hostvars[host].get(name)
    except AnsibleError as exc:
        raise AnsibleError('%s of %s cannot be evaluated: %s' % (name, host, exc))
    return default if value is None else value


def _boolean(value):
    """A variable's truth as Ansible's ``bool`` filter reads it ("true", "yes", "1", "on", True)."""
    return value is True or str(value).strip().lower() in ('true', 'yes', 'y', '1', 'on')


def with_defaults(args, play_hosts):
    """The task's arguments with each option left out or null at its default; ``hosts``: ``play_hosts``."""
    out = dict(args, **dict((name, value) for name, value in DEFAULTS.items() if args.get(name) is None))
    if out.get('hosts') is None:
        out['hosts'] = list(play_hosts or [])
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    @staticmethod
    def pd_problems(args, hostvars, servers, routers, workers, plans, batch_list):
        """The prefill/decode checks (module_utils/_fleet.py): a PD router's prefill and decode servers, their
        agreement (from the plans of those in the run), a rolling change that would pair old and new servers, and
        the ports of servers that share an address."""
        pool = sorted(workers) or list(servers)
        label = ('router %s' % ', '.join(routers)) if routers else 'the servers of group %s' % args['worker_group']
        modes = dict((h, _get(hostvars, h, 'sglang_server_disaggregation_mode') or None) for h in pool)
        problems = _fleet.pd_role_problems(label, modes)
        members, changes = {}, {}
        for host in pool:
            plan = plans.get(host) or {}
            if not modes[host] or not plan.get('command'):
                continue
            identity = _fleet.pd_identity(plan['command'], plan.get('version'))
            members[host] = {'mode': modes[host], 'identity': identity}
            if plan.get('action') == 'restart' and plan.get('previous_command'):
                changes[host] = _fleet.pd_changes(
                    _fleet.pd_identity(plan['previous_command'], plan.get('previous_version')), identity)
        problems += _fleet.pd_mismatches(label, members)
        problems += _fleet.pd_rolling_problems(label, changes, [h for h in pool if modes[h]], batch_list,
                                               args['pd_mixed_ok'])
        ports = {}
        for host in list(servers) + [h for h in pool if h not in servers]:
            mode = _get(hostvars, host, 'sglang_server_disaggregation_mode')
            # One machine: one SSH address (two hosts behind one address and distinct SSH ports are two machines).
            address = _get(hostvars, host, 'ansible_host', host)
            if _get(hostvars, host, 'ansible_port') is not None:
                address = '%s (SSH port %s)' % (address, _get(hostvars, host, 'ansible_port'))
            ports[host] = {'address': address, 'ports': [
                ('sglang_server_port', _get(hostvars, host, 'sglang_server_port', 30000)),
                ('sglang_server_nccl_port', _get(hostvars, host, 'sglang_server_nccl_port')),
                ('sglang_server_disaggregation_bootstrap_port',
                 _get(hostvars, host, 'sglang_server_disaggregation_bootstrap_port', 8998) if mode == 'prefill' else None)]}
        return problems + _fleet.port_clashes(ports)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = with_defaults(self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1],
                             task_vars.get('ansible_play_hosts_all'))
        hostvars = task_vars['hostvars']
        groups = task_vars.get('groups', {})
        servers = list(args['hosts'])
        routers = list(groups.get(args['router_group']) or [])
        problems, notes = [], []

        plans = dict((h, _get(hostvars, h, 'sglang_server_plan', {})) for h in servers)
        batch_list = _fleet.batches(servers, args['serial']) if args['serial'] is not None else [servers]
        stopping = set(h for h in servers if plans[h].get('action') == 'restart')

        # Routers: keys, and how many servers a batch would take out of each.
        workers = set(groups.get(args['worker_group']) or [])
        fronted = [h for h in servers if h in workers]
        for router in routers:
            router_key = _get(hostvars, router, 'sglang_router_api_key',
                              _get(hostvars, router, 'sglang_server_api_key', ''))
            problems += _fleet.key_mismatches(
                router, router_key, dict((h, _get(hostvars, h, 'sglang_server_api_key', '')) for h in fronted))
            for host in fronted:
                sent = _get(hostvars, host, 'sglang_router_api_key', _get(hostvars, host, 'sglang_server_api_key', ''))
                if sent != router_key and _get(hostvars, host, 'sglang_server_api_key', '') == router_key:
                    problems.append('%s would manage router %s with another API key than the router has '
                                    '(sglang_router_api_key differs between %s and %s): set it once for both, e.g. '
                                    'in group_vars/all' % (host, router, host, router))
        # Safe defaults: nothing bound beyond loopback without its key (unless llmops_allow_open), and every
        # control-plane key a drain or register will send is the router's.
        for host in servers:
            problems += [problem for problem in [_fleet.open_binding(
                'server', host, _get(hostvars, host, 'sglang_server_host', '127.0.0.1'), 'sglang_server_host',
                _get(hostvars, host, 'sglang_server_api_key', ''), 'sglang_server_api_key',
                _boolean(_get(hostvars, host, 'llmops_allow_open', False)))] if problem]
        for router in routers:
            problem = _fleet.open_binding(
                'router', router, _get(hostvars, router, 'sglang_router_host', '0.0.0.0'), 'sglang_router_host',
                _get(hostvars, router, 'sglang_router_api_key', _get(hostvars, router, 'sglang_server_api_key', '')),
                'sglang_router_api_key', _boolean(_get(hostvars, router, 'llmops_allow_open', False)))
            if problem:
                problems.append(problem)
            problems += _fleet.control_plane_key_mismatches(
                router, _get(hostvars, router, 'sglang_router_control_plane_api_key', ''),
                dict((h, _get(hostvars, h, 'sglang_router_control_plane_api_key', '')) for h in fronted))
        if routers and args['serial'] is not None:
            limit = min([int(_get(hostvars, h, 'sglang_router_max_unavailable', 1)) for h in fronted] or [1])
            problems += _fleet.router_overload(batch_list, stopping, dict((r, set(fronted)) for r in routers),
                                               dict((r, limit) for r in routers))

        # Each host: the model's heads against TP, its multi-node group.
        for host in servers:
            config = plans[host].get('model_config') or {}
            problems += _fleet.tp_problems(host, int(_get(hostvars, host, 'sglang_server_tp_size', 1)), config,
                                           '%s/config.json' % _get(hostvars, host, 'sglang_server_model_path', ''))
        problems += _fleet.group_problems(
            dict((h, _get(hostvars, h, 'sglang_server_group_hosts', [])) for h in servers),
            servers, batch_list)

        # Prefill/decode disaggregation: the servers behind the routers (every host of the worker group, in the run
        # or not), and two servers of one address.
        problems += self.pd_problems(args, hostvars, servers, routers, workers, plans, batch_list)

        # TLS: the certificates and keys every host's settings name exist on the controller (before anything stops).
        def readable(path):
            return os.access(self._loader.path_dwim(path), os.R_OK)
        for host in servers:
            names = ('sglang_server_tls_cert', 'sglang_server_tls_key', 'sglang_server_tls_refresh')
            settings = dict((name, _get(hostvars, host, name, '')) for name in names)
            settings['sglang_server_tls_ca_cert'] = _get(hostvars, host, 'sglang_server_tls_ca_cert',
                                                         _get(hostvars, host, 'llmops_tls_ca_cert', ''))
            problems += _tls.material_problems(
                host, settings, _tls.SERVER_TLS_PAIRS, readable,
                needs_cert=(('sglang_server_tls_refresh', 'sglang_server_tls_cert'),))
        for router in routers:
            names = ('sglang_router_tls_cert', 'sglang_router_tls_key', 'sglang_router_client_cert',
                     'sglang_router_client_key')
            settings = dict((name, _get(hostvars, router, name, '')) for name in names)
            settings['sglang_router_tls_ca_cert'] = _get(hostvars, router, 'sglang_router_tls_ca_cert',
                                                         _get(hostvars, router, 'llmops_tls_ca_cert', ''))
            problems += _tls.material_problems(router, settings, _tls.ROUTER_TLS_PAIRS, readable)

        # Variable names nothing declares.
        declared = _fleet.declared_names(COLLECTION_ROOT) | set(args['known'])
        unknown = {}
        for host in servers + [r for r in routers if r not in servers]:
            for name, close in _fleet.unknown_names(hostvars[host].keys(), declared):
                unknown.setdefault((name, close), []).append(host)
        for (name, close), hosts in sorted(unknown.items()):
            text = ('%s (on %s) is not a variable of llmops.serving%s' %
                    (name, ', '.join(hosts), ': did you mean %s?' % close if close else ''))
            if args['strict']:
                problems.append(text + ' (llmops_strict is true)')
            else:
                display.warning(text)
                notes.append(text)

        # Hosts of an inventory group that serve without the drafter the others run.
        members = {}
        for host in servers:
            for group in _get(hostvars, host, 'group_names', []):
                if group not in (args['router_group'], args['worker_group']):
                    members.setdefault(group, []).append(host)
        for note in _fleet.speculation_mixed(
                members, dict((h, _get(hostvars, h, 'sglang_server_speculative_draft_model_path', '')) for h in servers)):
            display.warning(note)
            notes.append(note)

        result.update(changed=False, problems=problems, notes=notes, batches=batch_list,
                      stopping=sorted(stopping, key=servers.index))
        if problems:
            result['failed'] = True
            result['msg'] = ('the rollout is refused before anything stopped (%d problem%s): %s' % (
                len(problems), '' if len(problems) == 1 else 's', ' | '.join(problems)))
        return result
