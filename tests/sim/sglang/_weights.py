# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The weights checksum of the simulated SGLang (TEST DOUBLE): the answer of ``/weights_checker`` (action
``checksum``), computed once at load from the bytes of the target's weight files, so that a copy of the
checkpoint with one tensor changed gives another checksum.

The shape is SGLang 0.5.15.post1's (``CheckWeightsReqInput``; FACTS.md): ``{"success", "message", "ranks":
[{"checksums": {tensor: "%016x"}, "per_gpu_checksum", "parallelism_info": {tp_rank, tp_size, dp_rank, dp_size,
pp_rank, pp_size, rank, size}}], "per_engine_checksum"}``, per_gpu_checksum a SHA-256 over the rank's sorted
(name, tensor hash), per_engine_checksum a SHA-256 over the ranks' per_gpu_checksum in order. Where it cannot be
the real thing: the tensors are the checkpoint's own (SGLang hashes its model's parameters, after fusing q/k/v
and gate/up, dequantized, with its own 64-bit tensor hash; the sim takes the first 16 hex digits of a SHA-256),
and a tensor of two or more dimensions whose first dimension TP divides is sharded by rows, any other tensor held
whole by every rank. So the sim's checksums are stable and differ where the bytes differ, but are not the values a
GPU server reports for the same files. The drafter is not covered, as in SGLang.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

CHUNK = 8 << 20


def _tensor_hash(handle, start, end):
    digest = hashlib.sha256()
    handle.seek(start)
    left = end - start
    while left > 0:
        data = handle.read(min(CHUNK, left))
        if not data:
            break
        digest.update(data)
        left -= len(data)
    return digest.hexdigest()[:16]


def _shards(path, tp_size):
    """{tensor name: [hash of rank 0's part, ...]} of one weight file: a safetensors file tensor by tensor, any other
    file (.bin) as one tensor named by the file, held whole by every rank."""
    out = {}
    with open(path, 'rb') as handle:
        try:
            (length,) = struct.unpack('<Q', handle.read(8))
            header = json.loads(handle.read(length).decode('utf-8'))
        except (struct.error, ValueError, UnicodeDecodeError):
            header = None
        if not isinstance(header, dict):
            size = os.path.getsize(path)
            out[os.path.basename(path)] = [_tensor_hash(handle, 0, size)] * tp_size
            return out
        base = 8 + length
        for name, info in sorted(header.items()):
            if name == '__metadata__' or not isinstance(info, dict):
                continue
            start, end = info['data_offsets']
            shape = info.get('shape') or []
            if len(shape) >= 2 and shape[0] % tp_size == 0 and tp_size > 1:
                step = (end - start) // tp_size
                out[name] = [_tensor_hash(handle, base + start + rank * step, base + start + (rank + 1) * step)
                             for rank in range(tp_size)]
            else:
                out[name] = [_tensor_hash(handle, base + start, base + end)] * tp_size
    return out


def checksum_answer(weight_files, tp_size, pp_size=1, dp_size=1):
    """The answer of ``/weights_checker`` ``{"action": "checksum"}`` for the weights in ``weight_files``."""
    tensors = {}
    for path in weight_files:
        tensors.update(_shards(path, tp_size))
    size = tp_size * pp_size * dp_size
    ranks = []
    for rank in range(size):
        tp_rank = rank % tp_size
        checksums = dict((name, hashes[tp_rank]) for name, hashes in sorted(tensors.items()))
        digest = hashlib.sha256()
        for name, value in sorted(checksums.items()):
            digest.update(name.encode('utf-8'))
            digest.update(value.encode('ascii'))
        ranks.append({'checksums': checksums, 'per_gpu_checksum': digest.hexdigest(), 'parallelism_info': {
            'tp_rank': tp_rank, 'tp_size': tp_size, 'dp_rank': rank // (tp_size * pp_size), 'dp_size': dp_size,
            'pp_rank': (rank // tp_size) % pp_size, 'pp_size': pp_size, 'rank': rank, 'size': size}})
    engine = hashlib.sha256()
    for rank in ranks:
        engine.update(rank['per_gpu_checksum'].encode('ascii'))
    return {'success': True, 'message': '', 'ranks': ranks, 'per_engine_checksum': engine.hexdigest()}


ACTIONS = ('checksum', 'snapshot', 'reset_tensors', 'compare')


def answer(body, computed):
    """(status, answer) of ``/weights_checker`` for request ``body`` on a server whose checksum answer is
    ``computed`` (None before its weights are loaded)."""
    action = (body or {}).get('action', 'checksum')
    if action not in ACTIONS:
        return 400, {'success': False, 'message': 'Unsupported action: %s' % action}
    if action != 'checksum':
        return 400, {'success': False, 'message': 'the simulator imitates the checksum action only, not %s' % action}
    if computed is None:
        return 400, {'success': False, 'message': 'the model weights are not loaded yet'}
    return 200, computed
