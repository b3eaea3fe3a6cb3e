# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prefill/decode (PD) argv of _sglang_args against the recorded parsers of SGLang 0.5.11, 0.5.15.post1
and 0.5.23 (tests/releases/fixtures, rebuilt as argparse parsers): the flags a prefill and a decode get,
the backends and flags each release lacks refused with the variable and the release named."""

from __future__ import annotations

import functools

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args as a
from ansible_collections.llmops.serving.tests.releases import releases

PD_VERSIONS = ('0.5.11', '0.5.15.post1', '0.5.23')
EAGLE3 = {'algorithm': 'EAGLE3', 'draft_model_path': '/models/drafter', 'depth': 4}
SPEC = {'model_path': '/models/llama', 'tp_size': 1, 'host': '0.0.0.0', 'port': 30000, 'speculative': EAGLE3}


@functools.lru_cache(maxsize=None)
def help_options(version):
    return a.parse_help(releases.help_text(version), version=version)


def parsed(version, argv):
    return vars(releases.parse(version, argv))


def pd_spec(mode, backend=None, **more):
    return dict(SPEC, disaggregation_mode=mode, disaggregation_transfer_backend=backend, **more)


def test_the_tables_match_the_recorded_parsers():
    """DISAGGREGATION_BACKENDS_SINCE and KV_CHECKSUM_SINCE against every recorded release."""
    for version in releases.versions():
        option = releases.find(releases.load(version), '--disaggregation-transfer-backend')
        assert set(a.transfer_backends(version)) <= set(option['choices']), version
        assert option['default'] == a.DEFAULT_TRANSFER_BACKEND
        assert releases.find(releases.load(version), '--disaggregation-bootstrap-port')['default'] == \
            a.DEFAULT_BOOTSTRAP_PORT
        assert ('mooncake_tcp' in option['choices']) == ('mooncake_tcp' in a.transfer_backends(version)), version
        has_checksum = any('--disaggregation-enable-kv-checksum' in entry['options']
                           for entry in releases.load(version)['options'])
        assert has_checksum == (a._version(version) >= a.KV_CHECKSUM_SINCE), version


@pytest.mark.parametrize('version', PD_VERSIONS)
@pytest.mark.parametrize('with_help', [False, True])
@pytest.mark.parametrize('mode', ['prefill', 'decode'])
def test_pd_argv_parses_as_intended(version, with_help, mode):
    backend = 'nixl'
    spec = pd_spec(mode, backend, nccl_port=31000, disaggregation_bootstrap_port=9000)
    argv = a.build_argv(spec, version=version, options=help_options(version) if with_help else None)
    values = parsed(version, argv)
    assert values['disaggregation_mode'] == mode
    assert values['disaggregation_transfer_backend'] == backend
    assert values['nccl_port'] == 31000
    # the bootstrap port is the prefill's; a decode is not given one (it keeps the default)
    assert values['disaggregation_bootstrap_port'] == (9000 if mode == 'prefill' else 8998)
    assert ('--disaggregation-bootstrap-port' in argv) == (mode == 'prefill')
    # both sides take the same speculative flags
    assert values['speculative_algorithm'] == 'EAGLE3' and values['speculative_num_draft_tokens'] == 4
    assert values['speculative_draft_model_path'] == '/models/drafter'


@pytest.mark.parametrize('version', PD_VERSIONS)
def test_a_null_backend_is_the_release_default(version):
    argv = a.build_argv(pd_spec('decode'), version=version, options=help_options(version))
    assert '--disaggregation-transfer-backend' not in argv
    assert parsed(version, argv)['disaggregation_transfer_backend'] == 'mooncake'
    assert a.disaggregation_plan(pd_spec('decode')) == {'mode': 'decode', 'transfer_backend': 'mooncake',
                                                        'bootstrap_port': None}


@pytest.mark.parametrize('version', PD_VERSIONS)
def test_no_mode_renders_no_pd_flag(version):
    argv = a.build_argv(dict(SPEC, disaggregation_bootstrap_port=8998), version=version)
    assert not [arg for arg in argv if arg.startswith('--disaggregation')]
    assert parsed(version, argv)['disaggregation_mode'] == 'null'
    assert a.disaggregation_plan(SPEC) == {'mode': None, 'transfer_backend': None, 'bootstrap_port': None}


@pytest.mark.parametrize('version,accepted', [('0.5.11', False), ('0.5.15.post1', True), ('0.5.23', True)])
@pytest.mark.parametrize('with_help', [False, True])
def test_mooncake_tcp_needs_0_5_13(version, accepted, with_help):
    spec = pd_spec('prefill', 'mooncake_tcp')
    options = help_options(version) if with_help else None
    if accepted:
        argv = a.build_argv(spec, version=version, options=options)
        assert parsed(version, argv)['disaggregation_transfer_backend'] == 'mooncake_tcp'
        # the release sets MC_FORCE_TCP=1 itself: the argv carries nothing else for it
        assert 'MC_FORCE_TCP' not in ' '.join(argv)
        return
    with pytest.raises(a.LaunchArgsError) as raised:
        a.build_argv(spec, version=version, options=options)
    assert str(raised.value) == ('sglang_server_disaggregation_transfer_backend mooncake_tcp needs SGLang 0.5.13 or '
                                 'newer (this is 0.5.11)')
    with pytest.raises(releases.ParseError):
        releases.parse(version, ['--model-path', '/m', '--disaggregation-transfer-backend', 'mooncake_tcp'])


def test_a_backend_the_installed_help_lacks_is_refused_by_its_choices():
    options = dict(help_options('0.5.23'))
    options['--disaggregation-transfer-backend'] = dict(options['--disaggregation-transfer-backend'],
                                                        choices=['mooncake', 'fake'])
    with pytest.raises(a.LaunchArgsError, match='sglang_server_disaggregation_transfer_backend nixl: the installed '
                                                'SGLang 0.5.23 accepts mooncake, fake'):
        a.build_argv(pd_spec('decode', 'nixl'), version='0.5.23', options=options)


@pytest.mark.parametrize('version,accepted', [('0.5.11', False), ('0.5.15.post1', False), ('0.5.23', True)])
@pytest.mark.parametrize('with_help', [False, True])
def test_kv_checksum_needs_0_5_21(version, accepted, with_help):
    spec = pd_spec('decode', disaggregation_kv_checksum=True)
    options = help_options(version) if with_help else None
    if accepted:
        argv = a.build_argv(spec, version=version, options=options)
        assert parsed(version, argv)['disaggregation_enable_kv_checksum'] is True
        return
    with pytest.raises(a.LaunchArgsError) as raised:
        a.build_argv(spec, version=version, options=options)
    assert str(raised.value) == ('sglang_server_disaggregation_kv_checksum needs SGLang 0.5.21 or newer '
                                 '(--disaggregation-enable-kv-checksum; this is %s)' % version)


@pytest.mark.parametrize('version', PD_VERSIONS + (None,))
def test_fake_is_refused_on_a_prefill_and_taken_by_a_decode(version):
    with pytest.raises(a.LaunchArgsError, match='sglang_server_disaggregation_transfer_backend fake is for a decode '
                                                'server only'):
        a.build_argv(pd_spec('prefill', 'fake'), version=version)
    argv = a.build_argv(pd_spec('decode', 'fake'), version=version)
    if version:
        assert parsed(version, argv)['disaggregation_transfer_backend'] == 'fake'


@pytest.mark.parametrize('version', PD_VERSIONS)
def test_ib_device(version):
    argv = a.build_argv(pd_spec('decode', 'mooncake', disaggregation_ib_device='mlx5_0,mlx5_1'), version=version,
                        options=help_options(version))
    assert parsed(version, argv)['disaggregation_ib_device'] == 'mlx5_0,mlx5_1'


def test_ib_device_with_mooncake_tcp_is_refused():
    with pytest.raises(a.LaunchArgsError, match='sglang_server_disaggregation_ib_device mlx5_0 is set with the '
                                                'transfer backend mooncake_tcp'):
        a.build_argv(pd_spec('decode', 'mooncake_tcp', disaggregation_ib_device='mlx5_0'), version='0.5.23')


@pytest.mark.parametrize('spec,message', [
    (dict(SPEC, disaggregation_transfer_backend='nixl'),
     'sglang_server_disaggregation_transfer_backend is set but sglang_server_disaggregation_mode is null'),
    (dict(SPEC, disaggregation_kv_checksum=True, disaggregation_ib_device='mlx5_0'),
     'sglang_server_disaggregation_ib_device, sglang_server_disaggregation_kv_checksum are set but'),
    (pd_spec('both'), "sglang_server_disaggregation_mode must be prefill, decode or null, got 'both'"),
    (pd_spec('decode', 'tcp'), 'sglang_server_disaggregation_transfer_backend must be one of mooncake, nixl, fake, '
                               "mooncake_tcp (or null: mooncake), got 'tcp'"),
    (pd_spec('prefill', disaggregation_bootstrap_port=70000),
     'sglang_server_disaggregation_bootstrap_port must be at most 65535, got 70000'),
    (dict(SPEC, nccl_port=0), 'sglang_server_nccl_port must be at least 1, got 0'),
    (dict(pd_spec('decode'), engine='vllm'), 'sglang_server_disaggregation_mode decode is an SGLang setting'),
])
def test_settings_no_release_takes_are_refused_without_a_version(spec, message):
    with pytest.raises(a.LaunchArgsError) as raised:
        a.build_argv(spec)
    assert message in str(raised.value)


@pytest.mark.parametrize('version', PD_VERSIONS)
def test_nccl_port_alone(version):
    argv = a.build_argv(dict(SPEC, nccl_port=31005), version=version, options=help_options(version))
    assert argv[-2:] == ['--nccl-port', '31005'] or parsed(version, argv)['nccl_port'] == 31005
