# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a tiny target model and EAGLE-3 drafter for the SGLang simulator (TEST DOUBLE).

``make_tiny_checkpoint.py DEST [--spelling midlayer|layers] [--quality perfect|random|0.8]``
writes ``DEST/target`` (LlamaForCausalLM config + safetensors) and ``DEST/drafter``
(LlamaForCausalLMEagle3, every tensor the real loader wants, zero weights). Only the
standard library: runs with any python3 on a host. The simulator reads the drafter's
quality from the safetensors metadata key ``llmops_sim_quality``.

``make_tiny_checkpoint.py FILE --alter-tensor NAME`` changes the first byte of tensor NAME in the safetensors
FILE in place (a copy of the weights with one tensor changed: the simulator's /weights_checker checksum differs).
"""

from __future__ import annotations

import argparse
import json
import os
import struct

# 16 attention heads and 8 key/value heads: SGLang needs TP to divide them (the test bed runs TP up to 16).
HIDDEN, INTER, HEADS, KV_HEADS, VOCAB, DRAFT_VOCAB, LAYERS = 64, 128, 16, 8, 512, 256, 4
DTYPES = {'BF16': 2, 'I64': 8, 'BOOL': 1}
LAYER = ('self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight',
         'self_attn.o_proj.weight', 'mlp.gate_proj.weight', 'mlp.up_proj.weight', 'mlp.down_proj.weight',
         'input_layernorm.weight', 'hidden_norm.weight', 'post_attention_layernorm.weight')


def layer_shapes(qkv_in):
    head = HIDDEN // HEADS
    return {
        'self_attn.q_proj.weight': [HEADS * head, qkv_in], 'self_attn.k_proj.weight': [KV_HEADS * head, qkv_in],
        'self_attn.v_proj.weight': [KV_HEADS * head, qkv_in], 'self_attn.o_proj.weight': [HIDDEN, HEADS * head],
        'mlp.gate_proj.weight': [INTER, HIDDEN], 'mlp.up_proj.weight': [INTER, HIDDEN],
        'mlp.down_proj.weight': [HIDDEN, INTER], 'input_layernorm.weight': [HIDDEN],
        'hidden_norm.weight': [HIDDEN], 'post_attention_layernorm.weight': [HIDDEN],
    }


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape); the data is all zeros."""
    header, offset = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = DTYPES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [offset, offset + size]}
        offset += size
    if metadata:
        header['__metadata__'] = metadata
    raw = json.dumps(header, separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as handle:
        handle.write(struct.pack('<Q', len(raw)) + raw)
        handle.truncate(8 + len(raw) + offset)
    os.replace(tmp, path)


def config(architecture, layers, **extra):
    base = {'architectures': [architecture], 'model_type': 'llama', 'hidden_size': HIDDEN,
            'intermediate_size': INTER, 'num_attention_heads': HEADS, 'num_key_value_heads': KV_HEADS,
            'num_hidden_layers': layers, 'vocab_size': VOCAB, 'rms_norm_eps': 1e-05, 'hidden_act': 'silu',
            'max_position_embeddings': 2048, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16'}
    base.update(extra)
    return base


def write(dest, spelling='midlayer', quality='perfect'):
    target, drafter = os.path.join(dest, 'target'), os.path.join(dest, 'drafter')
    for folder in (target, drafter):
        os.makedirs(folder, exist_ok=True)
    tensors = {'model.embed_tokens.weight': ('BF16', [VOCAB, HIDDEN]), 'model.norm.weight': ('BF16', [HIDDEN]),
               'lm_head.weight': ('BF16', [VOCAB, HIDDEN])}
    for index in range(LAYERS):
        for name, shape in layer_shapes(HIDDEN).items():
            if name != 'hidden_norm.weight':
                tensors['model.layers.%d.%s' % (index, name)] = ('BF16', shape)
    write_safetensors(os.path.join(target, 'model.safetensors'), tensors)
    with open(os.path.join(target, 'config.json'), 'w') as handle:
        json.dump(config('LlamaForCausalLM', LAYERS), handle, indent=2)

    prefix = 'midlayer.' if spelling == 'midlayer' else 'layers.0.'
    tensors = {prefix + name: ('BF16', shape) for name, shape in layer_shapes(2 * HIDDEN).items()}
    tensors.update({'fc.weight': ('BF16', [HIDDEN, 3 * HIDDEN]), 'norm.weight': ('BF16', [HIDDEN]),
                    'lm_head.weight': ('BF16', [DRAFT_VOCAB, HIDDEN]), 'd2t': ('I64', [DRAFT_VOCAB]),
                    't2d': ('BOOL', [VOCAB])})
    write_safetensors(os.path.join(drafter, 'model.safetensors'), tensors, {'llmops_sim_quality': quality})
    with open(os.path.join(drafter, 'config.json'), 'w') as handle:
        json.dump(config('LlamaForCausalLMEagle3', 1, draft_vocab_size=DRAFT_VOCAB,
                         eagle_config={'eagle_aux_hidden_state_layer_ids': [0, 1, 2]}), handle, indent=2)
    return target, drafter


def alter_tensor(path, name):
    """Change the first byte of tensor ``name`` of the safetensors file ``path`` in place (its bitwise complement)."""
    with open(path, 'r+b') as handle:
        (length,) = struct.unpack('<Q', handle.read(8))
        header = json.loads(handle.read(length).decode('utf-8'))
        if name not in header or name == '__metadata__':
            raise SystemExit('%s has no tensor %s' % (path, name))
        offset = 8 + length + header[name]['data_offsets'][0]
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dest')
    parser.add_argument('--spelling', choices=['midlayer', 'layers'], default='midlayer')
    parser.add_argument('--quality', default='perfect')
    parser.add_argument('--alter-tensor', metavar='NAME', help='change one byte of tensor NAME of the safetensors file DEST')
    args = parser.parse_args()
    if args.alter_tensor:
        alter_tensor(args.dest, args.alter_tensor)
        print('%s: changed %s' % (args.dest, args.alter_tensor))
        return
    for path in write(args.dest, args.spelling, args.quality):
        print(path)


if __name__ == '__main__':
    main()
