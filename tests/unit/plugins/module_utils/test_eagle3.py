# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _eagle3 as e
from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version
from ansible_collections.llmops.serving.tests.unit._drafter_factory import (
    drafter_config, drafter_tensors, mla_drafter_config, mla_drafter_tensors)


def tensor_map(config, spelling='layers', prefix='', drop=(), extra=None):
    out = {n: ('d/model.safetensors', 'F16', list(a.shape))
           for n, a in drafter_tensors(config, spelling, prefix).items() if n not in drop}
    out.update(extra or {})
    return out


def problems(tensors, config, engine='sglang', version=None, layout='auto'):
    return e.find_problems(tensors, config, 'd/config.json', e.Rules(engine, parse_version(version)),
                           'd', layout)


@pytest.mark.parametrize('text, expected', [
    ('0.5.11', (0, 5, 11)), ('0.5.15.post1', (0, 5, 15)), ('v0.5.12rc1', (0, 5, 12)),
    ('0.6', (0, 6, 0)), (None, None), ('', None),
])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_parse_version_rejects_garbage():
    with pytest.raises(ValueError, match='not a version'):
        parse_version('latest')


@pytest.mark.parametrize('engine, version, loads_layers, max_layers, strict', [
    ('sglang', None, False, 1, False),
    ('sglang', '0.5.11', False, 1, False),
    ('sglang', '0.5.12', True, None, False),
    ('sglang', '0.5.23', True, None, False),
    ('vllm', None, True, None, True),
    ('vllm', '0.32.0', True, None, True),
])
def test_rules(engine, version, loads_layers, max_layers, strict):
    rules = e.Rules(engine, parse_version(version))
    assert (rules.loads_layers_names, rules.max_layers, rules.strict) == (loads_layers, max_layers, strict)


@pytest.mark.parametrize('name, expected', [
    ('midlayer.mlp.up_proj.weight', (False, 0, 'mlp.up_proj.weight', 'midlayer')),
    ('layers.3.hidden_norm.weight', (False, 3, 'hidden_norm.weight', 'layers')),
    ('model.layers.0.mlp.up_proj.weight', (True, 0, 'mlp.up_proj.weight', 'layers')),
    ('model.fc.weight', (True, None, 'fc.weight', None)),
    ('d2t', (False, None, 'd2t', None)),
])
def test_split_name(name, expected):
    assert e.split_name(name) == expected


@pytest.mark.parametrize('names, layout', [
    (['fc.weight', 'midlayer.x'], 'midlayer'), (['layers.0.x', 'layers.1.x'], 'layers'),
    (['midlayer.x', 'layers.1.x'], 'mixed'), (['fc.weight'], 'none'),
])
def test_detect_layout(names, layout):
    assert e.detect_layout(names) == layout


@pytest.mark.parametrize('spelling, layers, engine, version, layout, renamed, after', [
    ('layers', 1, 'sglang', None, 'auto', 10, 'midlayer'),
    ('layers', 1, 'sglang', '0.5.11', 'auto', 10, 'midlayer'),
    ('layers', 1, 'sglang', '0.5.12', 'auto', 0, 'layers'),
    ('midlayer', 1, 'sglang', None, 'auto', 0, 'midlayer'),
    ('midlayer', 1, 'vllm', None, 'auto', 0, 'midlayer'),
    ('layers', 1, 'vllm', None, 'auto', 0, 'layers'),
    ('midlayer', 1, 'vllm', None, 'layers', 10, 'layers'),
    ('layers', 1, 'vllm', None, 'midlayer', 10, 'midlayer'),
    ('midlayer', 2, 'sglang', '0.5.12', 'layers', 10, 'layers'),
    ('layers', 2, 'sglang', '0.5.12', 'auto', 0, 'layers'),
])
def test_plan_renames_layout(spelling, layers, engine, version, layout, renamed, after):
    config = drafter_config(layers=layers)
    names = list(drafter_tensors(config, spelling))
    mapping, layout_after = e.plan_renames(names, config, e.Rules(engine, parse_version(version)), layout)
    assert (len(mapping), layout_after) == (renamed, after)
    assert all(old.split('.')[-1] == new.split('.')[-1] for old, new in mapping.items())


