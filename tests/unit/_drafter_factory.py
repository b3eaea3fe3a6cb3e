# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real (small) EAGLE-3 drafter checkpoints for tests, written with the safetensors library.

Import as ``ansible_collections.llmops.serving.tests.unit._drafter_factory`` (unit and
integration tests alike).
"""

from __future__ import annotations

import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file

LAYER = ('self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight',
         'self_attn.o_proj.weight', 'mlp.gate_proj.weight', 'mlp.up_proj.weight',
         'mlp.down_proj.weight', 'input_layernorm.weight', 'hidden_norm.weight',
         'post_attention_layernorm.weight')


def drafter_config(hidden=32, intermediate=64, heads=4, kv_heads=2, layers=1, vocab=96,
                   draft_vocab=48, architectures=('LlamaForCausalLMEagle3',)):
    return {
        'architectures': list(architectures), 'model_type': 'llama',
        'hidden_size': hidden, 'intermediate_size': intermediate,
        'num_attention_heads': heads, 'num_key_value_heads': kv_heads,
        'num_hidden_layers': layers, 'vocab_size': vocab, 'draft_vocab_size': draft_vocab,
        'rms_norm_eps': 1e-05, 'hidden_act': 'silu', 'tie_word_embeddings': False,
        'max_position_embeddings': 2048,
    }


def drafter_tensors(config, spelling='layers', prefix='', seed=0):
    """name -> array for a complete drafter; ``spelling``: 'layers' or 'midlayer'."""
    rng = np.random.default_rng(seed)
    h, inter = config['hidden_size'], config['intermediate_size']
    hd = h // config['num_attention_heads']
    q, kv = config['num_attention_heads'] * hd, config['num_key_value_heads'] * hd
    dv = config['draft_vocab_size']

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float16)

    out = {'fc.weight': rand(h, 3 * h), 'norm.weight': rand(h), 'lm_head.weight': rand(dv, h),
           'd2t': np.arange(dv, dtype=np.int64), 't2d': np.zeros(config['vocab_size'], dtype=bool)}
    for i in range(config['num_hidden_layers']):
        qkv_in = 2 * h if i == 0 else h
        pre = 'midlayer.' if spelling == 'midlayer' and i == 0 else 'layers.%d.' % i
        shapes = {'self_attn.q_proj.weight': (q, qkv_in), 'self_attn.k_proj.weight': (kv, qkv_in),
                  'self_attn.v_proj.weight': (kv, qkv_in), 'self_attn.o_proj.weight': (h, q),
                  'mlp.gate_proj.weight': (inter, h), 'mlp.up_proj.weight': (inter, h),
                  'mlp.down_proj.weight': (h, inter), 'input_layernorm.weight': (h,),
                  'hidden_norm.weight': (h,), 'post_attention_layernorm.weight': (h,)}
        for rest, shape in shapes.items():
            out[pre + rest] = rand(*shape)
    return {prefix + k: v for k, v in out.items()}


def write_drafter(directory, config=None, tensors=None, shards=1, metadata=None, **kw):
    """Write config.json and ``shards`` safetensors files (with an index when > 1).

    Returns the tensors written (name -> array) for integrity checks.
    """
    config = config or drafter_config(**{k: v for k, v in kw.items() if k not in ('spelling', 'prefix')})
    if tensors is None:
        tensors = drafter_tensors(config, kw.get('spelling', 'layers'), kw.get('prefix', ''))
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, 'config.json'), 'w') as f:
        json.dump(config, f, indent=2)
    names = list(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(directory, 'model.safetensors'), metadata=metadata)
        return tensors
    weight_map = {}
    for i in range(shards):
        fname = 'model-%05d-of-%05d.safetensors' % (i + 1, shards)
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, os.path.join(directory, fname), metadata=metadata)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(directory, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {'total_size': 0}, 'weight_map': weight_map}, f, indent=2)
    return tensors


def read_all(directory):
    """name -> array over every safetensors file in ``directory`` (data integrity checks)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith('.safetensors') and not name.startswith('.'):
            out.update(load_file(os.path.join(directory, name)))
    return out


def speculators_config(layers=1, model_type='llama', **top):
    """config.json as vllm-project speculators saves an EAGLE-3 drafter
    (Eagle3SpeculatorConfig.to_dict: sizes under transformer_layer_config)."""
    config = {
        'architectures': ['Eagle3Speculator'], 'speculators_model_type': 'eagle3',
        'speculators_version': '0.3.0', 'transformers_version': '4.57.1',
        'speculators_config': {
            'algorithm': 'eagle3', 'default_proposal_method': 'greedy',
            'proposal_methods': [{'proposal_type': 'greedy', 'speculative_tokens': 5}],
            'verifier': {'name_or_path': 'meta-llama/Llama-3.1-8B-Instruct', 'architectures': ['LlamaForCausalLM']},
        },
        'transformer_layer_config': {
            'model_type': model_type, 'hidden_size': 32, 'intermediate_size': 64,
            'num_attention_heads': 4, 'num_key_value_heads': 2, 'head_dim': 8,
            'num_hidden_layers': layers, 'vocab_size': 96, 'rms_norm_eps': 1e-05,
            'hidden_act': 'silu', 'max_position_embeddings': 2048, 'rope_theta': 500000.0,
            'attention_bias': False,
        },
        'draft_vocab_size': 48, 'target_hidden_size': None, 'eagle_aux_hidden_state_layer_ids': [1, 15, 28],
        'norm_before_residual': False, 'norm_before_fc': False, 'fc_norm': False, 'norm_output': False,
        'embed_requires_grad': False,
    }
    config.update(top)
    return config


