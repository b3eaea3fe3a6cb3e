# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prefill/decode checks of the fleet preflight (module_utils/_fleet.py): what a pair must share, a PD router
with a prefill and a decode, a rolling change that would pair old and new servers, ports on a shared address."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _fleet

HEAD = ['/opt/llmops/sglang-0.5.15.post1/bin/python', '/etc/llmops/llmops_launch.py', 'sglang.launch_server']
SPEC = ['--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', '/models/drafter',
        '--speculative-num-steps', '3', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4']


def command(*more, model='/models/llama', spec=None):
    return HEAD + ['--model-path', model, '--port', '30000'] + (SPEC if spec is None else spec) + list(more)


def test_identity_from_the_command():
    identity = _fleet.pd_identity(command('--page-size=16', '--kv-cache-dtype', 'fp8_e4m3',
                                          '--disaggregation-mode', 'prefill'), '0.5.15.post1')
    assert identity == {'model': '/models/llama', 'drafter': '/models/drafter',
                        'speculative': '--speculative-algorithm EAGLE3 --speculative-num-steps 3 '
                                       '--speculative-eagle-topk 1 --speculative-num-draft-tokens 4',
                        'page_size': '16', 'kv_dtype': 'fp8_e4m3', 'release': '0.5.15.post1'}
    # the PD flags themselves (mode, backend, ports) are no part of it
    assert _fleet.pd_identity(command('--disaggregation-mode', 'decode', '--nccl-port', '1'), '0.5.15.post1') == dict(
        identity, page_size='', kv_dtype='')


def test_a_router_without_a_mode_is_no_pd_router():
    assert _fleet.pd_role_problems('router r1', {'a': None, 'b': None}) == []


def test_a_pd_router_needs_a_prefill_and_a_decode():
    assert _fleet.pd_role_problems('router r1', {'p1': 'prefill', 'p2': 'prefill'}) == [
        'router r1 runs in prefill/decode mode (p1, p2 have sglang_server_disaggregation_mode prefill) but has no '
        'decode server: set sglang_server_disaggregation_mode: decode on at least one of its servers']
    assert _fleet.pd_role_problems('router r1', {'d1': 'decode', 'x': None}) == [
        'router r1 runs in prefill/decode mode (d1 has sglang_server_disaggregation_mode decode) but has no prefill '
        'server: set sglang_server_disaggregation_mode: prefill on at least one of its servers',
        'router r1 runs in prefill/decode mode, but x has no sglang_server_disaggregation_mode: a server behind a PD '
        'router is a prefill or a decode; set it, or put the server behind another router']
    assert _fleet.pd_role_problems('router r1', {'p': 'prefill', 'd': 'decode'}) == []


def members(**commands):
    return dict((host, {'mode': 'prefill' if host.startswith('p') else 'decode',
                        'identity': _fleet.pd_identity(cmd, version)}) for host, (cmd, version) in commands.items())


def test_pairs_that_agree_pass():
    assert _fleet.pd_mismatches('router r1', members(p1=(command(), '0.5.15.post1'), d1=(command(), '0.5.15.post1'),
                                                     d2=(command(), '0.5.15.post1'))) == []


def test_a_mismatched_drafter_is_named_with_its_hosts():
    other = [arg.replace('/models/drafter', '/models/drafter-v2') for arg in SPEC]
    problems = _fleet.pd_mismatches('router r1', members(p1=(command(), '0.5.15.post1'),
                                                         d1=(command(spec=other), '0.5.15.post1')))
    assert problems == [
        'the prefill and decode servers of router r1 differ in their drafter '
        '(sglang_server_speculative_draft_model_path): /models/drafter on p1 (prefill); /models/drafter-v2 on d1 '
        '(decode); SGLang would pair them without a word, so every prefill and decode behind one router must share it']


@pytest.mark.parametrize('field,name,decode_command,version', [
    ('model', 'model', command(model='/models/other'), '0.5.15.post1'),
    ('speculative', 'speculative settings', command(spec=SPEC[:4] + ['--speculative-num-steps', '5']), '0.5.15.post1'),
    ('page_size', 'page size', command('--page-size', '32'), '0.5.15.post1'),
    ('kv_dtype', 'KV dtype', command('--kv-cache-dtype', 'fp8_e5m2'), '0.5.15.post1'),
    ('release', 'engine release', command(), '0.5.23'),
])
def test_each_field_that_differs_is_refused(field, name, decode_command, version):
    problems = _fleet.pd_mismatches('router r1', members(p1=(command(), '0.5.15.post1'), d1=(decode_command, version)))
    assert len(problems) == 1 and problems[0].startswith(
        'the prefill and decode servers of router r1 differ in their %s (' % name), problems
    assert '(unset) on' in problems[0] or field not in ('page_size', 'kv_dtype')


def test_a_rolling_change_across_pd_servers_is_refused_unless_mixed_ok():
    changes = {'p1': ['drafter'], 'd1': ['drafter']}
    batches = [['p1'], ['d1']]
    problems = _fleet.pd_rolling_problems('router r1', changes, ['p1', 'd1'], batches, False)
    assert problems == [
        'this deploy changes the drafter of prefill/decode servers of router r1 (d1, p1) one batch at a time: while '
        'it rolls, a server of the new drafter would pair with one of the old through the router (SGLang does not '
        'check it). Deploy the change blue-green behind a second router (README, "Prefill/decode disaggregation"), '
        'or set llmops_pd_mixed_ok: true to roll it anyway']
    assert _fleet.pd_rolling_problems('router r1', changes, ['p1', 'd1'], batches, True) == []
    # every PD server of the router restarts in one batch: no old server is left to pair with
    assert _fleet.pd_rolling_problems('router r1', changes, ['p1', 'd1'], [['p1', 'd1']], False) == []
    # a change of some only, even in one batch, pairs new with old
    assert _fleet.pd_rolling_problems('router r1', {'p1': ['release']}, ['p1', 'd1'], [['p1', 'd1']], False)
    # a restart that changes none of the fields is no concern
    assert _fleet.pd_rolling_problems('router r1', {'p1': [], 'd1': []}, ['p1', 'd1'], batches, False) == []


def test_pd_changes():
    before = _fleet.pd_identity(command(), '0.5.15.post1')
    assert _fleet.pd_changes(before, _fleet.pd_identity(command('--page-size', '16'), '0.5.15.post1')) == []
    assert _fleet.pd_changes(before, _fleet.pd_identity(command(model='/m2'), '0.5.23')) == ['model', 'release']


def test_ports_of_servers_on_one_address():
    servers = {
        'p1': {'address': '10.0.0.1', 'ports': [('sglang_server_port', 30000), ('sglang_server_nccl_port', 31000),
                                                ('sglang_server_disaggregation_bootstrap_port', 8998)]},
        'd1': {'address': '10.0.0.1', 'ports': [('sglang_server_port', 30001), ('sglang_server_nccl_port', 31000),
                                                ('sglang_server_disaggregation_bootstrap_port', None)]},
        'd2': {'address': '10.0.0.2', 'ports': [('sglang_server_port', 30000), ('sglang_server_nccl_port', None),
                                                ('sglang_server_disaggregation_bootstrap_port', None)]},
    }
    assert _fleet.port_clashes(servers) == [
        'd1, p1 share the address 10.0.0.1 and would both listen on port 31000 (sglang_server_nccl_port of d1, '
        'sglang_server_nccl_port of p1): give each server of a host its own sglang_server_port, '
        'sglang_server_nccl_port and sglang_server_disaggregation_bootstrap_port']
    servers['d1']['ports'][1] = ('sglang_server_nccl_port', 31001)
    assert _fleet.port_clashes(servers) == []
    servers['d1']['ports'][0] = ('sglang_server_port', 8998)
    assert 'port 8998 (sglang_server_port of d1, sglang_server_disaggregation_bootstrap_port of p1)' in \
        _fleet.port_clashes(servers)[0]