def test_plan_renames_strips_model_prefix_for_vllm_only_and_lm_head_for_sglang():
    config = drafter_config()
    names = list(drafter_tensors(config, 'midlayer', prefix='model.'))
    vllm = e.plan_renames(names, config, e.Rules('vllm'))[0]
    assert vllm['model.fc.weight'] == 'fc.weight' and len(vllm) == len(names)
    sglang = e.plan_renames(names, config, e.Rules('sglang'))[0]
    assert sglang == {'model.lm_head.weight': 'lm_head.weight'}


def test_plan_renames_user_rules_first_match_wins():
    config = drafter_config()
    names = list(drafter_tensors(config, 'midlayer', prefix='draft_model.'))
    rules = [{'from': 'draft_model.', 'to': ''}, {'from': 'draft_', 'to': 'x'}]
    mapping = e.plan_renames(names, config, e.Rules('sglang'), rename=rules)[0]
    assert sorted(mapping.values()) == sorted(drafter_tensors(config, 'midlayer'))


def test_good_drafters_have_no_problems():
    config = drafter_config()
    assert problems(tensor_map(config, 'midlayer'), config) == []
    assert problems(tensor_map(config, 'layers'), config, 'sglang', '0.5.12') == []
    assert problems(tensor_map(config, 'layers'), config, 'vllm') == []
    assert problems(tensor_map(config, 'midlayer', prefix='model.', drop=('model.lm_head.weight',),
                               extra={'lm_head.weight': ('f', 'F16', [48, 32])}), config) == []
    config2 = drafter_config(layers=3)
    assert problems(tensor_map(config2), config2, 'sglang', '0.5.15.post1') == []


@pytest.mark.parametrize('engine, version, spelling, prefix, drop, extra, config_kw, expected', [
    ('sglang', '0.5.11', 'layers', '', (), None, {}, 'silently dropped by SGLang 0.5.11'),
    ('sglang', None, 'layers', '', (), None, {}, 'no engine_version given'),
    ('vllm', None, 'layers', '', (), {'layers.0.self_attn.rotary.inv_freq': ('f', 'F32', [4])}, {},
     "makes vLLM fail to start: KeyError: 'layers.0.self_attn.rotary.inv_freq'"),
    ('sglang', '0.5.12', 'layers', '', (), {'aux_head.weight': ('f', 'F16', [4])}, {},
     "'aux_head.weight' would be silently dropped"),
    ('vllm', None, 'midlayer', 'model.', (), None, {}, "tensor 'model.fc.weight' makes vLLM fail to start: KeyError: 'model.fc.weight'"),
    ('vllm', None, 'midlayer', 'draft_model.', (), None, {},
     "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM"),
    ('vllm', None, 'midlayer', 'draft_model.', (), None, {},
     "every unloadable tensor name starts with 'draft_model.': add the rename rule {from: 'draft_model.', to: ''}"),
    ('sglang', '0.5.12', 'midlayer', 'draft_model.', (), None, {},
     "tensor 'draft_model.fc.weight' would be silently dropped by SGLang 0.5.12 (unknown weight name)"),
    ('vllm', None, 'midlayer', '', ('lm_head.weight',), None, {}, "shares the target's lm_head"),
    ('sglang', None, 'midlayer', 'model.', (), None, {}, "'model.lm_head.weight' would be silently dropped"),
    ('sglang', None, 'midlayer', '', ('lm_head.weight',), None, {}, "missing required tensor 'lm_head.weight'"),
    ('vllm', None, 'midlayer', '', ('norm.weight',), None, {},
     'ValueError: Following weights were not initialized from checkpoint'),
    ('sglang', None, 'midlayer', '', ('d2t',), None, {}, "missing required tensor 'd2t'"),
    ('sglang', None, 'midlayer', '', ('fc.weight',), {'fc.weight': ('f', 'F16', [32, 64])}, {},
     "'fc.weight' has shape [32, 64], config.json implies [32, 96]"),
    ('sglang', '0.5.12', 'midlayer', '', (), {'layers.0.mlp.up_proj.weight': ('f', 'F16', [64, 32])}, {},
     'duplicate weight'),
    ('vllm', None, 'midlayer', '', (), {'layers.0.mlp.up_proj.weight': ('f', 'F16', [64, 32])}, {},
     'duplicate weight'),
    ('sglang', '0.5.11', 'midlayer', '', (), None, {'layers': 2}, 'rejects num_hidden_layers != 1'),
    ('sglang', None, 'midlayer', '', (), None, {'layers': 2}, 'set engine_version'),
    ('sglang', None, 'midlayer', '', (), None, {'architectures': ['LlamaForCausalLM']},
     "KeyError: 'midlayer.self_attn.qkv_proj.weight'"),
])
def test_problems(engine, version, spelling, prefix, drop, extra, config_kw, expected):
    config = drafter_config(**config_kw)
    tensors = tensor_map(drafter_config(), spelling, prefix, drop, extra)
    found = problems(tensors, config, engine, version)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize('arch', ['Eagle3LlamaForCausalLM', 'LlamaForCausalLM'])
