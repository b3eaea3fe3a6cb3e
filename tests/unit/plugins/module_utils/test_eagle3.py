# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _eagle3 as e
from ansible_collections.llmops.serving.plugins.module_utils._version import parse_version
from ansible_collections.llmops.serving.tests.unit._drafter_factory import drafter_config, drafter_tensors


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
