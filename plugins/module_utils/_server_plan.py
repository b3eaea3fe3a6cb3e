# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The parts of a server's plan that need no host: its place in a multi-node group, the GPUs it
uses, and the launch spec (what ``_sglang_args.build_argv`` turns into the argv). Pure functions
over the sglang_server role's options (a dict keyed by the variable names); the action plugin
``sglang_server_plan`` reads the options, runs the host's launch check and calls them."""

from __future__ import annotations

PREFIX = 'sglang_server_'
# Role options that go into the launch spec under their name without the prefix.
SPEC_OPTIONS = ('engine', 'model_path', 'served_model_name', 'tp_size', 'dist_timeout', 'host', 'port',
                'mem_fraction_static', 'max_running_requests', 'cuda_graph_max_bs', 'enable_metrics',
                'trust_remote_code', 'extra_args', 'nccl_port', 'disaggregation_mode', 'disaggregation_transfer_backend',
                'disaggregation_bootstrap_port', 'disaggregation_ib_device', 'disaggregation_kv_checksum')
SPECULATIVE_OPTIONS = ('algorithm', 'draft_model_path', 'depth', 'num_steps', 'eagle_topk', 'num_draft_tokens',
                       'adaptive', 'adaptive_config')
# Every role option the plan reads.
OPTIONS = tuple(PREFIX + name for name in SPEC_OPTIONS) + tuple(
    PREFIX + 'speculative_' + name for name in SPECULATIVE_OPTIONS) + tuple(
    PREFIX + name for name in ('group_hosts', 'dist_init_port', 'gpus', 'env', 'python', 'launcher',
                               'help_cache_dir'))
CUDA_VISIBLE_DEVICES = 'CUDA_VISIBLE_DEVICES'


class PlanError(ValueError):
    """A setting the plan refuses, before anything on the host is touched."""


def group_layout(host, group_hosts, address_of, dist_init_port):
    """``{group, nnodes, node_rank, dist_init_addr}`` of ``host`` (sglang_server_group_hosts: more than one
    host makes a multi-node group, rank 0 first, whose inventory address ``address_of(rank 0)`` is the
    rendezvous address; one host or none is no group)."""
    group = list(group_hosts or [])
    if len(group) < 2:
        return {'group': [], 'nnodes': 1, 'node_rank': 0, 'dist_init_addr': ''}
    if host not in group:
        raise PlanError('sglang_server_group_hosts of %s lists %s but not this host: list every host of the group, '
                        'rank 0 first, on each of them' % (host, ', '.join(group)))
    return {'group': group, 'nnodes': len(group), 'node_rank': group.index(host),
            'dist_init_addr': '%s:%s' % (address_of(group[0]), dist_init_port)}


def gpu_layout(host, tp_size, nnodes, gpus, env):
    """``{gpus, gpus_from}``: the GPUs (index or UUID) the server uses on ``host``, the first tp_size / nnodes
    of the visible ones (``gpus``, else CUDA_VISIBLE_DEVICES of ``env``, else every GPU), and the setting
    that chose them. PlanError names the setting that cannot work."""
    gpus = [str(gpu) for gpu in gpus or []]
    env = env or {}
    cvd = str(env[CUDA_VISIBLE_DEVICES]) if CUDA_VISIBLE_DEVICES in env else None
    if gpus:
        visible, source = gpus, 'sglang_server_gpus'
    elif cvd is not None:
        visible = [gpu.strip() for gpu in cvd.split(',') if gpu.strip()]
        source = 'CUDA_VISIBLE_DEVICES of sglang_server_env'
    else:
        visible, source = [], ''
    per_node = int(tp_size) // nnodes
    problem = None
    if int(tp_size) % nnodes:
        problem = ('sglang_server_tp_size %s is not a multiple of the %s hosts of the multi-node group'
                   % (tp_size, nnodes))
    elif gpus and cvd is not None and ','.join(gpus) != cvd.replace(' ', ''):
        problem = ('sglang_server_gpus %s and CUDA_VISIBLE_DEVICES %s of sglang_server_env differ: set one of them'
                   % (','.join(gpus), cvd))
    elif len(set(visible)) != len(visible):
        problem = '%s lists a GPU twice: %s' % (source, ','.join(visible))
    elif visible and len(visible) < per_node:
        problem = ('sglang_server_tp_size %s needs %s GPUs on this host, but %s names only %d: %s'
                   % (tp_size, per_node, source, len(visible), ','.join(visible)))
    if problem:
        raise PlanError('%s: %s; nothing was stopped or changed' % (host, problem))
    gpus_from = 'sglang_server_tp_size %s' % tp_size
    if nnodes > 1:
        gpus_from += ' (per host of the group: %d)' % per_node
    if source:
        gpus_from += ' on the GPUs of %s' % source
    return {'gpus': visible[:per_node] if visible else [str(i) for i in range(per_node)], 'gpus_from': gpus_from}


def launch_spec(options, layout):
    """The launch spec of ``_sglang_args.build_argv`` from the role's options and the group layout;
    no speculative settings without a drafter."""
    spec = dict((name, options[PREFIX + name]) for name in SPEC_OPTIONS)
    spec.update((name, layout[name]) for name in ('nnodes', 'node_rank', 'dist_init_addr'))
    spec['speculative'] = {}
    if options[PREFIX + 'speculative_draft_model_path']:
        spec['speculative'] = dict((name, options[PREFIX + 'speculative_' + name]) for name in SPECULATIVE_OPTIONS)
    return spec


def host_paths(options):
    """The model and drafter settings that name a path on the host (anything else is a hub id)."""
    names = (PREFIX + 'model_path', PREFIX + 'speculative_draft_model_path')
    return dict((name, options[name]) for name in names if str(options[name] or '').startswith('/'))


def launcher(requested, service_mgr):
    """``systemd`` or ``process``: the one requested (sglang_server_launcher, sglang_router_launcher), else
    systemd where it is the host's service manager (the router's plan, ``_router``, uses it too)."""
    return requested or ('systemd' if service_mgr == 'systemd' else 'process')