def test_vllm_builds_the_drafter_whatever_the_architecture(arch):
    config = drafter_config(architectures=[arch])
    assert problems(tensor_map(config, 'midlayer'), config, 'vllm') == []
    assert problems(tensor_map(config, 'midlayer'), config, 'sglang')


@pytest.mark.parametrize('name, error', [
    ('fc.weight', None), ('midlayer.self_attn.q_proj.weight', None), ('layers.1.mlp.up_proj.weight', None),
    ('lm_head.weight', None), ('d2t', None), ('t2d', None), ('draft_model.t2d', None),
    ('embed_tokens.weight', None),
    ('layers.2.mlp.up_proj.weight', "KeyError: 'layers.2.mlp.gate_up_proj.weight'"),
    ('model.midlayer.self_attn.k_proj.weight', "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'"),
    ('model.lm_head.weight', "KeyError: 'lm_head.weight'"),
    ('draft_model.lm_head.weight', "ValueError: There is no module or parameter named 'draft_model'"),
    ('draft_model.d2t', "ValueError: There is no module or parameter named 'draft_model'"),
])
def test_vllm_load_error(name, error):
    found = e.vllm_load_error(name, layers=2)
    assert found == error if error is None else found.startswith(error)


@pytest.mark.parametrize('draft_vocab, tie, d2t_required, lm_head_required', [
    (48, False, True, True), (96, False, False, True), (None, False, False, False), (None, True, False, True),
])
def test_vocabulary_rules(draft_vocab, tie, d2t_required, lm_head_required):
    config = drafter_config()
    config['draft_vocab_size'] = draft_vocab
    config['tie_word_embeddings'] = tie
    shapes = e.DraftConfig(config).expected_shapes()
    assert (shapes['d2t'][1], shapes['lm_head.weight'][1]) == (d2t_required, lm_head_required)


def test_fc_width_follows_aux_layer_ids_and_target_hidden():
    config = drafter_config()
    config['eagle_config'] = {'eagle_aux_hidden_state_layer_ids': [0, 1]}
    config['target_hidden_size'] = 48
    assert e.DraftConfig(config).expected_shapes()['fc.weight'][0] == [32, 96]


def test_layout_midlayer_cannot_hold_two_layers():
    config = drafter_config(layers=2)
    found = problems(tensor_map(config), config, 'sglang', '0.5.12', layout='midlayer')
    assert any('layout midlayer holds one layer' in p for p in found)


def test_config_missing_fields():
    found = problems({}, {'architectures': ['LlamaForCausalLMEagle3']})
    assert any('lacks integer hidden_size' in p for p in found)


def test_looks_like_eagle3():
    config = drafter_config()
    assert e.looks_like_eagle3(drafter_tensors(config, 'midlayer', 'model.'))
    assert not e.looks_like_eagle3(['model.layers.0.mlp.up_proj.weight', 'lm_head.weight'])


# ---- norms and checkpoint layouts per SGLang release (llama_eagle3.py of each wheel:
# tests/releases/fixtures, "loader"; see test_loader_facts_match_the_releases)

def fc_norms(config, names=('fc_norm.0.weight', 'fc_norm.1.weight', 'fc_norm.2.weight')):
    return {name: ('d/model.safetensors', 'F16', [config['hidden_size']]) for name in names}


@pytest.mark.parametrize('version', ['0.5.15.post1', '0.5.23'])
def test_fc_norm_without_its_config_flag_is_silently_dropped(version):
    config = drafter_config()
    found = problems(tensor_map(config, extra=fc_norms(config)), config, version=version)
    assert len(found) == 3 and all('silently dropped' in p and '"fc_norm": true' in p for p in found)


