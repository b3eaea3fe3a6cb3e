"""The 16 GB model of phase h: a Llama-3-8B-shaped target (random bf16 weights) and its EAGLE-3 drafter.

``python3 tests/gpu/h200/make_big_model.py TINY OUT`` writes OUT/target (config, tokenizer and 4
safetensors shards, about 16.1 GB: 37 layers of Llama-3-8B's shape, the vocabulary of the tiny
tokenizer in TINY/target) and OUT/drafter (the `good` construction of tests/engines/make_models.py
at this shape). The weights are drawn on the GPU, so writing them takes about as long as the disk.

Agreement as in make_models.py: the target's final norm is zero, so it always generates token 0, and
the drafter always proposes token 0. At this width the random parts of the drafter (fc, the
attention output, the MLP's other input columns) would drown the carrier, so they are zero here.

The --simulate dry run of tests/gpu/h200_proof.sh does not run this: it copies the tiny target and drafter.
Skips the work when OUT/manifest.json was written from the same generator and arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / 'tests' / 'engines' / 'make_models.py'
# Llama-3-8B's layer shape; 37 layers with the tiny 512-token vocabulary make 16.1 GB (32 layers: 14 GB).
BIG = {'layers': 37, 'hidden': 4096, 'heads': 32, 'kv_heads': 8, 'head_dim': 128, 'intermediate': 14336,
       'aux': [0, 18, 34]}
SHARDS = 4


def load_generator():
    spec = importlib.util.spec_from_file_location('make_models', GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def target_tensors(gen, shape, device):
    """(name, tensor) per weight of the target, drawn one at a time on ``device``."""
    import torch

    h, inter, hd = shape['hidden'], shape['intermediate'], shape['head_dim']
    q, kv = shape['heads'] * hd, shape['kv_heads'] * hd

    def rand(*dims):
        return (torch.randn(*dims, device=device, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()

    embed = rand(gen.VOCAB, h)
    embed[:, gen.CARRIER] = 1.0
    yield 'model.embed_tokens.weight', embed
    for i in range(shape['layers']):
        prefix = 'model.layers.%d.' % i
        for name, dims in (('self_attn.q_proj', (q, h)), ('self_attn.k_proj', (kv, h)), ('self_attn.v_proj', (kv, h)),
                           ('self_attn.o_proj', (h, q)), ('mlp.gate_proj', (inter, h)), ('mlp.up_proj', (inter, h)),
                           ('mlp.down_proj', (h, inter))):
            yield prefix + name + '.weight', rand(*dims)
        yield prefix + 'input_layernorm.weight', torch.ones(h, dtype=torch.bfloat16)
        yield prefix + 'post_attention_layernorm.weight', torch.ones(h, dtype=torch.bfloat16)
    yield 'model.norm.weight', torch.zeros(h, dtype=torch.bfloat16)
    yield 'lm_head.weight', rand(gen.VOCAB, h)


def write_target(gen, out, shape, tok, device):
    from safetensors.torch import save_file

    per_layer = 4 * shape['hidden'] ** 2 + 3 * shape['hidden'] * shape['intermediate']
    budget = per_layer * shape['layers'] * 2 // SHARDS  # bytes per shard, about
    shard, size, index, files = {}, 0, {}, []

    def flush():
        name = 'model-%05d-of-%05d.safetensors' % (len(files) + 1, SHARDS)
        save_file(shard, str(out / name), metadata={'format': 'pt'})
        index.update(dict.fromkeys(shard, name))
        files.append(name)

    for name, tensor in target_tensors(gen, shape, device):
        shard[name] = tensor
        size += tensor.numel() * 2
        if size >= budget and len(files) < SHARDS - 1:
            flush()
            shard, size = {}, 0
    flush()
    total = sum((out / name).stat().st_size for name in files)
    (out / 'model.safetensors.index.json').write_text(json.dumps({'metadata': {'total_size': total}, 'weight_map': index}))
    config = {
        'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'vocab_size': gen.VOCAB,
        'hidden_size': shape['hidden'], 'intermediate_size': shape['intermediate'],
        'num_hidden_layers': shape['layers'], 'num_attention_heads': shape['heads'],
        'num_key_value_heads': shape['kv_heads'], 'head_dim': shape['head_dim'], 'hidden_act': 'silu',
        'max_position_embeddings': 8192, 'rms_norm_eps': 1e-5, 'rope_theta': 500000.0, 'tie_word_embeddings': False,
        'bos_token_id': tok['bos_token_id'], 'eos_token_id': tok['eos_token_id'], 'torch_dtype': 'bfloat16'}
    (out / 'config.json').write_text(json.dumps(config, indent=2) + '\n')
    return total


def write_drafter(gen, out, shape, tok):
    import torch
    from safetensors.torch import save_file

    tensors = gen.drafter_tensors('good', shape, gen.SEED + 1)
    carrier = gen.CARRIER
    fc = torch.zeros_like(tensors['fc.weight'])
    fc[carrier, carrier] = 8.0
    tensors['fc.weight'] = fc
    tensors['layers.0.self_attn.o_proj.weight'] = torch.zeros_like(tensors['layers.0.self_attn.o_proj.weight'])
    gate = torch.zeros_like(tensors['layers.0.mlp.gate_proj.weight'])
    gate[:, carrier] = 1.0
    tensors['layers.0.mlp.gate_proj.weight'] = gate
    tensors['layers.0.mlp.up_proj.weight'] = gate.clone()
    out.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / 'model.safetensors'), metadata={'format': 'pt'})
    config = gen.drafter_config(shape, tok, gen.EAGLE3_ARCH)
    config['max_position_embeddings'] = 8192
    (out / 'config.json').write_text(json.dumps(config, indent=2) + '\n')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('tiny', type=Path, help='the models of make_models.py (its target has the tokenizer)')
    parser.add_argument('out', type=Path)
    args = parser.parse_args(argv)
    import torch

    shape = BIG
    stamp = hashlib.sha256(GENERATOR.read_bytes() + Path(__file__).read_bytes() + repr(shape).encode()).hexdigest()
    manifest_path = args.out / 'manifest.json'
    if manifest_path.exists() and json.loads(manifest_path.read_text()).get('stamp') == stamp:
        print('model already in %s' % args.out)
        return 0
    start = time.monotonic()
    gen = load_generator()
    tiny = json.loads((args.tiny / 'manifest.json').read_text())['target']
    tok = {k: tiny[k] for k in ('vocab_size', 'bos_token_id', 'eos_token_id')}
    if args.out.exists():
        shutil.rmtree(args.out)
    target = args.out / 'target'
    target.mkdir(parents=True)
    for path in (args.tiny / 'target').iterdir():
        if 'token' in path.name or path.name == 'special_tokens_map.json':
            shutil.copyfile(path, target / path.name)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.manual_seed(gen.SEED)
    total = write_target(gen, target, shape, tok, device)
    write_drafter(gen, args.out / 'drafter', shape, tok)
    manifest = {'stamp': stamp, 'shape': shape, 'target_bytes': total, 'shards': SHARDS, 'device': device,
                'seconds': round(time.monotonic() - start, 1)}
    manifest_path.write_text(json.dumps(manifest, indent=2) + '\n')
    print('wrote %s: target %.2f GB in %d shards (%s), %.1f s' % (args.out, total / 1e9, SHARDS, device,
                                                                  manifest['seconds']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
