# Copyright (c) llmops.serving maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of llmops.serving.drafter_checkpoint on a Kimi-K2.5-sized EAGLE-3 drafter.

Not part of ``make test``. Run from the repository root:

    .venv/bin/python tests/perf/drafter_checkpoint_perf.py [--dir DIR] [--keep]

It writes a ~1.9 GB drafter (hidden 7168, intermediate 18432, draft vocabulary 32000,
F16, ``layers.0.`` names) with a hand-written header and a sparse data region
(``truncate``), then measures, each in its own child process (wall time of the operation,
and peak RSS of the child from ``wait4``):

1. the in-place fix (``layers.0.`` -> ``midlayer.`` for SGLang 0.5.11): the module's
   ``Drafter(...).run()``;
2. the usual script: ``safetensors.numpy.load_file``, rename the keys, ``save_file`` to a
   new file and rename it over the original;
3. the rewrite path (a rename that makes the header longer, so the data is streamed into
   a new file with copy_file_range, fsynced and renamed).

The generated data region is sparse (the copies made for runs 2 and 3 with
``shutil.copytree`` may not be); reading zeros is cheap, which favours the baseline;
writes are real and fsynced. Targets: in-place >= 100x faster than the baseline with peak RSS under
64 MB; the rewrite at disk speed with bounded memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPORT_ROOT = os.path.join(ROOT, 'build', 'pytest')  # tests/conftest.py links the collection here
HIDDEN, INTER, HEADS, KV_HEADS, VOCAB, DRAFT_VOCAB = 7168, 18432, 64, 8, 163840, 32000
F16 = 2


def kimi_tensors():
    """(name, dtype, shape) of a Kimi-K2.5-sized one-layer EAGLE-3 drafter."""
    hd = HIDDEN // HEADS
    out = [('fc.weight', 'F16', [HIDDEN, 3 * HIDDEN]), ('norm.weight', 'F16', [HIDDEN]),
           ('lm_head.weight', 'F16', [DRAFT_VOCAB, HIDDEN]), ('d2t', 'I64', [DRAFT_VOCAB]),
           ('t2d', 'BOOL', [VOCAB])]
    layer = [('self_attn.q_proj.weight', [HEADS * hd, 2 * HIDDEN]),
             ('self_attn.k_proj.weight', [KV_HEADS * hd, 2 * HIDDEN]),
             ('self_attn.v_proj.weight', [KV_HEADS * hd, 2 * HIDDEN]),
             ('self_attn.o_proj.weight', [HIDDEN, HEADS * hd]),
             ('mlp.gate_proj.weight', [INTER, HIDDEN]), ('mlp.up_proj.weight', [INTER, HIDDEN]),
             ('mlp.down_proj.weight', [HIDDEN, INTER]), ('input_layernorm.weight', [HIDDEN]),
             ('hidden_norm.weight', [HIDDEN]), ('post_attention_layernorm.weight', [HIDDEN])]
    out += [('layers.0.' + rest, 'F16', shape) for rest, shape in layer]
    return out


def write_sparse_drafter(directory):
    """Hand-written header (8-byte aligned, like the safetensors library) + truncate."""
    sizes = {'F16': 2, 'I64': 8, 'BOOL': 1}
    header, offset = {'__metadata__': {'format': 'pt'}}, 0
    for name, dtype, shape in kimi_tensors():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(',', ':')).encode()
    blob += b' ' * (-len(blob) % 8)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, 'model.safetensors')
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)
        os.fsync(f.fileno())
    config = {'architectures': ['LlamaForCausalLMEagle3'], 'model_type': 'llama', 'hidden_size': HIDDEN,
              'intermediate_size': INTER, 'num_attention_heads': HEADS, 'num_key_value_heads': KV_HEADS,
              'num_hidden_layers': 1, 'vocab_size': VOCAB, 'draft_vocab_size': DRAFT_VOCAB,
              'rms_norm_eps': 1e-5, 'hidden_act': 'silu', 'tie_word_embeddings': False}
    with open(os.path.join(directory, 'config.json'), 'w') as f:
        json.dump(config, f, indent=2)
    return path, offset


