"""Models of the H200 proof: tests/engines/make_models.py --shape h200, then a marker.

``python3 tests/gpu/h200/make_models.py OUT`` writes what make_models.py writes (the tiny
target and every drafter variant, shape of the recorded H200 run, and with ``--varied-target``
the target without the carrier that phase p compares token for token) and then stamps each
`good-*`/`random-*` drafter's safetensors header with ``__metadata__.llmops_sim_quality``
(``perfect`` for the good weights, ``random`` for the random ones). Real SGLang ignores header metadata; the
SGLang simulator (tests/sim) reads its acceptance from it, so the --simulate dry run of
tests/gpu/h200_proof.sh serves the same files with the same expected outcome.
Skips the work when OUT/manifest.json was written by this wrapper from the same generator.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / 'tests' / 'engines' / 'make_models.py'
QUALITY = {'good': 'perfect', 'random': 'random'}
STAMP = 'llmops_h200_stamp'  # hash of the generator and this wrapper


def set_metadata(path: Path, extra: dict) -> None:
    """Rewrite a safetensors header with extra ``__metadata__`` entries (data untouched)."""
    with path.open('rb') as handle:
        size = struct.unpack('<Q', handle.read(8))[0]
        header = json.loads(handle.read(size))
        data = handle.read()
    header['__metadata__'] = dict(header.get('__metadata__') or {}, **extra)
    raw = json.dumps(header, separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)
    tmp = path.with_suffix('.tmp')
    with tmp.open('wb') as handle:
        handle.write(struct.pack('<Q', len(raw)) + raw + data)
    tmp.replace(path)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print('usage: make_models.py OUT', file=sys.stderr)
        return 2
    out = Path(argv[0])
    manifest_path = out / 'manifest.json'
    stamp = hashlib.sha256(GENERATOR.read_bytes() + Path(__file__).read_bytes()).hexdigest()
    if manifest_path.exists() and json.loads(manifest_path.read_text()).get(STAMP) == stamp:
        print('models already in %s' % out)
        return 0
    # target-varied/ too (phase p's content check: greedy ids that differ from token to token).
    sys.argv = [str(GENERATOR), str(out), '--shape', 'h200', '--varied-target']
    try:
        runpy.run_path(str(GENERATOR), run_name='__main__')
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if status != 0:
            return status
    manifest = json.loads(manifest_path.read_text())
    for name, drafter in manifest['drafters'].items():
        quality = QUALITY.get(drafter['weights'])
        if quality and not name.startswith('bad-'):
            set_metadata(out / drafter['path'] / 'model.safetensors', {'llmops_sim_quality': quality})
            drafter['sim_quality'] = quality
    manifest[STAMP] = stamp
    manifest_path.write_text(json.dumps(manifest, indent=2) + '\n')
    print('stamped %d drafters in %s' % (sum('sim_quality' in d for d in manifest['drafters'].values()), out))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