@pytest.mark.parametrize('flag', ['fc_norm', 'use_aux_norm'])
def test_fc_norm_with_its_config_flag_loads_and_is_required(flag):
    config = dict(drafter_config(), **{flag: True})
    assert problems(tensor_map(config, extra=fc_norms(config)), config, version='0.5.23') == []
    missing = problems(tensor_map(config), config, version='0.5.23')
    assert len(missing) == 3 and all("missing required tensor 'fc_norm." in p for p in missing)


def test_legacy_aux_norm_names_load_as_fc_norm():
    config = dict(drafter_config(), fc_norm=True)
    legacy = fc_norms(config, ('aux_norm_low.weight', 'aux_norm_mid.weight', 'aux_norm_high.weight'))
    assert problems(tensor_map(config, extra=legacy), config, version='0.5.15.post1') == []


def test_fc_norm_on_0_5_11_gets_no_nonsense_rename_advice():
    config = dict(drafter_config(), fc_norm=True)
    found = problems(tensor_map(config, 'midlayer', extra=fc_norms(config)), config, version='0.5.11')
    assert len(found) == 3 and all('fc_norm loads from SGLang 0.5.12 on' in p for p in found)
    assert not any('rename rule' in p for p in found)


def test_prefix_advice_still_given_where_stripping_makes_names_load():
    config = drafter_config()
    names = {'draft.' + n: v for n, v in tensor_map(config).items()}
    found = problems(names, config, version='0.5.23')
    assert "rename rule {from: 'draft.', to: ''}" in found[0]


def input_norm(config):
    return {'input_norm.weight': ('d/model.safetensors', 'F16', [3 * config['hidden_size']])}


@pytest.mark.parametrize('where', ['top', 'eagle_config'])
def test_input_norm_loads_on_0_5_23_with_norm_before_fc(where):
    config = drafter_config()
    if where == 'top':
        config['norm_before_fc'] = True
    else:
        config['eagle_config'] = {'norm_before_fc': True}
    assert problems(tensor_map(config, extra=input_norm(config)), config, version='0.5.23') == []
    assert problems(tensor_map(config, extra=input_norm(config)), config, version='0.5.17') == []
    before = problems(tensor_map(config, extra=input_norm(config)), config, version='0.5.16')
    assert len(before) == 1 and 'input_norm (norm_before_fc) loads from SGLang 0.5.17 on' in before[0]


def test_input_norm_without_norm_before_fc_is_silently_dropped():
    config = drafter_config()
    found = problems(tensor_map(config, extra=input_norm(config)), config, version='0.5.23')
    assert len(found) == 1 and '"norm_before_fc": true' in found[0]


@pytest.mark.parametrize('config', [
    {'architectures': ['Eagle3DraftModel'], 'transformer_layer_config': {'hidden_size': 32}},
    {'architectures': ['Eagle3Speculator'], 'speculators_config': {}},
])
def test_speculators_checkpoint_is_refused_clearly(config):
    found = problems({'layers.0.hidden_norm.weight': ('d/model.safetensors', 'F16', [32])}, config,
                     version='0.5.23')
    assert found and 'vllm-project speculators checkpoint' in found[0]
    assert not any('lacks integer' in p for p in found)


def test_loader_facts_match_the_releases():
    from ansible_collections.llmops.serving.tests.releases import releases
    for version in releases.versions():
        facts = releases.load(version)['loader']['llama_eagle3']
        rules = e.Rules('sglang', parse_version(version))
        assert (rules.fc_norm_flag({'fc_norm': True}) is True) == facts['config_fc_norm'], version
        assert (rules.input_norm_flag({'norm_before_fc': True}) is True) == facts['config_norm_before_fc'], version
        assert rules.loads_layers_names == facts['layers_modulelist'] == facts['midlayer_to_layers0'], version


# ---- the Kimi-K2.5 MLA drafter (kimi_k25_eagle3.py, Eagle3DeepseekV2ForCausalLM) of each release

def releases_module():
    from ansible_collections.llmops.serving.tests.releases import releases
    return releases


RELEASES = releases_module().versions()


def mla_map(config, spelling='layers', drop=(), extra=None, shapes=None):
    out = {n: ('d/model.safetensors', 'F16', list(a.shape))
           for n, a in mla_drafter_tensors(config, spelling).items() if n not in drop}
    out.update(extra or {})
    for name, shape in (shapes or {}).items():
        out[name] = ('d/model.safetensors', 'F16', shape)
    return out


