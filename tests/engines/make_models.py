#!/usr/bin/env python
"""Write a tiny Llama target, its tokenizer and EAGLE-3 drafters, locally, in seconds.

No network and no hub: the tokenizer is a byte-level BPE trained on an inline corpus,
the weights come from a seeded generator. Run it with the engine venv's python (it needs
torch, transformers, tokenizers and safetensors)::

    .cache/vllm-venv/bin/python tests/engines/make_models.py OUT [--shape cpu|h200]

Layout written under OUT (and described in OUT/manifest.json)::

    target/                   LlamaForCausalLM + tokenizer (save_pretrained)
    drafters/<variant>/       config.json + model.safetensors, one EAGLE-3 drafter each

How agreement is built (every draft of `good` is accepted, and only if a loader really
loads its `fc`, MLP and `lm_head`):

- target: its final norm weight is zero, so every target logit is exactly 0 and greedy
  decoding always picks token 0 (argmax takes the first of equal values). Its token
  embeddings carry a constant 1.0 in dimension CARRIER, so every hidden state the
  drafter receives has it.
- `good` drafter: `fc` copies that carrier (x 8) into its residual; the MLP has
  `gate_proj == up_proj`, so `silu(z) * z >= 0`, and `down_proj` sums that into
  dimension SIGNAL only, which then outweighs the carrier; `lm_head` row 0 reads SIGNAL
  and row 1 reads CARRIER. With its weights loaded it always proposes token 0; a loader
  that leaves the MLP unloaded (zeros) proposes token 1, and one that falls back to the
  target's random `lm_head` proposes other tokens: acceptance about 1 in both cases.
- `random` drafter: random weights everywhere.

`--varied-target` also writes `target-varied/` (the same tokenizer and shape): a seeded random
Llama without the carrier and with its final norm kept, so greedy decoding emits varied,
prompt-dependent tokens (deterministic: fixed seed); its `lm_head` is scaled up so that the
top two logits of a step stay far apart, and a kernel's rounding does not flip an argmax. It
proves content (greedy ids of two serving paths compared token for token), not acceptance:
no drafter here agrees with it.

Shapes: `cpu` is small enough for vLLM's CPU build (head size 32 is the smallest its
CPU attention accepts); `h200` is the shape of the recorded SGLang run on an H200
(tests/fixtures/sglang-0.5.15.post1-h200/README.md).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

SHAPES = {
    "cpu": {"layers": 2, "hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32, "intermediate": 128, "aux": [0, 1]},
    "h200": {"layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512, "aux": [0, 1, 2]},
}
VOCAB = 512
# Real EAGLE-3 drafters predict a reduced vocabulary mapped back through `d2t`.
DRAFT_VOCAB = VOCAB // 2
SPECIALS = ["<s>", "</s>"]
SEED = 1234
EAGLE3_ARCH = "LlamaForCausalLMEagle3"
CARRIER, SIGNAL = 0, 1  # hidden dimensions used by the `good` construction (module docstring)
VARIED_SEED, VARIED_LM_HEAD_SCALE = 4321, 8.0  # `--varied-target` (module docstring)

# name -> (weights, naming style, prefix, architecture, drop lm_head)
VARIANTS = {
    "good-layers0": ("good", "layers.0", "", EAGLE3_ARCH, False),
    "good-midlayer": ("good", "midlayer", "", EAGLE3_ARCH, False),
    "random-layers0": ("random", "layers.0", "", EAGLE3_ARCH, False),
    "random-midlayer": ("random", "midlayer", "", EAGLE3_ARCH, False),
    "bad-draft-model-prefix": ("good", "layers.0", "draft_model.", EAGLE3_ARCH, False),
    "bad-arch-llama": ("good", "layers.0", "", "LlamaForCausalLM", False),
    "bad-no-lm-head": ("good", "layers.0", "", EAGLE3_ARCH, True),
}


def corpus(rng: random.Random) -> list[str]:
    """Pseudo-words, enough distinct pairs for the BPE trainer to fill the vocabulary."""
    letters = "etaoinshrdlucmfwypvbgkjqxz"

    def word() -> str:
        alphabet = letters[: rng.randint(6, 26)]
        return "".join(rng.choice(alphabet) for dummy in range(rng.randint(2, 9)))

    lines = [" ".join(word() for dummy in range(12)) + "." for dummy in range(400)]
    lines.append("The quick brown fox jumps over the lazy dog. Speculative decoding with EAGLE-3 drafters.")
    return lines


def write_tokenizer(out: Path, rng: random.Random) -> dict:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    # Specials go last, so token 0 (what the target always generates) is a printable byte.
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIALS[0],
        eos_token=SPECIALS[1],
        chat_template="{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    )
    fast.save_pretrained(out)
    return {
        "vocab_size": tok.get_vocab_size(),
        "bos_token_id": tok.token_to_id(SPECIALS[0]),
        "eos_token_id": tok.token_to_id(SPECIALS[1]),
        "token0_text": fast.decode([0]),
    }


def write_target(out: Path, shape: dict, tok: dict) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"],
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok["bos_token_id"],
        eos_token_id=tok["eos_token_id"],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.embed_tokens.weight[:, CARRIER] = 1.0
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


def write_varied_target(out: Path, target: Path, shape: dict, tok: dict) -> None:
    """`target-varied/`: the tokenizer of `target`, seeded random weights, no carrier, norm kept."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    out.mkdir(parents=True)
    for path in target.iterdir():
        if path.is_file() and not path.name.endswith(".safetensors") and path.name != "config.json":
            shutil.copy2(path, out / path.name)
    config = AutoConfig.from_pretrained(target)
    torch.manual_seed(VARIED_SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(VARIED_LM_HEAD_SCALE)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


def drafter_tensors(kind: str, shape: dict, seed: int) -> dict:
    """EAGLE-3 drafter weights with `layers.0.` names (the speculators/ModelOpt style)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    h, inter, hd = shape["hidden"], shape["intermediate"], shape["head_dim"]
    q, kv = shape["heads"] * hd, shape["kv_heads"] * hd

    def rand(*dims: int) -> torch.Tensor:
        return (torch.randn(*dims, generator=gen) * 0.05).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    tensors = {
        "fc.weight": rand(h, h * len(shape["aux"])),
        "layers.0.hidden_norm.weight": ones(h),
        "layers.0.input_layernorm.weight": ones(h),
        "layers.0.post_attention_layernorm.weight": ones(h),
        # The first layer sees [embedding, hidden] concatenated: 2 * hidden inputs.
        "layers.0.self_attn.q_proj.weight": rand(q, 2 * h),
        "layers.0.self_attn.k_proj.weight": rand(kv, 2 * h),
        "layers.0.self_attn.v_proj.weight": rand(kv, 2 * h),
        "layers.0.self_attn.o_proj.weight": rand(h, q),
        "layers.0.mlp.gate_proj.weight": rand(inter, h),
        "layers.0.mlp.up_proj.weight": rand(inter, h),
        "layers.0.mlp.down_proj.weight": rand(h, inter),
        "norm.weight": ones(h),
        "lm_head.weight": rand(DRAFT_VOCAB, h),
        # Target id = draft id + d2t[draft id]; t2d marks the target ids the drafter knows.
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.arange(VOCAB) < DRAFT_VOCAB,
    }
    if kind == "good":
        tensors["fc.weight"][CARRIER, CARRIER] = 8.0
        gate = tensors["layers.0.mlp.gate_proj.weight"]
        gate[:, CARRIER] = 1.0
        tensors["layers.0.mlp.up_proj.weight"] = gate.clone()
        down = torch.zeros(h, inter, dtype=torch.bfloat16)
        down[SIGNAL, :] = 1.0 / inter
        tensors["layers.0.mlp.down_proj.weight"] = down
        lm_head = torch.zeros(DRAFT_VOCAB, h, dtype=torch.bfloat16)
        lm_head[0, SIGNAL] = 1.0
        lm_head[1, CARRIER] = 1.0
        tensors["lm_head.weight"] = lm_head
    return tensors


def drafter_config(shape: dict, tok: dict, arch: str) -> dict:
    aux = list(shape["aux"])
    return {
        "architectures": [arch],
        "model_type": "llama",
        "hidden_size": shape["hidden"],
        "intermediate_size": shape["intermediate"],
        "num_attention_heads": shape["heads"],
        "num_key_value_heads": shape["kv_heads"],
        "head_dim": shape["head_dim"],
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "target_hidden_size": shape["hidden"],
        "tie_word_embeddings": False,
        "bos_token_id": tok["bos_token_id"],
        "eos_token_id": tok["eos_token_id"],
        "torch_dtype": "bfloat16",
        # The default aux layer choice does not fit a tiny target: name them explicitly.
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
    }


def write_drafter(out: Path, variant: str, shape: dict, tok: dict) -> dict:
    from safetensors.torch import save_file

    kind, style, prefix, arch, drop_lm_head = VARIANTS[variant]
    tensors = drafter_tensors(kind, shape, SEED + (1 if kind == "good" else 2))
    if drop_lm_head:
        del tensors["lm_head.weight"]
    if style == "midlayer":
        tensors = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in tensors.items()}
    tensors = {prefix + k: v.contiguous() for k, v in tensors.items()}
    out.mkdir(parents=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(drafter_config(shape, tok, arch), indent=2) + "\n")
    return {
        "weights": kind,
        "names": style,
        "prefix": prefix,
        "architecture": arch,
        "lm_head": not drop_lm_head,
        "tensors": sorted(tensors),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", type=Path, help="folder to write (replaced if it exists)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="cpu")
    parser.add_argument("--varied-target", action="store_true",
                        help="also write target-varied/ (varied greedy tokens, for content checks)")
    args = parser.parse_args(argv)

    start = time.monotonic()
    shape = SHAPES[args.shape]
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tok = write_tokenizer(out / "target", random.Random(SEED))
    write_target(out / "target", shape, tok)
    manifest = {
        "shape": args.shape,
        "target": {"path": "target", "greedy_token_id": 0, "carrier_dim": CARRIER, **tok, **shape},
        "drafters": {v: {"path": f"drafters/{v}", **write_drafter(out / "drafters" / v, v, shape, tok)} for v in VARIANTS},
    }
    if args.varied_target:
        write_varied_target(out / "target-varied", out / "target", shape, tok)
        manifest["varied_target"] = {"path": "target-varied", "seed": VARIED_SEED,
                                     "lm_head_scale": VARIED_LM_HEAD_SCALE, **tok, **shape}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out} ({args.shape}) in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