def speculators_tensors(config, seed=0):
    """name -> array as speculators saves them: layers.0 is the EAGLE-3 input layer,
    layers.N (N >= 1) plain decoder layers (input_layernorm, no hidden_norm)."""
    layer = config['transformer_layer_config']
    flat = dict(layer, draft_vocab_size=config['draft_vocab_size'])
    out = drafter_tensors(flat, spelling='layers', seed=seed)
    out['embed_tokens.weight'] = np.zeros((layer['vocab_size'], layer['hidden_size']), dtype=np.float16)
    for index in range(1, layer['num_hidden_layers']):
        del out['layers.%d.hidden_norm.weight' % index]
    aux, hidden = len(config.get('eagle_aux_hidden_state_layer_ids') or (0, 0, 0)), layer['hidden_size']
    if config.get('fc_norm'):
        out.update(('fc_norm.%d.weight' % i, np.ones(hidden, dtype=np.float16)) for i in range(aux))
    if config.get('norm_before_fc'):
        out['input_norm.weight'] = np.ones(aux * hidden, dtype=np.float16)
    return out


def mla_drafter_config(hidden=32, intermediate=64, heads=4, vocab=96, draft_vocab=48, q_lora_rank=16,
                       kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                       aux_layer_ids=(1, 2, 3), **extra):
    """config.json of a Kimi-K2.5 style MLA EAGLE-3 drafter (Eagle3DeepseekV2ForCausalLM)."""
    config = {
        'architectures': ['Eagle3DeepseekV2ForCausalLM'], 'model_type': 'kimi_k2',
        'hidden_size': hidden, 'intermediate_size': intermediate, 'num_attention_heads': heads,
        'num_key_value_heads': heads, 'num_hidden_layers': 1, 'vocab_size': vocab,
        'draft_vocab_size': draft_vocab, 'q_lora_rank': q_lora_rank, 'kv_lora_rank': kv_lora_rank,
        'qk_rope_head_dim': qk_rope_head_dim, 'qk_nope_head_dim': qk_nope_head_dim, 'v_head_dim': v_head_dim,
        'rms_norm_eps': 1e-06, 'hidden_act': 'silu', 'tie_word_embeddings': False,
        'max_position_embeddings': 4096, 'rope_theta': 50000.0,
        'eagle_config': {'eagle_aux_hidden_state_layer_ids': list(aux_layer_ids)},
    }
    config.update(extra)
    return config


def mla_drafter_tensors(config, spelling='layers', seed=0):
    """name -> array for a complete MLA drafter, shaped as DeepseekV2AttentionMLA builds its
    projections (q_a / kv_a over the 2 x hidden EAGLE-3 input) with a dense MLP."""
    rng = np.random.default_rng(seed)
    h, inter, heads = config['hidden_size'], config['intermediate_size'], config['num_attention_heads']
    q_rank, kv_rank, rope = config['q_lora_rank'], config['kv_lora_rank'], config['qk_rope_head_dim']
    nope, v_dim = config['qk_nope_head_dim'], config['v_head_dim']
    aux = len(config['eagle_config']['eagle_aux_hidden_state_layer_ids'])
    dv = config['draft_vocab_size']

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float16)

    out = {'fc.weight': rand(h, aux * h), 'norm.weight': rand(h), 'lm_head.weight': rand(dv, h),
           'embed_tokens.weight': rand(config['vocab_size'], h),
           'd2t': np.zeros(dv, dtype=np.int64), 't2d': np.zeros(config['vocab_size'], dtype=bool)}
    if config.get('fc_norm') or config.get('use_aux_norm'):
        out.update(('fc_norm.%d.weight' % i, rand(h)) for i in range(aux))
    pre = 'midlayer.' if spelling == 'midlayer' else 'layers.0.'
    layer = {'self_attn.q_a_proj.weight': (q_rank, 2 * h), 'self_attn.q_a_layernorm.weight': (q_rank,),
             'self_attn.q_b_proj.weight': (heads * (nope + rope), q_rank),
             'self_attn.kv_a_proj_with_mqa.weight': (kv_rank + rope, 2 * h),
             'self_attn.kv_a_layernorm.weight': (kv_rank,),
             'self_attn.kv_b_proj.weight': (heads * (nope + v_dim), kv_rank),
             'self_attn.o_proj.weight': (h, heads * v_dim), 'mlp.gate_proj.weight': (inter, h),
             'mlp.up_proj.weight': (inter, h), 'mlp.down_proj.weight': (h, inter),
             'input_layernorm.weight': (h,), 'hidden_norm.weight': (h,), 'post_attention_layernorm.weight': (h,)}
    out.update((pre + rest, rand(*shape)) for rest, shape in layer.items())
    return out


def target_config(hidden=32, vocab=96, layers=4, architectures=('LlamaForCausalLM',), **extra):
    """config.json of a target model."""
    config = {'architectures': list(architectures), 'hidden_size': hidden, 'vocab_size': vocab,
              'num_hidden_layers': layers, 'num_attention_heads': 4, 'intermediate_size': 64}
    config.update(extra)
    return config


def write_target(directory, **kw):
    """A target model directory: only its config.json (what drafter_checkpoint reads)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, 'config.json'), 'w') as f:
        json.dump(target_config(**kw), f, indent=2)
    return directory