def model_parameters(config, version):
    """The parameters Eagle3DeepseekV2ForCausalLM has for ``config`` (its __init__ in the
    release's wheel: model.fc, model.midlayer.{self_attn,mlp,norms}, model.norm, lm_head)."""
    params = {'model.embed_tokens.weight', 'model.fc.weight', 'model.norm.weight', 'lm_head.weight',
              'model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight', 'model.midlayer.mlp.gate_up_proj.weight'}
    for rest in ('self_attn.q_a_layernorm', 'self_attn.q_b_proj', 'self_attn.kv_a_layernorm', 'self_attn.kv_b_proj',
                 'self_attn.o_proj', 'mlp.down_proj', 'input_layernorm', 'hidden_norm', 'post_attention_layernorm'):
        params.add('model.midlayer.%s.weight' % rest)
    facts = releases_module().load(version)['loader']['kimi_k25_eagle3']
    if facts['config_fc_norm'] and (config.get('fc_norm') or config.get('use_aux_norm')):
        params.update('model.fc_norm.%d.weight' % i for i in range(3))
    return params


def run_recorded_loader(version, names, params, module='kimi_k25_eagle3'):
    """Run the release's own load_weights of ``module`` (recorded in its fixture) on tensor
    ``names`` with numpy standing in for torch: (parameters loaded, names it warned about)."""
    import logging
    import re
    import textwrap
    import types
    import typing

    import numpy as np
    source = textwrap.dedent('\n'.join(releases_module().load(version)['loader'][module]['load_weights']))
    loaded, warned = set(), []

    class Param:
        def __init__(self, name):
            self.weight_loader = lambda param, weight, *shard: loaded.add(name)

    class Logger(logging.Logger):
        def warning(self, msg, *args, **kwargs):
            warned.append(args[0])

    fake_torch = types.SimpleNamespace(Tensor=object, arange=np.arange,
                                       cat=lambda parts, dim=0: np.concatenate(parts, axis=dim))
    namespace = {'torch': fake_torch, 're': re, 'Iterable': typing.Iterable, 'Tuple': typing.Tuple,
                 'logger': Logger('recorded'), 'default_weight_loader': None}
    exec(compile(source, 'kimi_k25_eagle3.py', 'exec'), namespace)  # pylint: disable=exec-used
    model = types.SimpleNamespace(named_parameters={p: Param(p) for p in params}.items,
                                  post_load_weights=lambda: None)
    namespace['load_weights'](model, [(n, np.zeros(1)) for n in names])
    return loaded, warned


def mla_problems(tensors, config, version):
    return e.find_problems(tensors, config, 'd/config.json', e.Rules('sglang', parse_version(version), 'mla'), 'd')


MLA_RELEASES = [v for v in RELEASES if 'kimi_k25_eagle3' in releases_module().load(v)['loader']]


@pytest.mark.parametrize('version', RELEASES)
def test_mla_loader_exists_where_the_release_ships_it(version):
    rules = e.Rules('sglang', parse_version(version), 'mla')
    assert rules.has_mla_loader == (version in MLA_RELEASES)
    config = mla_drafter_config()
    found = mla_problems(mla_map(config), config, version)
    if version in MLA_RELEASES:
        assert found == []
    else:
        assert len(found) == 1 and 'first ships in SGLang %s' % MLA_RELEASES[0] in found[0]


@pytest.mark.parametrize('version', MLA_RELEASES)
@pytest.mark.parametrize('spelling', ['layers', 'midlayer'])
@pytest.mark.parametrize('fc_norm', [False, True])
def test_mla_drafter_loads_every_parameter_with_the_recorded_loader(version, spelling, fc_norm):
    config = mla_drafter_config(fc_norm=fc_norm)
    tensors = mla_map(config, spelling)
    loaded, warned = run_recorded_loader(version, tensors, model_parameters(config, version))
    found = mla_problems(tensors, config, version)
    names_with_problems = {n for n in tensors if any(repr(n) in p for p in found)}
    assert loaded == model_parameters(config, version)
    assert names_with_problems == set(warned), (found, warned)
    # the names load as they are: the loader maps layers.0 -> midlayer itself
    mapping, layout = e.plan_renames(list(tensors), config, e.Rules('sglang', parse_version(version), 'mla'))
    assert mapping == {} and layout == spelling


