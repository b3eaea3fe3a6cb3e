# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host-free parts of a server's plan (module_utils/_server_plan.py)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _server_plan
from ansible_collections.llmops.serving.plugins.module_utils._server_plan import PlanError


def options(**overrides):
    values = dict((name, None) for name in _server_plan.OPTIONS)
    values.update(sglang_server_engine='sglang', sglang_server_model_path='/models/target', sglang_server_tp_size=1,
                  sglang_server_speculative_draft_model_path='', sglang_server_group_hosts=[], sglang_server_gpus=[],
                  sglang_server_env={}, sglang_server_launcher='', sglang_server_extra_args=[])
    values.update(('sglang_server_' + name, value) for name, value in overrides.items())
    return values


def test_one_host_is_no_group():
    for hosts in ([], ['a']):
        assert _server_plan.group_layout('a', hosts, str.upper, 5000) == {
            'group': [], 'nnodes': 1, 'node_rank': 0, 'dist_init_addr': ''}


def test_group_rank_and_rendezvous_address_of_rank_0():
    layout = _server_plan.group_layout('b', ['a', 'b'], {'a': '10.0.0.1', 'b': '10.0.0.2'}.get, 5000)
    assert layout == {'group': ['a', 'b'], 'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '10.0.0.1:5000'}


def test_a_host_missing_from_its_own_group_is_refused():
    with pytest.raises(PlanError, match='sglang_server_group_hosts of c lists a, b but not this host'):
        _server_plan.group_layout('c', ['a', 'b'], str, 5000)


@pytest.mark.parametrize('tp, nnodes, gpus, env, expected', [
    (2, 1, [], {}, {'gpus': ['0', '1'], 'gpus_from': 'sglang_server_tp_size 2'}),
    (2, 1, [4, 5, 6], {}, {'gpus': ['4', '5'], 'gpus_from': 'sglang_server_tp_size 2 on the GPUs of sglang_server_gpus'}),
    (8, 2, [], {'CUDA_VISIBLE_DEVICES': '3, 2,1,0'},
     {'gpus': ['3', '2', '1', '0'],
      'gpus_from': 'sglang_server_tp_size 8 (per host of the group: 4) on the GPUs of CUDA_VISIBLE_DEVICES of sglang_server_env'}),
    (2, 1, [0, 1], {'CUDA_VISIBLE_DEVICES': '0, 1'}, {'gpus': ['0', '1'], 'gpus_from': 'sglang_server_tp_size 2 on the GPUs of sglang_server_gpus'}),
])
def test_gpus_the_server_uses(tp, nnodes, gpus, env, expected):
    assert _server_plan.gpu_layout('h', tp, nnodes, gpus, env) == expected


@pytest.mark.parametrize('tp, nnodes, gpus, env, message', [
    (3, 2, [], {}, 'h: sglang_server_tp_size 3 is not a multiple of the 2 hosts of the multi-node group'),
    (2, 1, [0, 1], {'CUDA_VISIBLE_DEVICES': '1,0'},
     'h: sglang_server_gpus 0,1 and CUDA_VISIBLE_DEVICES 1,0 of sglang_server_env differ: set one of them'),
    (2, 1, [], {'CUDA_VISIBLE_DEVICES': '1,1'}, 'h: CUDA_VISIBLE_DEVICES of sglang_server_env lists a GPU twice: 1,1'),
    (4, 1, [0, 1], {}, 'h: sglang_server_tp_size 4 needs 4 GPUs on this host, but sglang_server_gpus names only 2: 0,1'),
])
def test_gpu_settings_that_cannot_work_are_named(tp, nnodes, gpus, env, message):
    with pytest.raises(PlanError) as err:
        _server_plan.gpu_layout('h', tp, nnodes, gpus, env)
    assert str(err.value) == message + '; nothing was stopped or changed'


def test_launch_spec_has_speculative_settings_only_with_a_drafter():
    layout = {'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '10.0.0.1:5000', 'group': ['a', 'b']}
    spec = _server_plan.launch_spec(options(port=30000, speculative_depth=5), layout)
    assert spec['speculative'] == {}
    assert (spec['model_path'], spec['port'], spec['nnodes'], spec['node_rank'], spec['dist_init_addr']) == (
        '/models/target', 30000, 2, 1, '10.0.0.1:5000')
    spec = _server_plan.launch_spec(options(speculative_draft_model_path='/models/drafter', speculative_depth=5,
                                            speculative_adaptive=True), layout)
    assert spec['speculative']['draft_model_path'] == '/models/drafter'
    assert (spec['speculative']['depth'], spec['speculative']['adaptive']) == (5, True)


def test_only_settings_that_name_a_host_path_are_checked_there():
    assert _server_plan.host_paths(options(model_path='org/model', speculative_draft_model_path='/d')) == {
        'sglang_server_speculative_draft_model_path': '/d'}


@pytest.mark.parametrize('setting, service_mgr, expected', [
    ('', 'systemd', 'systemd'), ('', 'sysvinit', 'process'), ('', None, 'process'), ('process', 'systemd', 'process')])
def test_launcher(setting, service_mgr, expected):
    assert _server_plan.launcher(setting, service_mgr) == expected


@pytest.mark.parametrize('setting, service_mgr', [
    ('', 'systemd'), ('', 'sysvinit'), ('', ''), ('process', 'systemd'), ('systemd', 'openrc')])
def test_the_launcher_rule_the_router_role_had(setting, service_mgr):
    # the router role's rule before its plan called _server_plan.launcher (roles/sglang_router/vars/main.yml)
    router_rule = setting if len(setting) > 0 else ('systemd' if service_mgr == 'systemd' else 'process')
    assert router_rule == _server_plan.launcher(setting, service_mgr)