CHILDREN = {
    'fix': """
import json, sys, time
from ansible_collections.llmops.serving.plugins.modules.drafter_checkpoint import Drafter
params = json.loads(sys.argv[2])
start = time.monotonic()
result = Drafter(params).run()
print(json.dumps({'seconds': time.monotonic() - start, 'files': result['files'], 'problems': result['problems']}))
""",
    'baseline': """
import json, os, sys, time
from safetensors.numpy import load_file, save_file
path = sys.argv[2]
start = time.monotonic()
tensors = load_file(path)
renamed = {k.replace('layers.0.', 'midlayer.'): v for k, v in tensors.items()}
tmp = path + '.tmp'
save_file(renamed, tmp, metadata={'format': 'pt'})
with open(tmp, 'rb') as f:
    os.fsync(f.fileno())
os.rename(tmp, path)
print(json.dumps({'seconds': time.monotonic() - start}))
""",
}


def measure(kind, arg):
    """Run one child; return (its JSON report, peak RSS in MiB from wait4)."""
    env = dict(os.environ, PYTHONPATH=IMPORT_ROOT)
    proc = subprocess.Popen([sys.executable, '-c', CHILDREN[kind], kind, arg], env=env,
                            stdout=subprocess.PIPE)
    out = proc.stdout.read()
    proc.stdout.close()
    status, rusage = os.wait4(proc.pid, 0)[1:]
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit('%s child failed (rc %d)' % (kind, proc.returncode))
    return json.loads(out), rusage.ru_maxrss / 1024.0


def params(path, **extra):
    base = dict(path=path, engine='sglang', engine_version='0.5.11', layout='auto', rename=[],
                fix_architecture=True, fix=True, backup=False, modify_shared_blobs=False)
    base.update(extra)
    return json.dumps(base)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--dir', help='where to write the drafters (default: a new temporary directory)')
    parser.add_argument('--keep', action='store_true', help='keep the generated files')
    args = parser.parse_args()
    if not os.path.islink(os.path.join(IMPORT_ROOT, 'ansible_collections', 'llmops', 'serving')):
        os.makedirs(os.path.join(IMPORT_ROOT, 'ansible_collections', 'llmops'), exist_ok=True)
        os.symlink(ROOT, os.path.join(IMPORT_ROOT, 'ansible_collections', 'llmops', 'serving'))
    work = args.dir or tempfile.mkdtemp(prefix='drafter-perf-', dir=os.path.join(ROOT, 'build'))
    try:
        started = time.monotonic()
        path, data = write_sparse_drafter(os.path.join(work, 'fix'))
        print('generated %s: %.2f GB of tensor data (sparse) in %.2f s'
              % (path, data / 1e9, time.monotonic() - started))
        shutil.copytree(os.path.join(work, 'fix'), os.path.join(work, 'baseline'))
        shutil.copytree(os.path.join(work, 'fix'), os.path.join(work, 'rewrite'))

        fix, fix_rss = measure('fix', params(os.path.join(work, 'fix')))
        assert fix['files'][0]['method'] == 'header_in_place' and not fix['problems'], fix
        base, base_rss = measure('baseline', os.path.join(work, 'baseline', 'model.safetensors'))
        print('in-place header fix      : %8.4f s  peak RSS %6.1f MiB  (%d bytes written)'
              % (fix['seconds'], fix_rss, fix['files'][0]['bytes_written']))
        print('load + rename + save     : %8.4f s  peak RSS %6.1f MiB' % (base['seconds'], base_rss))
        print('speed-up                 : %8.0fx  (target >= 100x); fix RSS %s 64 MiB'
              % (base['seconds'] / fix['seconds'], '<' if fix_rss < 64 else 'NOT <'))
        shutil.rmtree(os.path.join(work, 'baseline'))

        grow = [{'from': 'layers.0.', 'to': 'model.layers.0.'}]
        rewrite, rewrite_rss = measure('fix', params(os.path.join(work, 'rewrite'), engine_version='0.5.12',
                                                     rename=grow))
        entry = rewrite['files'][0]
        assert entry['method'] == 'rewritten', rewrite
        print('rewrite (header grows)   : %8.4f s  peak RSS %6.1f MiB  %.0f MB/s (%.2f GB, fsync included)'
              % (rewrite['seconds'], rewrite_rss, entry['bytes_written'] / 1e6 / rewrite['seconds'],
                 entry['bytes_written'] / 1e9))
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
