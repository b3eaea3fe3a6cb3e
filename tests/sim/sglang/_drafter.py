# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the simulated SGLang judges an EAGLE-3 drafter (TEST DOUBLE).

Like the real server it never complains about names it does not load: it serves with
an acceptance length of about 1.0 instead. Only the safetensors header is read.
"""

from __future__ import annotations

import json
import os
import struct

from sglang._flags import version_tuple

DEFAULT_QUALITY = 0.95
QUALITY_KEY = 'llmops_sim_quality'
LAYER_WEIGHTS = ('self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight',
                 'self_attn.o_proj.weight', 'mlp.gate_proj.weight', 'mlp.up_proj.weight', 'mlp.down_proj.weight')


def read_header(path):
    """The JSON header of one safetensors file."""
    with open(path, 'rb') as f:
        (length,) = struct.unpack('<Q', f.read(8))
        return json.loads(f.read(length).decode('utf-8'))


def read_tensors(path):
    """({tensor name: info}, metadata) of a drafter directory or file (index.json supported)."""
    if os.path.isdir(path):
        index = os.path.join(path, 'model.safetensors.index.json')
        if os.path.exists(index):
            with open(index, encoding='utf-8') as f:
                files = sorted(set(json.load(f)['weight_map'].values()))
        else:
            files = sorted(n for n in os.listdir(path) if n.endswith('.safetensors'))
        files = [os.path.join(path, n) for n in files]
    else:
        files = [path]
    tensors, metadata = {}, {}
    for name in files:
        header = read_header(name)
        metadata.update(header.pop('__metadata__', None) or {})
        tensors.update(header)
    return tensors, metadata


def read_config(path):
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def parse_quality(value):
    """A drafter quality: ``random`` (0), ``perfect`` (1) or a number in [0, 1]."""
    value = str(value).strip()
    quality = {'random': 0.0, 'perfect': 1.0}.get(value)
    if quality is None:
        quality = float(value)
        if not 0.0 <= quality <= 1.0:
            raise ValueError('quality %r is not in [0, 1]' % value)
    return quality


def _strip(name):
    return name[len('model.'):] if name.startswith('model.') else name


def judge(path, version):
    """Return a dict: architecture, loaded (bool), quality (0..1), reason, crash (exception text or None)."""
    config = read_config(path) or {}
    arch = (config.get('architectures') or [None])[0]
    tensors, metadata = read_tensors(path)
    names = [_strip(n) for n in tensors]
    result = {'architecture': arch, 'loaded': True, 'quality': DEFAULT_QUALITY, 'reason': 'ok', 'crash': None}
    if arch == 'LlamaForCausalLM':
        # The plain model class tries its own parameter names (AngelSlim#39).
        first = next((n for n in names if n.endswith('self_attn.q_proj.weight')), 'midlayer.self_attn.q_proj.weight')
        result['crash'] = 'KeyError: %r' % first.replace('q_proj', 'qkv_proj')
        return result
    if arch != 'LlamaForCausalLMEagle3':
        result['crash'] = ('ValueError: Model architectures [%r] are not supported for now. '
                           'Supported architectures: LlamaForCausalLMEagle3' % arch)
        return result
    prefixes = ('midlayer.',) if version_tuple(version) <= (0, 5, 11) else ('midlayer.', 'layers.0.')
    if not any(p + w in names for p in prefixes for w in LAYER_WEIGHTS):
        result.update(loaded=False, quality=0.0, reason='no decoder-layer weights under %s' % ' or '.join(prefixes))
    elif 'lm_head.weight' not in names:
        result.update(loaded=False, quality=0.0, reason='lm_head.weight missing')
    quality = metadata.get(QUALITY_KEY)
    if result['loaded'] and quality is not None:
        reason = {'random': 'random weights (%s)' % QUALITY_KEY, 'perfect': 'perfect (%s)' % QUALITY_KEY}.get(
            quality, '%s=%s' % (QUALITY_KEY, quality))
        result.update(quality=parse_quality(quality), reason=reason)
    return result
