# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""drafter_checkpoint on drafters saved in the vllm-project speculators layout."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ansible_collections.llmops.serving.plugins.modules import drafter_checkpoint
from ansible_collections.llmops.serving.tests.unit.plugins.modules._module_runner import run_main
from ansible_collections.llmops.serving.tests.unit._drafter_factory import (
    read_all, speculators_config, speculators_tensors, write_drafter)
from ansible_collections.llmops.serving.tests.unit.plugins.modules.test_drafter_checkpoint import snapshot


def run(capsys, check=False, diff=False, **args):
    return run_main(drafter_checkpoint.main, capsys, _ansible_check_mode=check, _ansible_diff=diff, **args)[0]


def make(tmp_path, layers=1, shards=1, **top):
    d = str(tmp_path / 'spec')
    config = speculators_config(layers=layers, **top)
    written = write_drafter(d, config=config, tensors=speculators_tensors(config), shards=shards)
    return d, config, written


def config_of(d):
    with open(os.path.join(d, 'config.json')) as f:
        return json.load(f)


def test_without_conversion_the_checkpoint_fails_as_no_sglang_reads_it(tmp_path, capsys):
    d, config, dummy = make(tmp_path)
    before = snapshot(d)
    result = run(capsys, path=d, engine_version='0.5.23', convert_speculators=False)
    assert result['failed'] and 'vllm-project speculators checkpoint' in result['msg']
    assert result['speculators']['converted'] is False and result['speculators']['refused'] == []
    assert snapshot(d) == before


def test_one_layer_converts_to_midlayer_for_0_5_11_then_idempotent(tmp_path, capsys):
    d, config, written = make(tmp_path)
    result = run(capsys, path=d, engine_version='0.5.11', diff=True)
    assert result['changed'] and result['problems'] == [] and result['config_changed']
    assert result['speculators'] == {
        'speculators_version': '0.3.0', 'speculators_model_type': 'eagle3',
        'verifier': 'meta-llama/Llama-3.1-8B-Instruct', 'converted': True, 'tensors_renamed': 0, 'refused': []}
    assert any('speculators' in m for m in result['fixed_problems'])
    flat = config_of(d)
    assert flat['architectures'] == ['LlamaForCausalLMEagle3'] and flat['model_type'] == 'llama'
    assert (flat['hidden_size'], flat['num_hidden_layers'], flat['vocab_size'], flat['draft_vocab_size']) == (32, 1, 96, 48)
    assert flat['tie_word_embeddings'] is False and flat['rope_theta'] == 500000.0
    assert flat['eagle_config'] == {'eagle_aux_hidden_state_layer_ids': [1, 15, 28]}
    # a null target_hidden_size would reach SGLang's hasattr() and be multiplied
    assert 'target_hidden_size' not in flat and 'transformer_layer_config' not in flat
    assert not any(k.startswith('speculators') for k in flat)
    assert result['diff']['before']['config'] == config and result['diff']['after']['config'] == flat
    after = read_all(d)
    assert sorted(after) == sorted(n.replace('layers.0.', 'midlayer.') for n in written)
    for name, array in written.items():
        np.testing.assert_array_equal(after[name.replace('layers.0.', 'midlayer.')], array)
    again = run(capsys, path=d, engine_version='0.5.11')
    assert not again['changed'] and 'speculators' not in again


def test_multi_layer_renames_plain_layer_norms_for_0_5_23(tmp_path, capsys):
    d, dummy, written = make(tmp_path, layers=3, shards=2, fc_norm=True, norm_output=True)
    result = run(capsys, path=d, engine_version='0.5.23')
    assert result['changed'] and result['problems'] == [] and result['index_changed']
    assert result['speculators']['tensors_renamed'] == 2 and result['layout_after'] == 'layers'
    flat = config_of(d)
    assert flat['fc_norm'] is True and flat['norm_output'] is True and flat['num_hidden_layers'] == 3
    assert 'fc_norm.2.weight' in written
    after = read_all(d)
    for index in (1, 2):
        np.testing.assert_array_equal(after['layers.%d.hidden_norm.weight' % index],
                                      written['layers.%d.input_layernorm.weight' % index])
        assert 'layers.%d.input_layernorm.weight' % index not in after
    assert 'layers.0.input_layernorm.weight' in after and 'layers.0.hidden_norm.weight' in after
    with open(os.path.join(d, 'model.safetensors.index.json')) as f:
        assert 'layers.1.hidden_norm.weight' in json.load(f)['weight_map']


def test_check_mode_reports_the_conversion_and_changes_nothing(tmp_path, capsys):
    d, dummy, dummy2 = make(tmp_path, layers=2)
    before = snapshot(d)
    result = run(capsys, check=True, path=d, engine_version='0.5.15.post1')
    assert result['changed'] and result['config_changed'] and result['speculators']['converted']
    assert result['renames'] == [{'from': 'layers.1.input_layernorm.weight', 'to': 'layers.1.hidden_norm.weight'}]
    assert snapshot(d) == before


@pytest.mark.parametrize('top, layer, version, reason', [
    ({'norm_before_residual': True}, {}, '0.5.23', 'norm_before_residual is true'),
    ({}, {'model_type': 'qwen3'}, '0.5.23', "model_type is 'qwen3'"),
    ({}, {'attention_bias': True}, '0.5.23', 'attention_bias is true'),
    ({'norm_output': True}, {}, '0.5.11', 'norm_output is true: SGLang 0.5.11 ignores it'),
    ({'speculators_model_type': 'peagle'}, {}, '0.5.23', "speculators_model_type is 'peagle'"),
])
def test_unconvertible_drafters_are_refused_and_left_alone(tmp_path, capsys, top, layer, version, reason):
    config = speculators_config(**top)
    config['transformer_layer_config'].update(layer)
    d = str(tmp_path / 'spec')
    write_drafter(d, config=config, tensors=speculators_tensors(config))
    before = snapshot(d)
    result = run(capsys, path=d, engine_version=version)
    assert result['failed'] and not result['changed'] and reason in result['msg']
    assert result['speculators']['converted'] is False
    assert any(reason in r for r in result['speculators']['refused'])
    assert snapshot(d) == before


def test_missing_norm_before_residual_counts_as_true(tmp_path, capsys):
    d, config, dummy = make(tmp_path)
    del config['norm_before_residual']
    with open(os.path.join(d, 'config.json'), 'w') as f:
        json.dump(config, f)
    result = run(capsys, path=d, engine_version='0.5.23')
    assert result['failed'] and 'not set (vLLM reads that as true)' in result['msg']


def test_norm_before_fc_converts_but_needs_0_5_17(tmp_path, capsys):
    d, dummy, written = make(tmp_path, norm_before_fc=True)
    assert written['input_norm.weight'].shape == (96,)
    old = run(capsys, path=d, engine_version='0.5.15.post1')
    assert old['failed'] and 'input_norm' in old['msg'] and not old['changed']
    new = run(capsys, path=d, engine_version='0.5.17')
    assert new['problems'] == [] and config_of(d)['norm_before_fc'] is True
