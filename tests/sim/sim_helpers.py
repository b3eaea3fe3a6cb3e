# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the tests of the test doubles (SGLang simulator, nvidia-smi stand-in).

A module with its own name (not ``conftest``), so the tests can import it whatever other
conftest files pytest has loaded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import time
import urllib.error
import urllib.request

SIM_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(SIM_DIR))
FIXTURES = os.path.join(ROOT, 'tests', 'fixtures')
SGLANG_FIXTURES = os.path.join(FIXTURES, 'sglang-0.5.15.post1-h200')
SMI_FIXTURES = os.path.join(FIXTURES, 'nvidia-smi', 'h200-1gpu')
NVSIM = os.path.join(SIM_DIR, 'nvsim.py')
NVIDIA_SMI = os.path.join(SIM_DIR, 'nvidia-smi')
# Fast: about 0.25 s of start-up. OBSERVABLE_ENV makes each phase long enough to poll (0.1-0.3 s), and the
# warm-up (503 from /health) 2 s: a poll loop on a busy machine must not miss it.
FAST_ENV = {'SGLANG_SIM_SPEED': '0.02', 'SGLANG_SIM_PHASES': 'imports=1,load=3,graphs=3,warmup=5'}
OBSERVABLE_ENV = {'SGLANG_SIM_PHASES': 'imports=2,load=5,graphs=5,warmup=100'}
LAYER = ('self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight', 'self_attn.o_proj.weight',
         'mlp.gate_proj.weight', 'mlp.up_proj.weight', 'mlp.down_proj.weight', 'input_layernorm.weight',
         'hidden_norm.weight', 'post_attention_layernorm.weight')


def wait_for(predicate, timeout=10.0, interval=0.02, what='condition'):
    """Poll ``predicate`` until it returns a true value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %.1f s waiting for %s' % (timeout, what))
        time.sleep(interval)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=10.0):
    """(status, body bytes) or (0, b'') when the connection is refused."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header('Content-Type', 'application/json')
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (ConnectionError, urllib.error.URLError) as exc:
        if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, ConnectionError):
            raise
        return 0, b''


def write_safetensors(path, names, metadata=None, shape=(8, 8)):
    """A safetensors file of zero-filled bf16 tensors, written by hand (8-byte length + JSON header)."""
    header, offset = {}, 0
    size = 2 * shape[0] * shape[1]
    for name in names:
        header[name] = {'dtype': 'BF16', 'shape': list(shape), 'data_offsets': [offset, offset + size]}
        offset += size
    if metadata:
        header['__metadata__'] = metadata
    raw = json.dumps(header).encode()
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(raw)) + raw + b'\0' * offset)


def make_drafter(folder, style='midlayer', lm_head=True, arch='LlamaForCausalLMEagle3', quality=None):
    os.makedirs(folder, exist_ok=True)
    names = ['fc.weight', 'norm.weight', 'd2t', 't2d'] + ['%s.%s' % ('midlayer' if style == 'midlayer' else 'layers.0', w)
                                                          for w in LAYER]
    if lm_head:
        names.append('lm_head.weight')
    write_safetensors(os.path.join(folder, 'model.safetensors'), names,
                      {'llmops_sim_quality': quality} if quality else None)
    with open(os.path.join(folder, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump({'architectures': [arch], 'hidden_size': 256, 'num_hidden_layers': 1}, f)
    return folder


class Sim:
    """One running simulator: its process, URL and log file."""

    def __init__(self, proc, port, log_path):
        self.proc = proc
        self.port = port
        self.url = 'http://127.0.0.1:%d' % port
        self.log_path = log_path

    def log(self):
        with open(self.log_path, encoding='utf-8', errors='replace', newline='') as f:
            return f.read()

    def get(self, path, **kwargs):
        return http('GET', self.url + path, **kwargs)

    def post(self, path, body, **kwargs):
        return http('POST', self.url + path, body, **kwargs)

    def json(self, path, body=None, **kwargs):
        status, raw = self.post(path, body, **kwargs) if body is not None else self.get(path, **kwargs)
        assert status == 200, (path, status, raw[:300])
        return json.loads(raw)

    def stop(self):
        """SIGTERM, as systemd would; the simulated GPU memory is free again afterwards."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(10) == 0

    def wait_ready(self, timeout=20.0):
        wait_for(lambda: 'The server is fired up and ready to roll!' in self.log() or self.proc.poll() is not None,
                 timeout, what='ready line')
        assert self.proc.poll() is None, self.log()[-3000:]
        return self