@pytest.mark.parametrize('version', MLA_RELEASES)
def test_mla_fc_norm_needs_its_release_and_config_flag(version):
    facts = releases_module().load(version)['loader']['kimi_k25_eagle3']
    rules = e.Rules('sglang', parse_version(version), 'mla')
    assert (rules.fc_norm_flag({'fc_norm': True}) is True) == facts['config_fc_norm']
    config = mla_drafter_config(fc_norm=True)
    found = mla_problems(mla_map(config), config, version)
    if facts['config_fc_norm']:
        assert found == []
        missing = mla_problems(mla_map(config, drop=('fc_norm.1.weight',)), config, version)
        assert len(missing) == 1 and "missing required tensor 'fc_norm.1.weight'" in missing[0]
    else:
        assert len(found) == 3 and all(e.MLA_WARNING in p and '0.5.13.post1' in p for p in found)


@pytest.mark.parametrize('version', MLA_RELEASES)
@pytest.mark.parametrize('drop, extra, expected', [
    (('layers.0.self_attn.kv_b_proj.weight',), None, ["missing required tensor 'layers.0.self_attn.kv_b_proj.weight'"]),
    (('layers.0.self_attn.kv_a_proj_with_mqa.weight',), None,
     ["missing required tensor 'layers.0.self_attn.kv_a_proj_with_mqa.weight': SGLang fills fused_qkv_a_proj_with_mqa"]),
    ((), {'model.norm.weight': ('d/model.safetensors', 'F16', [32])}, ['strip the "model." prefix']),
    ((), {'layers.1.hidden_norm.weight': ('d/model.safetensors', 'F16', [32])}, ['one layer']),
    ((), {'aux_norm_low.weight': ('d/model.safetensors', 'F16', [32])}, ['rename it to fc_norm.0.weight']),
    ((), {'layers.0.self_attn.q_proj.weight': ('d/model.safetensors', 'F16', [48, 64])}, ['a Llama attention weight']),
    (('layers.0.self_attn.q_a_proj.weight', 'layers.0.self_attn.kv_a_proj_with_mqa.weight'),
     {'layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight': ('d/model.safetensors', 'F16', [28, 64])},
     ['silently dropped', "missing required tensor 'layers.0.self_attn.q_a_proj.weight'",
      "missing required tensor 'layers.0.self_attn.kv_a_proj_with_mqa.weight'"]),
])
def test_mla_missing_and_unloadable_tensors_are_named(version, drop, extra, expected):
    config = mla_drafter_config()
    tensors = mla_map(config, drop=drop, extra=extra)
    found = mla_problems(tensors, config, version)
    assert len(found) == len(expected) and all(text in p for text, p in zip(expected, found)), found
    loaded, warned = run_recorded_loader(version, tensors, model_parameters(config, version))
    assert {n for n in tensors if any(repr(n) in p and e.MLA_WARNING in p for p in found)} == set(warned)
    if not drop:
        assert loaded == model_parameters(config, version)


@pytest.mark.parametrize('name, shape, field', [
    ('layers.0.self_attn.q_a_proj.weight', [16, 32], '[16, 64]'),
    ('layers.0.self_attn.kv_a_proj_with_mqa.weight', [8, 64], '[12, 64]'),
    ('layers.0.self_attn.q_b_proj.weight', [32, 16], '[48, 16]'),
    ('layers.0.self_attn.kv_b_proj.weight', [48, 8], '[64, 8]'),
    ('layers.0.self_attn.o_proj.weight', [32, 48], '[32, 32]'),
    ('fc.weight', [32, 64], '[32, 96]'),
])
def test_mla_misshapen_tensors_are_named_with_the_shape_config_json_implies(name, shape, field):
    config = mla_drafter_config()
    found = mla_problems(mla_map(config, shapes={name: shape}), config, '0.5.23')
    assert len(found) == 1 and repr(name) in found[0] and 'config.json implies %s' % field in found[0]


@pytest.mark.parametrize('change, expected', [
    ({'num_hidden_layers': 2}, 'EAGLE3 currently only supports 1 layer'),
    ({'q_lora_rank': None}, 'requires q_lora_rank'),
    ({'architectures': ['DeepseekV3ForCausalLM']}, 'is not Eagle3DeepseekV2ForCausalLM'),
])
def test_mla_config_problems(change, expected):
    config = dict(mla_drafter_config(), **change)
    assert any(expected in p for p in mla_problems(mla_map(mla_drafter_config()), config, '0.5.23'))


def test_drafter_class_is_never_switched():
    llama, mla = drafter_config(), mla_drafter_config()
    llama_names, mla_names = list(drafter_tensors(llama)), list(mla_drafter_tensors(mla))
    assert e.drafter_kind(mla, mla_names) == 'mla' and e.drafter_kind(llama, llama_names) == 'llama'
    rules = e.Rules('sglang', (0, 5, 23))
    # a class config.json names is kept, even against the tensors
    assert e.fixed_architecture(dict(llama, architectures=[e.MLA_ARCHITECTURE]), llama_names, rules.for_drafter('mla')) is None
    assert e.fixed_architecture(dict(mla, architectures=[e.EAGLE3_ARCHITECTURE]), mla_names, rules) is None
    # a plain class becomes the class of the tensors
    assert e.fixed_architecture(dict(llama, architectures=['LlamaForCausalLM']), llama_names, rules) == [e.EAGLE3_ARCHITECTURE]
    assert e.fixed_architecture(dict(mla, architectures=['DeepseekV3ForCausalLM']), mla_names,
                                rules.for_drafter('mla')) == [e.MLA_ARCHITECTURE]
    found = e.find_problems({n: ('d/m.safetensors', 'F16', [1]) for n in mla_names},
                            dict(mla, architectures=[e.EAGLE3_ARCHITECTURE]), 'd/config.json', rules, 'd')
    assert 'never turns one drafter class into the other' in found[0]


def test_mla_rules_match_the_recorded_loader_source():
    for version in MLA_RELEASES:
        facts = releases_module().load(version)['loader']['kimi_k25_eagle3']
        source = '\n'.join(facts['load_weights'])
        assert facts['entry_classes'] == [e.MLA_ARCHITECTURE], version
        assert facts['layers0_to_midlayer'] and not facts['tries_model_prefix'], version
        assert e.MLA_WARNING in source and 'fused_qkv_a_proj_with_mqa' in source, version
        assert not facts['aux_norm_legacy_names'] and not facts['config_norm_before_fc'], version


def llama_parameters(config, version):
    """The parameters LlamaForCausalLMEagle3 has for a one-layer ``config`` (llama_eagle3.py:
    model.midlayer before 0.5.12, model.layers.0 from 0.5.12; q/k/v and gate/up fused)."""
    layer = 'model.layers.0.' if releases_module().load(version)['loader']['llama_eagle3']['layers_modulelist'] \
        else 'model.midlayer.'
    rests = ('self_attn.qkv_proj', 'self_attn.o_proj', 'mlp.gate_up_proj', 'mlp.down_proj', 'input_layernorm',
             'hidden_norm', 'post_attention_layernorm')
    return {'model.embed_tokens.weight', 'model.fc.weight', 'model.norm.weight', 'lm_head.weight'} | {
        layer + rest + '.weight' for rest in rests}


@pytest.mark.parametrize('version', ['0.5.11', '0.5.15.post1', '0.5.23'])
def test_specforge_export_loads_with_the_recorded_llama_loader(version):
    """SpecForge's EAGLE-3 export (its public source: the draft model's state dict without
    "embed", midlayer.* names, d2t/t2d buffers) loads every parameter but the embedding, which
    SGLang shares from the target, and drafter_checkpoint finds nothing to change."""
    config = drafter_config()
    names = [n for n in drafter_tensors(config, 'midlayer') if 'embed' not in n]
    loaded, warned = run_recorded_loader(version, names, llama_parameters(config, version), 'llama_eagle3')
    assert loaded == llama_parameters(config, version) - {'model.embed_tokens.weight'} and warned == []
    tensors = {n: ('d/model.safetensors', 'F16', list(a.shape)) for n, a in drafter_tensors(config, 'midlayer').items()
               if n in names}
    assert problems(tensors, config, version=version) == []
    assert e.plan_renames(names, config, e.Rules('sglang', parse_version(version)))[0] == {}


@pytest.mark.parametrize('engine, version, expected', [
    ('sglang', None, 'set engine_version'),
    ('vllm', '0.32.0', 'for SGLang (kimi_k25_eagle3.py) only'),
])
def test_mla_drafter_without_a_known_loader_is_refused(engine, version, expected):
    config = mla_drafter_config(fc_norm=True)
    rules = e.Rules(engine, parse_version(version), 'mla')
    assert rules.fc_norm_flag(config) is None
    found = e.find_problems(mla_map(config), config, 'd/config.json', rules, 'd')
    assert len(found) == 1 and expected in found[0]
