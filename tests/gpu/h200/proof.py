"""Driver of the H200 proof (run it through tests/gpu/h200_proof.sh; README.md there).

Runs the collection's own playbooks with ansible-playbook (connection local) against a
real SGLang server on the one GPU of the device machine, checks each step's outcome and
writes a compact results bundle. ``--simulate`` runs the very same steps here against
the SGLang simulator and the nvidia-smi stand-in (tests/sim).

Steps are grouped in phases, one device call each (each under 10 minutes):
``a`` models, GPU preflight, deploy at depth 5, unchanged redeploy, depth 5 -> 3, status,
stop; ``b`` random drafter, drafter with the other layer naming, stop; ``c`` benchmark,
stop; ``d`` (with SGLang 0.5.11 installed instead, tests/gpu/wheels-sglang-0.5.11.txt) a
``layers.0`` drafter deployed without the drafter step (silently skipped: accept length
about 1, the floor fails the host), then with it (renamed to ``midlayer``, accepted), stop;
``e`` deploy with an API key (the key in no log line, process argv or environment, nor in the
playbook output; status without the key says it was refused), the random drafter with
rollback on (back on the good drafter; seconds from the failure to serving again), stop;
``f`` one server (depth 5) measured by llm_benchmark and by ``sglang.bench_serving`` on the
same prompts at concurrency 1, 8 and 32 (bench_compare.py beside this file), stop;
``g`` two servers on the one GPU behind the real sglang-router 0.3.2 (inventory-g.yml), 8
streaming clients through the router during each rollout: a depth change with the drain (one host
per batch), the same without it (the router group pointed at no group), the random drafter on one
host rolled back (back in the router, no failed request), stop of both servers and the router. On
the device ``g`` is three calls (``g1``: models, start; ``g2``: both rollouts; ``g3``: rollback,
stop): its servers and router stay up between them when no step failed.
``h`` (issue 36, time to serving) a 16 GB Llama-3-8B-shaped model (make_big_model.py) staged by stage.yml
(a rerun copies nothing), started all cold (page cache dropped, JIT cache folder empty) and restarted by the
collection's warm start (page cache dropped while the old server serves; the deploy reads the model and the
engine back before the stop; the JIT caches kept), SGLang's phase lines per start; llm_benchmark beside
bench_serving on it; stop. On the device three calls (``h1`` model, staging, a cold start; ``h2`` three warm
restarts and the benchmarks; ``h3`` two more cold starts, stop), the server kept between them.
``i`` (issue 36, releases side by side) install.yml installs SGLang 0.5.15.post1 and 0.5.11 each into its own
virtualenv (tests/gpu/pack_wheels.sh with SECOND_RELEASE ships both), deploy.yml onto the first (the server runs
its virtualenv's python), the rolling change onto the second, rollback.yml back, each health- and acceptance-checked;
stop. On the device three calls (``i1`` models, installs; ``i2`` deploy, upgrade; ``i3`` rollback, stop).
``fd`` (issue 51, the front door, inventory-g.yml) phase g's two servers and router with split keys (inference, admin,
control-plane) and TLS with the router's client certificate from their first start: what each key may do on every admin
endpoint and the router's /workers, no key in a process, log or file readable by others; a drained rolling deploy under
streaming load over TLS; a certificate rotation under load served without a restart (--enable-ssl-refresh); the benchmark
through the router on TLS and on plain HTTP; weights attestation (a replica on a copy of the target with one tensor
changed fails its host as the outlier); stop. On the device two calls (``fd1`` keys, TLS rollout; ``fd2`` rotation,
benchmark, attestation, stop), the servers and router kept between them.
``p`` (issue 50, prefill/decode disaggregation, inventory-p.yml) two prefills and two decodes (mooncake_tcp) on the one GPU
behind the real sglang-router 0.3.2 in PD mode: started prefills first, a rolling depth change under streaming load
through the router (a prefill and its decode per batch), a prefill SIGKILLed under load (what health checks, router and
guard see; the way back), stop; then the content check: target-varied on a PD pair behind its own router against a
non-PD server, greedy ids token for token; stop. On the device three calls (``p1`` models, transfer engine, start;
``p2`` rollout, kill; ``p3`` stop, content, stop), the servers and router kept between them.
Every step is recorded PASS/FAIL/SKIP and the next one runs anyway; the server is always
stopped before the driver exits. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib
import json
import os
import re
import shutil
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
H200 = REPO / 'tests' / 'gpu' / 'h200'
ANSIBLE_MAIN = 'import sys; from ansible.cli.playbook import main; sys.exit(main())'
FLOOR = 2.0  # sglang_server_min_accept_length in group_vars/all.yml
GOOD, RANDOM, OTHER = 'good-layers0', 'random-layers0', 'good-midlayer'
NOT_ACCEPTED = 'the drafter is not being accepted'
RESERVE_S = 50  # kept back in a call for the final stop and the bundle
PHASES = {
    'a': ['models', 'preflight', 'deploy', 'redeploy', 'depth3', 'status', 'stop'],
    'b': ['models', 'random', 'other_naming', 'stop'],
    'c': ['models', 'benchmark', 'stop'],
    'd': ['models', 'unfixed_0511', 'fixed_0511', 'stop'],
    'e': ['models', 'apikey', 'rollback', 'stop'],
    'f': ['models', 'bench_compare', 'stop'],
    'g': ['models', 'g_start', 'g_drain', 'g_nodrain', 'g_rollback', 'g_sampled', 'g_stop'],
    # Phase g on the device, one call each (a server start there is 76-165 s): the servers and the router
    # stay up from g1 to g2 and from g2 to g3 when every step of the call passed.
    'g1': ['models', 'g_start'],
    'g2': ['g_drain', 'g_nodrain'],
    'g3': ['g_rollback', 'g_sampled', 'g_stop'],
    # The sampled warm-up of wait_for_llm_health (warm_sampled) on an empty FlashInfer JIT cache, then warm.
    'g4': ['models', 'g_warm_sampled', 'g_stop'],
    # Time to serving on a 16 GB model (issue 36): all-cold starts against the collection's warm restart, then
    # llm_benchmark beside bench_serving on that model. On the device three calls, the server kept between them.
    'h': ['models', 'h_model', 'h_stage', 'h_cold', 'h_warm', 'h_warm', 'h_warm', 'h_bench', 'h_cold', 'h_cold', 'stop'],
    'h1': ['models', 'h_model', 'h_stage', 'h_cold'],
    'h2': ['h_warm', 'h_warm', 'h_warm', 'h_bench'],
    'h3': ['h_cold', 'h_cold', 'stop'],
    # The same measure in less device time: served from the model's own folder (staging was measured in h1), each
    # start measured to ready without the sampled warm-up after it (83-94 s of FlashInfer JIT on an empty cache,
    # measured by phase h), no benchmark.
    'h1r': ['models', 'h_model', 'h_cold_ready'],
    'h2r': ['h_warm_ready', 'h_warm_ready', 'h_warm_ready'],
    'h3r': ['h_cold_ready', 'h_cold_ready', 'stop'],
    # Two SGLang releases side by side (issue 36 item 3): both installed by install.yml, each in its own virtualenv,
    # a deploy onto the first, the rolling change onto the second, rollback.yml back to the first. On the device three
    # calls (the installs took 217 s there, a start on an empty FlashInfer JIT cache 177 s), the server kept between.
    'i': ['models', 'i_install', 'i_deploy', 'i_upgrade', 'i_rollback', 'stop'],
    'i1': ['models', 'i_install'],
    'i2': ['i_deploy', 'i_upgrade'],
    'i3': ['i_rollback', 'stop'],
    # Prefill/decode disaggregation (issue 50, inventory-p.yml): two prefills and two decodes on the one GPU behind the
    # real sglang-router 0.3.2 in PD mode (mooncake_tcp), a rolling depth change under load, a prefill SIGKILLed under
    # load, then the content check (target-varied: a PD pair behind its own router against a non-PD server, greedy ids
    # token for token). On the device three calls, the servers and router kept between them.
    'p': ['models', 'p_mooncake', 'p_start', 'p_roll', 'p_kill', 'p_stop', 'p_content', 'p_cstop'],
    'p1': ['models', 'p_mooncake', 'p_start'],
    'p2': ['p_roll', 'p_kill'],
    'p3': ['p_stop', 'p_content', 'p_cstop'],
    # The front door (issue 51, inventory-g.yml): phase g's two servers and router with split keys and TLS (mTLS) from
    # their first start; the key checks, a rolling deploy and a certificate rotation under load over TLS, the benchmark
    # through the router with and without TLS, weights attestation with a replica on modified weights. On the device two
    # calls, the servers and the router kept between them.
    'fd': ['models', 'f_keys', 'f_tls', 'f_rotate', 'f_bench', 'f_attest', 'g_stop'],
    'fd1': ['models', 'f_keys', 'f_tls'],
    'fd2': ['f_rotate', 'f_bench', 'f_attest', 'g_stop'],
}
# Least time a phase-g step needs left in its call (two warm restarts are about 3.5 min on the device): a
# rollout cut by the call's end would leave the servers half-changed, so it is recorded SKIP instead.
STEP_MIN_S = {'g_start': 300, 'g_drain': 240, 'g_nodrain': 240, 'g_rollback': 200, 'h_cold': 200, 'h_cold_ready': 150, 'h_warm': 120, 'h_warm_ready': 120,
              'i_deploy': 200, 'i_upgrade': 200, 'i_rollback': 200,
              'p_start': 300, 'p_roll': 200, 'p_kill': 200, 'p_content': 200,
              'f_keys': 300, 'f_tls': 200, 'f_rotate': 60, 'f_bench': 200, 'f_attest': 120}
STARTS_SERVER = {'g_warm_sampled', 'deploy', 'redeploy', 'depth3', 'random', 'other_naming', 'benchmark', 'unfixed_0511', 'fixed_0511',
                 'apikey', 'rollback', 'bench_compare', 'g_start', 'g_drain', 'g_nodrain', 'g_rollback',
                 'h_cold', 'h_cold_ready', 'h_warm', 'h_warm_ready', 'h_bench', 'i_deploy', 'i_upgrade', 'i_rollback',
                 'p_start', 'p_roll', 'p_kill', 'p_content', 'f_keys', 'f_tls', 'f_bench', 'f_attest'}
# Longest a step may take on the device (ansible-playbook is killed after that).
STEP_TIMEOUT = {'models': 240, 'preflight': 90, 'deploy': 420, 'redeploy': 150, 'depth3': 330,
                'status': 90, 'stop': 150, 'random': 330, 'other_naming': 330, 'benchmark': 540,
                'unfixed_0511': 420, 'fixed_0511': 330, 'apikey': 420, 'rollback': 450, 'bench_compare': 420,
                'g_start': 420, 'g_drain': 420, 'g_nodrain': 420, 'g_rollback': 420, 'g_sampled': 120, 'g_warm_sampled': 520, 'g_stop': 150,
                'h_model': 300, 'h_stage': 300, 'h_cold': 450, 'h_cold_ready': 300, 'h_warm': 300, 'h_warm_ready': 300, 'h_bench': 420,
                'i_install': 360, 'i_deploy': 420, 'i_upgrade': 420, 'i_rollback': 420,
                'p_mooncake': 120, 'p_start': 300, 'p_roll': 420, 'p_kill': 300, 'p_stop': 150, 'p_content': 360, 'p_cstop': 150,
                'f_keys': 420, 'f_tls': 420, 'f_rotate': 180, 'f_bench': 300, 'f_attest': 300}
# bench_compare: what both clients send (concurrency 32 gets two waves of the prompts).
COMPARE = {'concurrency': [1, 8, 32], 'num_prompts': 64, 'input_len': 64, 'output_len': 128, 'rounds': 2}
OLD_SGLANG = '0.5.11'  # the last SGLang that loads only midlayer.* drafter names
# Phase g: two servers (inventory-g.yml) and the router; ports on the device (free ones in the dry run).
G_SERVERS = {'srv1': 'g1', 'srv2': 'g2'}  # inventory host -> sglang_server_name
G_PORTS = {'SRV1': 30001, 'SRV2': 30002, 'ROUTER': 30080, 'ROUTER_METRICS': 29000}
G_LOAD = {'clients': 8, 'pause_device': 0.0, 'pause_simulate': 0.1, 'warm_requests': 40, 'after_requests': 100}
G_MIN_REQUESTS = 500  # the drained run must show at least this many (issue 35)
G_DRAIN_MAX_S = 10.0  # a drain wait above this is the old gauge gate (about 30 s on the H200)
# Phase p: the servers (inventory-p.yml), their ports on the device (free ones in the dry run), what the checks compare.
P_PREFILLS, P_DECODES = ['p1', 'p2'], ['d1', 'd2']
P_SERVERS = ('p1', 'd1', 'p2', 'd2')  # the inventory's order: llmops_serial=2 batches p1+d1, then p2+d2
P_CONTENT = ['cp', 'cd']  # the content check's pair (target-varied); 'ref' its non-PD reference
P_PORTS = {'P1': 30011, 'P1_NCCL': 30111, 'P1_BOOTSTRAP': 8998, 'D1': 30021, 'D1_NCCL': 30121,
           'P2': 30012, 'P2_NCCL': 30112, 'P2_BOOTSTRAP': 8999, 'D2': 30022, 'D2_NCCL': 30122,
           'CP': 30031, 'CP_NCCL': 30131, 'CP_BOOTSTRAP': 8997, 'CD': 30032, 'CD_NCCL': 30132, 'REF': 30040,
           'REF_NCCL': 30140, 'PD_ROUTER': 30080, 'PD_ROUTER_METRICS': 29000, 'PD_ROUTER_C': 30081,
           'PD_ROUTER_C_METRICS': 29001}
# Phase fd: the three keys (README "Keys with one job each"); the admin endpoints of 0.5.15.post1 (ADMIN_OPTIONAL,
# FACTS.md) asked with the inference key and with none, each with a body that is no JSON: refused (401) before the body
# is read, and a route that let the key through would refuse the body and change nothing. With the admin key only
# harmless ones: /flush_cache, /weights_checker (a checksum only reads), /pause_generation then /continue_generation.
F_KEYS = ['sglang_server_api_key', 'sglang_server_admin_api_key', 'sglang_router_control_plane_api_key']
F_ADMIN_ROUTES = ['/update_weights_from_disk', '/update_weights_from_tensor', '/update_weights_from_distributed',
                  '/pause_generation', '/continue_generation', '/release_memory_occupation', '/set_internal_state',
                  '/abort_request', '/slow_down', '/flush_cache', '/load_lora_adapter', '/unload_lora_adapter',
                  '/start_profile', '/weights_checker']
F_BENCH = {'prompts': 64, 'input_len': 64, 'output_len': 64, 'concurrency': 8, 'rounds': 2}
# What the key scan of f_keys leaves out of the proof's folder: models, virtualenvs, caches (nothing of the keys).
F_SCAN_SKIP = {'models', 'collections', 'router-venv', 'releases', 'big-source', 'staged', 'jit-cache', 'compare',
               'benchmark', 'venv-probe'}
NONPD_ACCEPT = 4.571  # the deploy's smoke accept length of one non-PD server, good drafter, depth 5 (phases a, e, i)
P_MIN_REQUESTS = 300
P_KILL_WATCH_S = 30  # seconds the driver watches after the SIGKILL, before status.yml and the way back
P_PROMPTS, P_MIN_EQUAL, P_TOKENS = 40, 32, 32
P_NEAR_TIE = 0.05  # a top-2 logprob gap below this is a tie that the rounding of two kernels may break either way
# Phase h: the model's names in model_stage_models, and what bench_compare sends to it.
H_MODELS = {'target': 'llama3-8b-shape', 'drafter': 'llama3-8b-shape-eagle3'}
H_COMPARE = dict(COMPARE, num_prompts=32, rounds=1)
# Where the engines keep compiled state by default (for the server's user, root on the device) when no variable
# of llmops.serving.jit_cache_env moves it: an all-cold start empties these too, and each start records what it
# wrote outside the proof's folders (written_outside), so that state the collection does not move shows.
H_DEFAULT_CACHES = ['~/.triton', '~/.cache', '~/.nv', '~/.tilelang', '/tmp/torchinductor_{user}', '/tmp/{user}']
# Phase i: the releases (and their wheel lists), the first one serving first; the drafter with midlayer.* names,
# which both load; the wheel the proof writes so that a release's virtualenv sees the device's torch.
I_RELEASES = {'0.5.15.post1': 'wheels-sglang-0.5.15.post1.txt', OLD_SGLANG: 'wheels-sglang-0.5.11.txt'}
I_FIRST, I_SECOND = I_RELEASES
DEVICE_TORCH = 'llmops-device-torch==1.0'
GRAPH_END = re.compile(r'Capture .*graph end\. (?:Time )?elapsed[=:] ?([0-9.]+) s', re.IGNORECASE)
LOG_TIME = re.compile(r'^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)')
DRAIN_LINE = re.compile(r'(\S+): idle ([0-9.]+) s after it left the router \((\S+), (\d+) reads\)')


class Step:
    def __init__(self, name, folder):
        self.name, self.folder = name, folder
        self.checks, self.figures, self.notes = [], {}, []
        self.outcome, self.seconds = None, 0.0

    def check(self, name, ok, detail=''):
        self.checks.append({'check': name, 'ok': bool(ok), 'detail': str(detail)})
        return bool(ok)

    def as_dict(self):
        return {'step': self.name, 'folder': self.folder.name, 'outcome': self.outcome,
                'seconds': round(self.seconds, 1), 'checks': self.checks, 'figures': self.figures, 'notes': self.notes}


class Run:
    """One playbook run: output lines, events (tests/gpu/h200/callback_plugins) and rc."""

    def __init__(self, rc, lines, events, seconds, timed_out):
        self.rc, self.lines, self.events, self.seconds, self.timed_out = rc, lines, events, seconds, timed_out

    def results(self, action, outcome=None):
        return [e['result'] for e in self.events
                if e['action'].endswith(action) and (outcome is None or e['outcome'] == outcome)]

    def fact(self, name):
        """Last value set by set_fact for ``name``."""
        values = [r['ansible_facts'][name] for r in self.results('set_fact') if name in r.get('ansible_facts', {})]
        return values[-1] if values else None

    def task(self, name_part):
        return [e for e in self.events if name_part in e['task']]

    def recap(self):
        idx = next((i for i, line in enumerate(self.lines) if line.startswith('PLAY RECAP')), None)
        return [line.rstrip() for line in self.lines[idx + 1:] if line.strip()] if idx is not None else []

    def heartbeats(self):
        return [line.strip() for line in self.lines if re.search(r'wait_for_llm_health: \d+ s, phase', line)]


class Proof:
    def __init__(self, simulate):
        self.simulate = simulate
        default_state = '/tmp/llmops-gpu-sim' if simulate else '/tmp/llmops-gpu'
        self.state = Path(os.environ.get('LLMOPS_GPU_STATE', default_state))
        self.site = self.state / 'site'
        self.work = self.state / 'proof'
        self.models = self.work / 'models'
        self.results = self.work / 'results'
        self.out = Path(os.environ['OUT']) if os.environ.get('OUT') else self.work / 'out'
        self.log_path = self.work / 'log' / 'sglang-main.log'
        self.pidfile = self.work / 'run' / 'sglang-main.pid'
        self.started = time.monotonic()
        self.budget = float(os.environ.get('LLMOPS_PROOF_BUDGET_S', '560' if not simulate else '3600'))
        self.env = dict(os.environ, LC_ALL='C.UTF-8', LANG='C.UTF-8', ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0',
                        ANSIBLE_CONFIG=str(H200 / 'ansible.cfg'),
                        ANSIBLE_COLLECTIONS_PATH=str(self.work / 'collections'),
                        ANSIBLE_CALLBACK_PLUGINS=str(H200 / 'callback_plugins'),
                        ANSIBLE_CALLBACKS_ENABLED='proof_events', LLMOPS_PROOF_WORK=str(self.work))
        if simulate:
            self.env.update(LLMOPS_PROOF_PYTHONPATH=str(REPO / 'tests' / 'sim'),
                            NVSIM_STATE_DIR=str(self.state / 'nvsim'),
                            SGLANG_SIM_SPEED=os.environ.get('SGLANG_SIM_SPEED', '0.3'),
                            PATH='%s:%s' % (REPO / 'tests' / 'sim', os.environ.get('PATH', '')))
            self.ansible_python = str(REPO / '.venv' / 'bin' / 'python')
            self.models_python = os.environ.get('LLMOPS_MODELS_PYTHON', str(REPO / '.cache' / 'vllm-venv' / 'bin' / 'python'))
            self.models_env = dict(self.env)
        else:
            self.env.update(LLMOPS_PROOF_PYTHONPATH=str(self.site), PYTHONPATH=str(self.site),
                            HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1')
            self.ansible_python = self.models_python = sys.executable
            # The models come from the device's own torch/transformers, not the carried wheels.
            self.models_env = {k: v for k, v in self.env.items() if k != 'PYTHONPATH'}
        self.memo_path = self.results / 'memo.json'
        if simulate:
            # Here another server (make demo's, another checkout's) may hold the usual port.
            self.results.mkdir(parents=True, exist_ok=True)
            port = self.memo().get('port') or free_port()
            self.env['LLMOPS_PROOF_PORT'] = str(self.memo(port=port)['port'])
        self.engine_down = None  # set when a server never got ready: later starts are skipped
        # Phase g: ports, the router's wheelhouse (the router list's wheels, kept apart by
        # device_step.sh install) and the python its virtualenv is made from.
        ports = dict(G_PORTS)
        if simulate:
            ports = self.memo().get('g_ports') or {name: free_port() for name in G_PORTS}
            self.memo(g_ports=ports)
            self.env['LLMOPS_PROOF_ROUTER_WHEELS'] = os.environ.get(
                'LLMOPS_ROUTER_WHEELS', str(REPO / '.cache' / 'router-wheels'))
            self.env['LLMOPS_PROOF_ROUTER_PYTHON'] = os.environ.get('LLMOPS_ROUTER_BASE_PYTHON', '/usr/bin/python3')
        else:
            self.env['LLMOPS_PROOF_ROUTER_WHEELS'] = str(self.state / 'wheels' / 'router')
            self.env['LLMOPS_PROOF_ROUTER_PYTHON'] = sys.executable
        for name, port in ports.items():
            self.env['LLMOPS_PROOF_PORT_' + name] = str(port)
        self.g_ports = ports
        p_ports = dict(P_PORTS)
        if simulate:
            p_ports = self.memo().get('p_ports') or {name: free_port() for name in P_PORTS}
            self.memo(p_ports=p_ports)
        for name, port in p_ports.items():
            self.env['LLMOPS_PROOF_PORT_' + name] = str(port)
        self.p_ports = p_ports
        self.keep_running = False  # set by main() for the calls g1 and g2 when every step passed

    # ---------------------------------------------------------------- bookkeeping
    def left(self):
        return self.budget - (time.monotonic() - self.started)

    def memo(self, **updates):
        data = json.loads(self.memo_path.read_text()) if self.memo_path.exists() else {}
        data.update(updates)
        self.memo_path.write_text(json.dumps(data, indent=1))
        return data

    def summary(self):
        path = self.results / 'summary.json'
        return json.loads(path.read_text()) if path.exists() else {'steps': []}

    def record(self, step):
        data = self.summary()
        data['steps'].append(step.as_dict())
        data['versions'] = self.memo().get('versions', {})
        data['mode'] = 'SIMULATOR (tests/sim), not real SGLang or a GPU' if self.simulate else 'real SGLang on the GPU'
        (self.results / 'summary.json').write_text(json.dumps(data, indent=1))
        (self.results / 'summary.md').write_text(render(data))
        mark = {'PASS': 'ok  ', 'FAIL': 'FAIL', 'SKIP': 'skip'}[step.outcome]
        figures = ', '.join('%s=%s' % (k, v) for k, v in step.figures.items() if not isinstance(v, (list, dict)))
        print('[%s] %-22s %6.1f s  %s' % (mark, step.folder.name, step.seconds, figures), flush=True)
        for check in step.checks:
            if not check['ok']:
                print('       failed check: %s: %s' % (check['check'], ' '.join(check['detail'].split())[-300:]), flush=True)

    # ---------------------------------------------------------------- running things
    def playbook(self, step, playbook, extra=None, timeout=300, skip_tags=None, vars_files=(), tag='',
                 inventory='inventory.yml', limit=None):
        """ansible-playbook; ``extra`` goes on its command line, ``vars_files`` (secrets) only as @file;
        ``tag`` names the log and events files of a step's second and later playbook."""
        suffix = '-' + tag if tag else ''
        events_path = step.folder / ('events%s.jsonl' % suffix)
        env, main = dict(self.env, LLMOPS_PROOF_EVENTS=str(events_path)), ANSIBLE_MAIN
        if (extra or {}).get('llmops_proof_releases') and 'PYTHONPATH' in env:
            # Phase i: a release's virtualenv must not see the proof's wheels through PYTHONPATH, which pip, the
            # install's version probe and the server would inherit (the first attempt's server imported them):
            # ansible-core goes on the path of ansible-playbook alone.
            main = 'import site; site.addsitedir(%r); %s' % (env.pop('PYTHONPATH'), ANSIBLE_MAIN)
        cmd = [self.ansible_python, '-c', main, '-i', str(H200 / inventory), str(playbook)]
        if skip_tags:
            cmd += ['--skip-tags', skip_tags]
        if limit:
            cmd += ['--limit', limit]
        if self.simulate:
            cmd += ['-e', '@%s' % (H200 / 'simulate.yml')]
        for path in vars_files:
            cmd += ['-e', '@%s' % path]
        for key, value in (extra or {}).items():
            cmd += ['-e', json.dumps({key: value})]
        if self.simulate:
            # The dry run's machine is shared (2 cores, other test runs beside it): a step may take several times its
            # device time there (p_roll: over 420 s at a load average of 25), and a killed playbook proves nothing.
            timeout *= float(os.environ.get('LLMOPS_PROOF_SIM_TIMEOUT_FACTOR', '3'))
        timeout = max(10.0, min(timeout, self.left() - RESERVE_S))
        log = step.folder / ('ansible%s.log' % suffix)
        start = time.monotonic()
        with log.open('w') as handle:
            handle.write('$ ansible-playbook %s\n' % ' '.join(cmd[3:]))
            handle.flush()
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        lines = log.read_text(errors='replace').splitlines()
        events = [json.loads(line) for line in events_path.read_text().splitlines()] if events_path.exists() else []
        run = Run(proc.returncode, lines, events, time.monotonic() - start, timed_out)
        trim_file(log, 500, 900)
        recap = run.recap()
        if recap:
            step.figures['recap' + suffix.replace('-', '_')] = recap
        if timed_out:
            step.check('ansible-playbook finished', False, 'killed after %.0f s' % timeout)
        return run

    def command(self, cmd, env=None, timeout=60):
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env or self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
            return proc.returncode, proc.stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            return -1, str(exc)

    def nvidia_smi(self):
        """(compute apps lines, [(index, used MiB, total MiB)], raw text)."""
        rc1, apps = self.command(['nvidia-smi', '--query-compute-apps=pid,process_name,used_memory,gpu_uuid',
                                  '--format=csv,noheader'])
        rc2, gpus = self.command(['nvidia-smi', '--query-gpu=index,name,memory.used,memory.total,driver_version',
                                  '--format=csv,noheader,nounits'])
        rows = []
        for line in gpus.splitlines():
            parts = [p.strip() for p in line.split(',')]
            if len(parts) == 5 and parts[2].isdigit():
                rows.append((int(parts[0]), int(parts[2]), int(parts[3])))
        raw = '$ nvidia-smi --query-compute-apps=... (rc %d)\n%s$ nvidia-smi --query-gpu=... (rc %d)\n%s' % (
            rc1, apps, rc2, gpus)
        return [line for line in apps.splitlines() if line.strip()], rows, raw

    def server_processes(self, session=None):
        """Processes of our server: those of its session (the process launcher starts it as a
        session leader, so every worker keeps its session id); without a known session, those
        whose command line names our work folder. A bystander that merely mentions sglang is
        not ours."""
        found = []
        for entry in os.listdir('/proc'):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cmdline = Path('/proc', entry, 'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
                stat = Path('/proc', entry, 'stat').read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(')') + 2:].split()
            if fields and fields[0] == 'Z':
                continue
            if session is not None:
                ours = len(fields) > 3 and fields[3] == str(session)
            else:
                ours = str(self.work) in cmdline
            if ours:
                found.append('%s %s' % (entry, cmdline.strip()[:160]))
        return found

    def server_pid(self):
        try:
            return json.loads(self.pidfile.read_text())['pid']
        except (OSError, ValueError, KeyError):
            return None

    def keep_server_log(self, step):
        if self.log_path.exists():
            target = step.folder / 'server.log'
            shutil.copyfile(self.log_path, target)
            trim_file(target, 150, 250)

    # ---------------------------------------------------------------- set-up
    def prepare(self, fresh):
        if fresh and self.results.exists():
            shutil.rmtree(self.results)
        self.results.mkdir(parents=True, exist_ok=True)
        link = self.work / 'collections' / 'ansible_collections' / 'llmops' / 'serving'
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(REPO)
        if self.simulate:
            state = Path(self.env['NVSIM_STATE_DIR'])
            if not (state / 'gpus.json').exists():
                subprocess.run([sys.executable, str(REPO / 'tests' / 'sim' / 'nvsim.py'), 'init', '--count', '1'],
                               env=self.env, check=True, stdout=subprocess.DEVNULL)
            if not Path(self.ansible_python).exists():
                sys.exit('%s is missing: make venv' % self.ansible_python)
            if not Path(self.models_python).exists():
                # No engine venv (tests/engines/install_vllm.sh) here: the simulator needs only the files'
                # names, shapes and metadata, which tests/sim/make_tiny_checkpoint.py writes with the stdlib.
                print('%s is missing: the dry run writes stand-in models with tests/sim/make_tiny_checkpoint.py'
                      % self.models_python, flush=True)
                self.models_python = None
        elif not (self.site / '.installed').exists():
            sys.exit('%s is not installed: fresh machine? ship the wheel parts and run '
                     'tests/gpu/device_step.sh install first (tests/gpu/README.md)' % self.site)
        if 'versions' not in self.memo():
            self.memo(versions=self.versions())

    def models_done(self):
        return (self.models / 'manifest.json').exists() and any(
            s['step'] == 'models' and s['outcome'] == 'PASS' for s in self.summary()['steps'])

    def versions(self):
        code = ('import importlib.metadata as m, json, platform\n'
                'def v(name):\n'
                '    try:\n        return m.version(name)\n'
                '    except m.PackageNotFoundError:\n        return None\n'
                'print(json.dumps({"python": platform.python_version(), **{n: v(n) for n in '
                '("sglang", "torch", "transformers", "ansible-core", "sglang-kernel", "flashinfer-python")}}))')
        rc, out = self.command([self.ansible_python, '-c', code])
        versions = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {'error': out[-300:]}
        if self.simulate:
            versions['sglang'] = 'simulator %s' % os.environ.get('SGLANG_SIM_VERSION', '0.5.15.post1')
        apps, gpus, raw = self.nvidia_smi()
        versions['gpu'] = raw.splitlines()[-len(gpus):] if gpus else raw[-300:]
        rc, head = self.command(['git', 'rev-parse', 'HEAD'])
        versions['commit'] = os.environ.get('LLMOPS_PROOF_COMMIT') or (head.strip() if rc == 0 else None)
        versions['date'] = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())
        return versions

    # ---------------------------------------------------------------- the steps
    def run_step(self, name):
        number = 1 + sum(1 for path in self.results.iterdir() if path.is_dir())
        folder = self.results / ('%02d-%s' % (number, name.replace('_', '-')))
        folder.mkdir(parents=True)
        step = Step(name, folder)
        start = time.monotonic()
        if self.left() - RESERVE_S < max(30, STEP_MIN_S.get(name, 0)):
            step.outcome = 'SKIP'
            step.notes.append('not enough time left in this call; run it in the next one: h200_proof.sh %s' % name)
        elif name in STARTS_SERVER and self.engine_down:
            step.outcome = 'SKIP'
            step.notes.append('not run: %s (no point in spending device time on more starts)' % self.engine_down)
        else:
            try:
                getattr(self, 'step_' + name)(step)
            except Exception as exc:  # pylint: disable=broad-except
                step.check('step ran without an error in the driver', False, '%s: %s' % (type(exc).__name__, exc))
            step.outcome = 'PASS' if step.checks and all(c['ok'] for c in step.checks) else 'FAIL'
        step.seconds = time.monotonic() - start
        self.record(step)
        return step

    def step_models(self, step):
        manifest = self.models / 'manifest.json'
        if self.models_python is None:
            rc, out = self.stand_in_models()
        else:
            rc, out = self.command([self.models_python, str(H200 / 'make_models.py'), str(self.models)],
                                   env=self.models_env, timeout=STEP_TIMEOUT['models'])
        (step.folder / 'make_models.log').write_text(out[-20000:])
        step.check('make_models.py exit status 0', rc == 0, out.strip().splitlines()[-1:] if out.strip() else rc)
        for variant in (GOOD, RANDOM, OTHER):
            step.check('drafter %s written' % variant, (self.models / 'drafters' / variant / 'model.safetensors').exists())
        step.check('target-varied written (phase p\'s content check)', (self.models / 'target-varied' / 'config.json').exists())
        if manifest.exists():
            data = json.loads(manifest.read_text())
            step.figures['target'] = '%(layers)s layers, hidden %(hidden)s, vocab %(vocab_size)s' % data['target']

    def stand_in_models(self):
        """Dry run without the engine venv: the target and the drafters of make_models.py's layout,
        written by tests/sim/make_tiny_checkpoint.py (zeros, with the simulator's quality marker)."""
        sys.path.insert(0, str(REPO / 'tests' / 'sim'))
        import make_tiny_checkpoint as tiny  # pylint: disable=import-outside-toplevel
        drafters = {GOOD: ('layers', 'perfect'), RANDOM: ('layers', 'random'), OTHER: ('midlayer', 'perfect')}
        manifest = {'stand_in': 'tests/sim/make_tiny_checkpoint.py (no engine venv)',
                    'target': {'path': 'target', 'layers': tiny.LAYERS, 'hidden': tiny.HIDDEN, 'vocab_size': tiny.VOCAB},
                    'drafters': {}}
        for name, (spelling, quality) in drafters.items():
            scratch = self.models / ('.scratch-' + name)
            if scratch.exists():
                shutil.rmtree(scratch)
            target, drafter = tiny.write(str(scratch), spelling, quality)
            if not (self.models / 'target').exists():
                shutil.move(target, str(self.models / 'target'))
            final = self.models / 'drafters' / name
            if final.exists():
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(drafter, str(final))
            shutil.rmtree(scratch)
            manifest['drafters'][name] = {'path': 'drafters/' + name, 'sim_quality': quality}
        varied = self.models / 'target-varied'
        if varied.exists():
            shutil.rmtree(varied)
        shutil.copytree(self.models / 'target', varied)  # the simulator's ids do not depend on the weights anyway
        manifest['varied_target'] = {'path': 'target-varied', 'stand_in': 'a copy of target'}
        (self.models / 'manifest.json').write_text(json.dumps(manifest, indent=2) + '\n')
        return 0, 'stand-in models written in %s' % self.models

    def step_preflight(self, step):
        run = self.playbook(step, H200 / 'preflight.yml', timeout=STEP_TIMEOUT['preflight'])
        step.check('playbook succeeded', run.rc == 0, 'rc %s' % run.rc)
        result = (run.results('gpu_memory') or [{}])[-1]
        step.check('gpu_memory says ready', result.get('ready') is True, result.get('msg', ''))
        gpus = result.get('gpus') or []
        step.check('one GPU seen', len(gpus) == 1, '%d GPUs' % len(gpus))
        step.figures['gpu_table'] = result.get('summary')

    def deploy(self, step, extra, timeout, skip_tags=None, vars_files=(), playbook='deploy.yml'):
        apps_before = self.nvidia_smi()[0]
        run = self.playbook(step, REPO / 'playbooks' / playbook, extra=extra, timeout=timeout, skip_tags=skip_tags,
                            vars_files=vars_files)
        self.keep_server_log(step)
        plan = run.fact('sglang_server_plan') or {}
        result = run.fact('sglang_server_result') or {}
        health = (run.results('wait_for_llm_health') or [{}])[-1]
        smoke = health.get('smoke') or {}
        pid = result.get('pid') or self.server_pid()
        step.figures.update(action=plan.get('action'), pid=pid, depth=plan.get('speculative', {}).get('depth'),
                            version=plan.get('version'), ready_s=health.get('elapsed'), health=health.get('status'),
                            accept_length=smoke.get('accept_length'), accept_source=smoke.get('accept_length_source'),
                            tokens=smoke.get('tokens'), heartbeats=len(run.heartbeats()))
        step.figures['timeline'] = [
            '%s at %.1f s%s' % (p.get('phase'), p.get('elapsed') or 0, (': ' + p['line'][:140]) if p.get('line') else '')
            for p in health.get('phases') or []]
        step.figures['heartbeat_lines'] = run.heartbeats()[:20]
        step.figures['command'] = [' '.join(plan.get('command') or [])]
        apps, gpus, raw = self.nvidia_smi()
        step.figures['gpu_while_serving'] = apps or raw.splitlines()
        (step.folder / 'nvidia-smi.txt').write_text('before:\n%s\nafter:\n%s' % ('\n'.join(apps_before), raw))
        return run, plan, health, smoke, pid

    def check_ready(self, step, run, health, smoke, floor=True):
        step.check('playbook succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        if not step.check('health ready', health.get('status') == 'ready', health.get('msg') or health.get('health')):
            self.engine_down = 'the server did not become ready in step %s (health %s)' % (
                step.folder.name, health.get('status') or 'not reached')
        phases = [p.get('phase') for p in health.get('phases') or []]
        step.check('health timeline ends ready', phases[-1:] == ['ready'], ' -> '.join(map(str, phases)))
        elapsed = health.get('elapsed') or 0
        if elapsed > 65:  # the role's heartbeat interval is the module default, 60 s
            step.check('heartbeats printed while waiting', run.heartbeats(), '%d heartbeats in %.0f s' % (
                len(run.heartbeats()), elapsed))
        if floor:
            value = smoke.get('accept_length')
            step.check('smoke accept length >= floor %.1f' % FLOOR, value is not None and value >= FLOOR, value)

    def check_flags(self, step, pid, depth):
        argv = process_argv(pid)
        pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith('--')}
        want = {'--speculative-num-draft-tokens': str(depth), '--speculative-num-steps': str(depth - 1),
                '--speculative-eagle-topk': '1'}
        got = {k: pairs.get(k) for k in want}
        step.check('running server has the flags of depth %d' % depth, got == want, 'pid %s: %s' % (pid, got))

    def step_deploy(self, step):
        run, plan, health, smoke, pid = self.deploy(step, {'sglang_server_speculative_depth': 5},
                                                    STEP_TIMEOUT['deploy'])
        self.check_ready(step, run, health, smoke)
        step.check('server started', plan.get('action') in ('start', 'restart'), plan.get('action'))
        self.check_flags(step, pid, 5)
        self.memo(pid_d5=pid, accept_d5=smoke.get('accept_length'))

    def step_redeploy(self, step):
        before = self.memo().get('pid_d5')
        run, plan, health, smoke, pid = self.deploy(step, {'sglang_server_speculative_depth': 5},
                                                    STEP_TIMEOUT['redeploy'])
        self.check_ready(step, run, health, smoke)
        step.check('plan says nothing to do', plan.get('action') == 'none', plan.get('action'))
        process = [r for r in run.results('server_process') if r.get('pid') is not None]
        step.check('server_process did not change anything', process and not any(r.get('changed') for r in process),
                   [(r.get('changed'), r.get('pid')) for r in process])
        step.check('same PID as the first deploy', pid is not None and pid == before, '%s -> %s' % (before, pid))

    def step_depth3(self, step):
        before = self.memo()
        run, plan, health, smoke, pid = self.deploy(step, {'sglang_server_speculative_depth': 3},
                                                    STEP_TIMEOUT['depth3'])
        self.check_ready(step, run, health, smoke)
        step.check('plan says restart', plan.get('action') == 'restart', plan.get('action'))
        step.check('new PID', pid is not None and pid != before.get('pid_d5'), '%s -> %s' % (before.get('pid_d5'), pid))
        self.check_flags(step, pid, 3)
        d5, d3 = before.get('accept_d5'), smoke.get('accept_length')
        step.check('accept length at depth 3 is at most 3', d3 is not None and d3 <= 3.0 + 1e-6, d3)
        step.check('accept length at depth 5 was above 3 (changed with the depth)', d5 is not None and d5 > 3.0,
                   'depth 5: %s, depth 3: %s' % (d5, d3))
        self.memo(pid_d3=pid, accept_d3=d3)

    def step_status(self, step):
        run = self.playbook(step, REPO / 'playbooks' / 'status.yml', timeout=STEP_TIMEOUT['status'])
        step.check('playbook succeeded', run.rc == 0, 'rc %s' % run.rc)
        table = [r.get('msg') for r in run.results('debug') if r.get('msg')]
        text = '\n'.join(map(str, table))
        status = run.fact('sglang_server_status') or {}
        step.figures['table'] = table
        step.figures['status'] = status
        step.check('table printed', 'localhost' in text, text[:300])
        step.check('status: running and healthy', status.get('running') is True and status.get('healthy') is True,
                   status)
        step.check('status: depth 3', str(status.get('depth')) == '3', status.get('depth'))
        step.check('status: the PID of the depth-3 server', str(status.get('pid')) == str(self.memo().get('pid_d3')),
                   '%s vs %s' % (status.get('pid'), self.memo().get('pid_d3')))

    def step_stop(self, step):
        session = self.server_pid()
        run = self.playbook(step, REPO / 'playbooks' / 'stop.yml', timeout=STEP_TIMEOUT['stop'])
        # Checked at once: stop.yml must only return when nothing of the server is left.
        left = self.server_processes(session)
        apps, gpus, raw = self.nvidia_smi()
        (step.folder / 'nvidia-smi.txt').write_text(raw)
        step.check('playbook succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        stopped = [s for r in run.results('server_process') for s in r.get('stopped') or []]
        step.figures['stopped'] = stopped
        step.figures['server_session'] = session
        step.check('no server process left', not left, left)
        step.check('nvidia-smi lists no compute process', not apps, apps)
        step.check('GPU memory back to idle (< 1024 MiB used)', gpus and all(row[1] < 1024 for row in gpus),
                   gpus or raw[-300:])
        step.check('pidfile removed', not self.pidfile.exists())
        time.sleep(3)  # a second reading for the record only (the checks above used the first)
        later = self.nvidia_smi()
        step.figures['gpu_3s_later'] = later[0] + ['GPU %s: %s of %s MiB used' % row for row in later[1]]
        with (step.folder / 'nvidia-smi.txt').open('a') as handle:
            handle.write('\n3 s later:\n' + later[2])

    def step_random(self, step):
        # The host is left as it failed (step rollback shows the rollback).
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / RANDOM),
            'sglang_server_speculative_depth': 5, 'llmops_rollback': False}, STEP_TIMEOUT['random'])
        self.check_not_accepted(step, run, health, smoke)

    def check_not_accepted(self, step, run, health, smoke):
        message = health.get('msg') or ''
        step.figures['message'] = message
        step.check('playbook failed the host', run.rc != 0, 'rc %s' % run.rc)
        if not step.check('the server itself came up', health.get('status') == 'ready', health.get('status')):
            self.engine_down = 'the server did not become ready in step %s' % step.folder.name
        step.check('message says the drafter is not accepted', NOT_ACCEPTED in message, message)
        step.check('message printed in the playbook output', any(NOT_ACCEPTED in line for line in run.lines))
        value = smoke.get('accept_length')
        step.check('accept length about 1 (< %.1f)' % FLOOR, value is not None and value < FLOOR, value)

    def old_sglang_drafter(self, step, fresh):
        """A copy of the good layers.0 drafter for the SGLang 0.5.11 steps (fresh: copied again)."""
        drafter = self.models / 'drafters' / ('%s-%s' % (GOOD, OLD_SGLANG))
        if fresh and drafter.exists():
            shutil.rmtree(drafter)
        if not drafter.exists():
            shutil.copytree(self.models / 'drafters' / GOOD, drafter)
        step.figures['installed_sglang'] = self.memo().get('versions', {}).get('sglang')
        return drafter

    def step_unfixed_0511(self, step):
        drafter = self.old_sglang_drafter(step, fresh=True)
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(drafter), 'sglang_server_speculative_depth': 5},
            STEP_TIMEOUT['unfixed_0511'], skip_tags='drafter')
        step.check('SGLang %s detected' % OLD_SGLANG, plan.get('version') == OLD_SGLANG, plan.get('version'))
        step.check('drafter step skipped (--skip-tags drafter)', not run.results('drafter_checkpoint'))
        names = safetensors_names(drafter / 'model.safetensors')
        step.check('drafter still has layers.0.* names', any(n.startswith('layers.0.') for n in names), sorted(names)[:5])
        self.check_not_accepted(step, run, health, smoke)
        self.memo(pid_unfixed=pid, accept_unfixed=smoke.get('accept_length'))

    def step_fixed_0511(self, step):
        drafter = self.old_sglang_drafter(step, fresh=False)
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(drafter), 'sglang_server_speculative_depth': 5},
            STEP_TIMEOUT['fixed_0511'])
        fixed = (run.results('drafter_checkpoint') or [{}])[-1]
        names = safetensors_names(drafter / 'model.safetensors')
        step.figures.update(layout_before=fixed.get('layout_before'), layout_after=fixed.get('layout_after'),
                            renamed=fixed.get('renamed'))
        step.check('SGLang %s detected' % OLD_SGLANG, plan.get('version') == OLD_SGLANG, plan.get('version'))
        step.check('drafter_checkpoint renamed layers.0 -> midlayer',
                   fixed.get('changed') is True and fixed.get('layout_after') == 'midlayer' and (fixed.get('renamed') or 0) > 0,
                   '%s -> %s, %s renamed' % (fixed.get('layout_before'), fixed.get('layout_after'), fixed.get('renamed')))
        step.check('no layers.0.* name left', names and not any(n.startswith('layers.') for n in names), sorted(names)[:5])
        self.check_ready(step, run, health, smoke)
        self.check_flags(step, pid, 5)
        before = self.memo()
        step.check('server restarted for the fixed drafter', pid is not None and pid != before.get('pid_unfixed'),
                   '%s -> %s' % (before.get('pid_unfixed'), pid))
        step.figures['accept_unfixed_then_fixed'] = '%s -> %s' % (before.get('accept_unfixed'), smoke.get('accept_length'))

    def step_other_naming(self, step):
        source = self.models / 'drafters' / OTHER
        drafter = self.models / 'drafters' / ('%s-renamed' % OTHER)
        if drafter.exists():
            shutil.rmtree(drafter)
        shutil.copytree(source, drafter)
        before = safetensors_names(drafter / 'model.safetensors')
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(drafter),
            'sglang_server_speculative_depth': 5,
            # 0.5.15 loads both spellings; ask for the layers.N one so the rewrite happens.
            'drafter_layout': 'layers'}, STEP_TIMEOUT['other_naming'])
        fixed = (run.results('drafter_checkpoint') or [{}])[-1]
        after = safetensors_names(drafter / 'model.safetensors')
        step.figures.update(layout_before=fixed.get('layout_before'), layout_after=fixed.get('layout_after'),
                            renamed=fixed.get('renamed'))
        step.check('drafter written with midlayer.* names', any(n.startswith('midlayer.') for n in before))
        step.check('drafter_checkpoint renamed it first', fixed.get('changed') is True and (fixed.get('renamed') or 0) > 0,
                   '%s -> %s, %s renamed' % (fixed.get('layout_before'), fixed.get('layout_after'), fixed.get('renamed')))
        step.check('no midlayer.* name left', after and not any(n.startswith('midlayer.') for n in after),
                   sorted(after)[:5])
        self.check_ready(step, run, health, smoke)
        self.check_flags(step, pid, 5)

    def step_benchmark(self, step):
        playbook = REPO / 'playbooks' / 'benchmark.yml'
        if not playbook.exists():
            step.notes.append('playbooks/benchmark.yml does not exist')
            step.check('benchmark playbook present', False)
            return
        report_dir = self.work / 'benchmark'
        if report_dir.exists():
            shutil.rmtree(report_dir)
        run = self.playbook(step, playbook, timeout=STEP_TIMEOUT['benchmark'])
        self.keep_server_log(step)
        step.check('playbook succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        host_dir = report_dir / 'localhost'
        for name in ('report.md', 'results.json', 'chart.svg'):
            if (host_dir / name).exists():
                shutil.copyfile(host_dir / name, step.folder / name)
        step.check('report.md written', (host_dir / 'report.md').exists())
        if (host_dir / 'results.json').exists():
            data = json.loads((host_dir / 'results.json').read_text())
            candidates = data.get('candidates') or data.get('results') or []
            names = [c.get('name') for c in candidates]
            step.check('baseline, depth 3 and depth 5 measured', names == ['baseline', 'depth 3', 'depth 5'], names)
            step.check('no candidate failed', candidates and all(c.get('error') is None for c in candidates),
                       [(c.get('name'), c.get('error')) for c in candidates])
            step.figures['throughput'] = [
                '%s: %s' % (c.get('name'), ', '.join('c%s %s tok/s accept %s' % (
                    r.get('concurrency'), round(r.get('output_throughput') or 0),
                    None if r.get('accept_length') is None else round(r['accept_length'], 2))
                    for r in c.get('runs') or [])) for c in candidates]
            step.figures['best'] = (data.get('best') or {}).get('name')

    # ---------------------------------------------------------------- phase e: API key, rollback
    def secret_vars(self, name, variables):
        """``({variable: key}, path)``: fresh random keys (made once per machine, never written into the bundle)
        and the 0600 vars file ``name`` that carries them to ansible-playbook (never its command line)."""
        folder = self.work / 'secret'
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / name
        if not path.exists():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, 'w') as handle:
                handle.write(''.join('%s: llmops-proof-%s\n' % (v, secrets.token_hex(16)) for v in variables))
        return dict(line.split(': ', 1) for line in path.read_text().splitlines()), path

    def api_key(self):
        """Phase e's API key and its vars file."""
        keys, path = self.secret_vars('api_key.yml', ['sglang_server_api_key'])
        return keys['sglang_server_api_key'], path

    def status(self, step, tag, vars_files=()):
        """status.yml: (run, sglang_server_status, the printed lines)."""
        run = self.playbook(step, REPO / 'playbooks' / 'status.yml', timeout=STEP_TIMEOUT['status'],
                            vars_files=vars_files, tag=tag)
        status = run.fact('sglang_server_status') or {}
        printed = [str(r.get('msg')) for r in run.results('debug') if r.get('msg')]
        step.figures['status_' + tag.replace('-', '_')] = printed
        return run, status, printed

    def check_no_key(self, step, key, what, texts):
        where = [name for name, text in texts if key in text]
        step.check('key in %s' % what if where else 'key in no %s' % what, not where, where)

    def step_apikey(self, step):
        key, key_vars = self.api_key()
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / GOOD),
            'sglang_server_speculative_depth': 5}, STEP_TIMEOUT['apikey'], vars_files=[key_vars])
        self.check_ready(step, run, health, smoke)
        self.check_flags(step, pid, 5)
        self.memo(pid_apikey=pid)
        # The server's own log, read whole (server.log in the bundle is trimmed).
        log = self.log_path.read_text(errors='replace').splitlines() if self.log_path.exists() else []
        args_lines = [line for line in log if 'server_args=' in line and re.search(r'\bapi_key=', line)]
        step.check('server log read', log, self.log_path)
        self.check_no_key(step, key, 'line of the server log', [('line %d' % n, line) for n, line in enumerate(log, 1)])
        step.check("the server's own argument line shows the key redacted",
                   args_lines and all("api_key='<redacted>'" in line for line in args_lines),
                   [re.findall(r'\bapi_key=[^,)]*', line) for line in args_lines][:3])
        for path in (self.log_path, self.work / 'etc' / 'sglang-main.key'):
            mode = oct(path.stat().st_mode & 0o777) if path.exists() else None
            step.check('%s has mode 0600' % path.name, mode == '0o600', mode)
        session = self.server_pid()
        processes = self.server_processes(session) if session else []
        step.figures['server_processes'] = len(processes)
        step.check("the server's session has processes", processes, 'session %s' % session)
        held = process_holding(key.encode())
        step.check("key in no /proc/PID/cmdline nor environ of the server's session",
                   processes and not [h for h in held if h[1] == str(session)], held)
        step.check('key in no /proc/PID/cmdline nor environ on the machine', not held, held)
        self.check_no_key(step, key, 'line of the playbook output nor task result',
                          [('ansible output', '\n'.join(run.lines)), ('events', json.dumps(run.events))])
        bare, status, printed = self.status(step, 'without-key')
        step.check('status without the key: playbook succeeded', bare.rc == 0, 'rc %s' % bare.rc)
        message = str(status.get('msg'))
        step.figures['refused'] = message
        step.check('status without the key: unauthorized', status.get('unauthorized') is True, status)
        step.check('status without the key: the message says HTTP 401 and names sglang_server_api_key',
                   'HTTP 401' in message and 'sglang_server_api_key' in message, message)
        step.check("status without the key: the printed table's refused/why column says HTTP 401",
                   any('HTTP 401' in line for line in printed), printed)
        keyed, status, printed = self.status(step, 'with-key', vars_files=[key_vars])
        step.check('status with the key: playbook succeeded', keyed.rc == 0, 'rc %s' % keyed.rc)
        step.check('status with the key: healthy, authorised, depth 5, the same PID',
                   status.get('healthy') is True and status.get('unauthorized') is False
                   and str(status.get('depth')) == '5' and str(status.get('pid')) == str(pid), status)
        self.check_no_key(step, key, 'status output', [(tag, '\n'.join(r.lines) + json.dumps(r.events))
                                                       for tag, r in (('without key', bare), ('with key', keyed))])
        self.keep_server_log(step)
        self.check_no_key(step, key, 'file of the results bundle', files_text(self.results))

    def step_rollback(self, step):
        key, key_vars = self.api_key()
        before = self.memo().get('pid_apikey')
        good = str(self.models / 'drafters' / GOOD)
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / RANDOM),
            'sglang_server_speculative_depth': 5, 'llmops_rollback': True}, STEP_TIMEOUT['rollback'],
            vars_files=[key_vars])
        checks = [e for e in run.events if e['action'].endswith('wait_for_llm_health') and e['outcome'] != 'skipped']
        step.figures['health_checks'] = ['%s %s: %s' % (e['outcome'], e['result'].get('status'),
                                                        str(e['result'].get('msg') or '')[:200]) for e in checks]
        step.check('playbook failed the host', run.rc != 0, 'rc %s' % run.rc)
        if not step.check('two health checks: the random drafter, then the rollback', len(checks) == 2, len(checks)):
            return
        verdict, back = checks
        message = str(verdict['result'].get('msg') or '')
        accept = (verdict['result'].get('smoke') or {}).get('accept_length')
        step.figures.update(random_accept_length=accept, accept_length=smoke.get('accept_length'))
        step.check('the random drafter failed the floor', verdict['outcome'] == 'failed' and NOT_ACCEPTED in message
                   and accept is not None and accept < FLOOR, '%s, accept %s: %s' % (verdict['outcome'], accept, message))
        result = run.fact('sglang_server_result') or {}
        step.figures.update(rollback_s=result.get('rollback_s'), rollback_ready_s=back['result'].get('elapsed'),
                            failure_to_serving_s=round(back['time'] - verdict['time'], 1))
        step.check('sglang_server_result says rolled_back', result.get('state') == 'rolled_back', result.get('state'))
        failed = failure_messages(run)
        step.check('the play fails with the rollback message',
                   'rolled_back' in failed and 'serving the last good configuration again' in failed, failed[-600:])
        phases = [p.get('phase') for p in back['result'].get('phases') or []]
        step.check('the rollback health check: ready, timeline ends ready',
                   back['result'].get('status') == 'ready' and phases[-1:] == ['ready'], ' -> '.join(map(str, phases)))
        step.check('rolled-back server: accept length >= %.1f' % FLOOR,
                   smoke.get('accept_length') is not None and smoke['accept_length'] >= FLOOR, smoke.get('accept_length'))
        pid = self.server_pid()
        argv = process_argv(pid)
        drafter = argv[argv.index('--speculative-draft-model-path') + 1] if '--speculative-draft-model-path' in argv else None
        step.figures['pid_after'] = pid
        step.check('the running server is a new one (restarted twice)', pid is not None and pid != before,
                   '%s -> %s' % (before, pid))
        step.check("the running server has the good drafter's path", drafter == good, drafter)
        self.check_flags(step, pid, 5)
        step.check('no --api-key on the command line of the rolled-back server', '--api-key' not in argv, argv[-6:])
        step.check('the rolled-back server still refuses requests without the key',
                   self.status(step, 'without-key')[1].get('unauthorized') is True)
        dummy, status, printed = self.status(step, 'with-key', vars_files=[key_vars])
        step.check('status with the key: healthy, depth 5, that PID, accept length >= %.1f' % FLOOR,
                   status.get('healthy') is True and str(status.get('depth')) == '5' and str(status.get('pid')) == str(pid)
                   and status.get('accept_length') is not None and float(status['accept_length']) >= FLOOR, status)
        self.check_no_key(step, key, 'file of the results bundle', files_text(self.results))

    # ---------------------------------------------------------------- phase f: llm_benchmark beside bench_serving
    def step_bench_compare(self, step):
        run, plan, health, smoke, pid = self.deploy(step, {
            'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / GOOD),
            'sglang_server_speculative_depth': 5}, STEP_TIMEOUT['bench_compare'])
        self.check_ready(step, run, health, smoke)
        self.check_flags(step, pid, 5)
        if not step.checks or not all(c['ok'] for c in step.checks):
            return
        self.compare(step, self.models / 'target', COMPARE)

    def compare(self, step, model, settings):
        """bench_compare.py (llm_benchmark beside sglang.bench_serving) against the running server."""
        port = self.env.get('LLMOPS_PROOF_PORT') or '30000'
        cmd = [self.ansible_python, str(H200 / 'bench_compare.py'), '--url', 'http://127.0.0.1:%s' % port,
               '--model', str(model), '--work', str(self.work / 'compare'), '--out', str(step.folder),
               '--collections', str(self.work / 'collections')]
        for key, value in settings.items():
            cmd += ['--' + key.replace('_', '-')] + [str(v) for v in (value if isinstance(value, list) else [value])]
        rc, out = self.command(cmd, timeout=max(30.0, self.left() - RESERVE_S))
        (step.folder / 'bench_compare.log').write_text(out[-60000:])
        step.check('bench_compare.py exit status 0', rc == 0, out.strip().splitlines()[-3:] if out.strip() else rc)
        path = step.folder / 'compare.json'
        data = json.loads(path.read_text()) if path.exists() else {}
        tables = data.get('tables') or {}
        step.check('measured at concurrency %s' % settings['concurrency'],
                   sorted(int(c) for c in tables) == settings['concurrency'], sorted(tables))
        step.check('every llm_benchmark run completed every request', data.get('ours_complete') is True,
                   data.get('ours_errors'))
        step.check('every bench_serving run completed every request', data.get('theirs_complete') is True,
                   data.get('theirs_errors'))
        step.figures['ratio_table'] = (step.folder / 'compare.md').read_text().splitlines() \
            if (step.folder / 'compare.md').exists() else []
        step.figures['output_tok_s_ratios'] = ', '.join(
            'c%s %.2f' % (c, t['output tok/s']['ratio']) for c, t in tables.items() if 'output tok/s' in t)

    # ---------------------------------------------------------------- phase g: two servers behind the router
    def g_pidfiles(self):
        pidfiles = {host: self.work / ('run-%s' % name) / ('sglang-%s.pid' % name) for host, name in G_SERVERS.items()}
        pidfiles['router'] = self.work / 'run-router' / 'sglang-router-main.pid'
        return pidfiles

    def g_pids(self):
        pids = {}
        for host, path in self.g_pidfiles().items():
            try:
                data = json.loads(path.read_text())
                pids[host] = data['pid'] if isinstance(data, dict) else int(data)
            except (OSError, ValueError, KeyError, TypeError):
                pids[host] = None
        return pids

    def g_scheme(self):
        return 'https' if self.front_door().get('tls') else 'http'

    def g_urls(self):
        return {host: '%s://127.0.0.1:%s' % (self.g_scheme(), self.g_ports[host.upper()]) for host in G_SERVERS}

    def g_router(self):
        return '%s://127.0.0.1:%s' % (self.g_scheme(), self.g_ports['ROUTER'])

    def g_auth(self, key='sglang_server_api_key'):
        """``{key, context}`` for a client of phase g's servers and router: none in phase g; in phase fd the key
        named (the inference key by default) and, while they serve HTTPS, an ssl context with the fleet CA."""
        state = self.front_door()
        if not state:
            return {'key': None, 'context': None}
        context = ssl.create_default_context(cafile=str(self.f_tls_dir() / 'ca.crt')) if state.get('tls') else None
        return {'key': self.front_door_keys()[0][key], 'context': context}

    def g_workers(self):
        """url -> is_healthy as the router lists them ({} when it does not answer)."""
        status, text = http_request(self.g_router() + '/workers', method='GET',
                                    **self.g_auth('sglang_router_control_plane_api_key'))
        try:
            return {w['url']: w['is_healthy'] for w in json.loads(text)['workers']} if status == 200 else {}
        except (ValueError, KeyError, TypeError):
            return {}

    def g_wait_both_healthy(self, timeout):
        """Seconds until the router lists both servers healthy, or None."""
        want = dict.fromkeys(self.g_urls().values(), True)
        return wait_until(lambda: self.g_workers() == want, timeout, 0.2)

    def g_playbook(self, step, name, extra, tag='', limit=None, timeout=None):
        """A playbook on inventory-g.yml; in phase fd with its keys (and TLS variables) as 0600 ``-e @file``."""
        return self.playbook(step, REPO / 'playbooks' / name, extra=extra, tag=tag, limit=limit,
                             inventory='inventory-g.yml', timeout=timeout or STEP_TIMEOUT[step.name],
                             vars_files=self.front_door().get('vars_files', ()))

    def g_keep_logs(self, step):
        for host, name in G_SERVERS.items():
            path = self.work / 'log' / ('sglang-%s.log' % name)
            if path.exists():
                target = step.folder / ('server-%s.log' % host)
                shutil.copyfile(path, target)
                trim_file(target, 150, 250)
        router_log = self.work / 'log' / 'sglang-router-main.log'
        if router_log.exists():
            shutil.copyfile(router_log, step.folder / 'router.log')
            trim_file(step.folder / 'router.log', 150, 250)
        apps, gpus, raw = self.nvidia_smi()
        (step.folder / 'nvidia-smi.txt').write_text(raw)
        step.figures['gpu'] = apps + ['GPU %s: %s of %s MiB used' % row for row in gpus]

    def g_health(self, run, host):
        """wait_for_llm_health results of host, in order (skipped ones left out)."""
        return [e for e in run.events if e['action'].endswith('wait_for_llm_health') and e['host'] == host
                and e['outcome'] != 'skipped']

    def g_check_serving(self, step, run, depth, hosts=tuple(G_SERVERS)):
        for host in hosts:
            checks = self.g_health(run, host)
            last = checks[-1]['result'] if checks else {}
            smoke = last.get('smoke') or {}
            step.figures['%s_ready_s' % host] = last.get('elapsed')
            step.figures['%s_accept' % host] = smoke.get('accept_length')
            if not step.check('%s: health ready' % host, last.get('status') == 'ready', last.get('msg') or last.get('status')):
                self.engine_down = 'a server did not become ready in step %s' % step.folder.name
            step.check('%s: accept length >= %.1f' % (host, FLOOR),
                       smoke.get('accept_length') is not None and smoke['accept_length'] >= FLOOR, smoke.get('accept_length'))
            self.check_flags(step, self.g_pids()[host], depth)

    def g_drains(self, run):
        """{host: (seconds, source, reads)} from the drain's own line (roles/sglang_router/tasks/drain.yml)."""
        texts = [str(r.get('msg')) for r in run.results('debug') if 'after it left the router' in str(r.get('msg'))]
        texts.append(' '.join(' '.join(run.lines).split()))
        found = {}
        for text in texts:
            for host, seconds, source, reads in DRAIN_LINE.findall(' '.join(text.split())):
                found.setdefault(host.strip('"\''), (float(seconds), source, int(reads)))
        return found

    def g_rollout(self, step, extra, limit=None, settle=None):
        """deploy.yml under 8 streaming clients through the router: (run, row of figures). ``settle``: a predicate
        waited for (at most 60 s) under the load after the playbook, e.g. a renewed certificate served."""
        pause = G_LOAD['pause_simulate'] if self.simulate else G_LOAD['pause_device']
        with ClientLoad(self.g_router(), 'tiny-llama', G_LOAD['clients'], pause, **self.g_auth()) as load:
            warm = load.wait_sent(G_LOAD['warm_requests'], 60)
            begin = time.monotonic()
            run = self.g_playbook(step, 'deploy.yml', extra, limit=limit)
            end = time.monotonic()
            settled = wait_until(settle, 60) if settle else None
            after = load.wait_sent(load.sent + G_LOAD['after_requests'], 60)
        row = load.row(begin, end)
        row['rollout_s'] = round(end - begin, 1)
        if settle:
            row['settled_after_s'] = settled
        drains = self.g_drains(run)
        row['drain_s'] = ', '.join('%s %.2f (%s, %d reads)' % (h, *drains[h]) for h in sorted(drains)) or 'none'
        step.figures.update(row)
        step.figures['rollout'] = row
        step.check('clients warmed up through the router before the deploy', warm, 'sent %d' % load.sent)
        step.check('clients went on after the deploy', after, 'sent %d' % load.sent)
        # Every request that was not ok, and those of the rollout, at most 20000 lines (the device's are unpaced).
        lo, hi = begin - load.origin, end - load.origin
        kept = [x for x in load.samples if x['outcome'] != 'ok' or lo <= x['start'] <= hi][:20000]
        (step.folder / 'requests.jsonl').write_text(''.join(json.dumps(sample) + '\n' for sample in kept))
        self.g_keep_logs(step)
        return run, row, drains

    def step_g_start(self, step):
        good = str(self.models / 'drafters' / GOOD)
        # Both servers start together (no router yet, so none to drain or register with).
        run = self.g_playbook(step, 'deploy.yml', {
            'sglang_server_speculative_draft_model_path': good, 'sglang_server_speculative_depth': 5,
            'llmops_serial': 2, 'sglang_router_group': 'none_such'}, tag='deploy')
        step.check('deploy.yml (both servers, serial 2) succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        self.g_check_serving(step, run, 5)
        if not step.checks or not all(c['ok'] for c in step.checks):
            self.g_keep_logs(step)
            return
        # Straight to each server first: the attempt of 2026-12-04 saw both servers stop answering at
        # the router's first streams, so a hang is told apart from the router (and diagnosed) here.
        for host, url in self.g_urls().items():
            with ClientLoad(url, 'tiny-llama', 2, 0.0, limit=4, timeout=30, **self.g_auth()) as probe:
                probe.wait_sent(4, 45)
            if not step.check('%s: 4 streams straight to the server completed' % host,
                              probe.sent == 4 and probe.failed == 0 and probe.truncated == 0,
                              'sent %d, failed %d, truncated %d' % (probe.sent, probe.failed, probe.truncated)):
                self.g_diagnose(step)
                self.g_keep_logs(step)
                return
        step.figures['bootstrap'] = self.g_router_venv()
        started = time.monotonic()
        router = self.g_playbook(step, 'router.yml', {}, tag='router')
        step.figures['router_yml_s'] = round(time.monotonic() - started, 1)
        step.check('router.yml succeeded', router.rc == 0, 'rc %s; %s' % (router.rc, failure_messages(router)))
        result = router.fact('sglang_router_result') or {}
        step.figures['router_state'] = result.get('state')
        pid = self.g_pids()['router']
        step.figures['router_pid'] = pid
        step.check('router running (pidfile)', pid is not None and Path('/proc', str(pid)).exists(), pid)
        healthy = self.g_wait_both_healthy(60)
        step.figures['both_healthy_after_s'] = healthy
        step.check('the router lists both servers healthy', healthy is not None, self.g_workers())
        with ClientLoad(self.g_router(), 'tiny-llama', 2, 0.0, limit=8, **self.g_auth()) as probe:
            probe.wait_sent(8, 60)
        if not step.check('8 streams through the router completed', probe.sent == 8 and probe.failed == 0 and probe.truncated == 0,
                          'sent %d, failed %d, truncated %d' % (probe.sent, probe.failed, probe.truncated)):
            self.g_diagnose(step)
        self.memo(g_pids_start=self.g_pids())
        self.g_keep_logs(step)

    def g_diagnose(self, step):
        """Where each server's processes are, for a server that stopped answering: state, CPU
        seconds and kernel wait of each, py-spy's Python stacks (in the shipped wheels) and the GPU's
        utilisation, into hang-<host>.txt."""
        shipped = Path(self.env.get('LLMOPS_PROOF_PYTHONPATH', '')) / 'bin' / 'py-spy'  # the --target install's bin/
        spy = shutil.which('py-spy') or (str(shipped) if shipped.exists() else None)
        for host, pid in self.g_pids().items():
            if host not in G_SERVERS or pid is None:
                continue
            lines = []
            for proc in self.server_processes(pid):
                child = proc.split()[0]
                try:
                    stat = Path('/proc', child, 'stat').read_text()
                    fields = stat[stat.rfind(')') + 2:].split()
                    wchan = Path('/proc', child, 'wchan').read_text()
                    lines.append('== %s state %s utime %s stime %s wchan %s' % (proc[:160], fields[0], fields[11], fields[12], wchan))
                except (OSError, IndexError):
                    lines.append('== %s (gone)' % proc[:160])
                if spy:
                    lines.append(self.command([spy, 'dump', '--pid', child], timeout=30)[1])
            rc, out = self.command(['nvidia-smi', '--query-gpu=utilization.gpu,memory.used', '--format=csv'], timeout=30)
            lines.append('nvidia-smi: ' + out)
            lines.append('py-spy: %s' % (spy or 'not found'))
            (step.folder / ('hang-%s.txt' % host)).write_text('\n'.join(lines) + '\n')
        step.notes.append('diagnostics of the servers in hang-<host>.txt')

    def g_router_venv(self):
        """sglang_router_venv made here where ``python3 -m venv`` cannot make one with pip (Debian's python3
        without python3-venv): a venv without pip, then pip from the router's wheelhouse into it."""
        base = self.env['LLMOPS_PROOF_ROUTER_PYTHON']
        venv = self.work / 'router-venv'
        if (venv / 'bin' / 'pip').exists():
            return 'venv already there'
        probe = self.work / 'venv-probe'
        rc, out = self.command([base, '-m', 'venv', '--clear', str(probe)], timeout=120)
        works = rc == 0 and (probe / 'bin' / 'pip').exists()
        shutil.rmtree(probe, ignore_errors=True)
        if works:
            return 'venv by the role (%s -m venv)' % base
        wheels = sorted(Path(self.env['LLMOPS_PROOF_ROUTER_WHEELS']).glob('pip-*.whl'))
        if not wheels:
            return 'no ensurepip and no pip wheel in the wheelhouse: the role will fail to make its venv'
        rc1, out1 = self.command([base, '-m', 'venv', '--without-pip', str(venv)])
        rc2, out2 = self.command([str(venv / 'bin' / 'python'), str(wheels[0]) + '/pip', 'install', '-q', '--no-index',
                                  str(wheels[0])], timeout=120)
        return 'no ensurepip: venv --without-pip (rc %d), pip from %s (rc %d) %s' % (
            rc1, wheels[0].name, rc2, (out1 + out2).strip()[-300:])

    def g_running(self, step):
        pids = self.g_pids()
        running = all(pid is not None and Path('/proc', str(pid)).exists() for pid in pids.values())
        step.check('both servers and the router run (g_start passed in this machine hold)', running, pids)
        return running and self.g_wait_both_healthy(60) is not None

    def step_g_drain(self, step):
        if not self.g_running(step):
            return
        before = self.g_pids()
        run, row, drains = self.g_rollout(step, {'sglang_server_speculative_depth': 3, 'llmops_serial': 1})
        after = self.g_pids()
        step.check('deploy.yml (depth 5 -> 3, serial 1, drain) succeeded', run.rc == 0,
                   'rc %s; %s' % (run.rc, failure_messages(run)))
        step.check('both servers restarted (new PIDs)', all(after[h] not in (None, before[h]) for h in G_SERVERS),
                   '%s -> %s' % (before, after))
        self.g_check_serving(step, run, 3)
        step.check('each host drained: its idle line printed', sorted(drains) == sorted(G_SERVERS), drains)
        step.check('each drain wait under %.0f s (a live load source, not the 30 s gauges)' % G_DRAIN_MAX_S,
                   drains and all(d[0] < G_DRAIN_MAX_S for d in drains.values()), drains)
        step.check('no request failed', row['failed'] == 0, row['failed'])
        step.check('no stream truncated', row['truncated'] == 0, row['truncated'])
        step.check('at least %d requests' % G_MIN_REQUESTS, row['requests'] >= G_MIN_REQUESTS, row['requests'])
        healthy = self.g_wait_both_healthy(30)
        step.check('the router lists both servers healthy afterwards', healthy is not None, self.g_workers())

    def step_g_nodrain(self, step):
        if not self.g_running(step):
            return
        before = self.g_pids()
        run, row, drains = self.g_rollout(step, {'sglang_server_speculative_depth': 5, 'llmops_serial': 1,
                                                 'sglang_router_group': 'none_such'})
        after = self.g_pids()
        step.check('deploy.yml (depth 3 -> 5, serial 1, router group none_such) succeeded', run.rc == 0,
                   'rc %s; %s' % (run.rc, failure_messages(run)))
        step.check('both servers restarted (new PIDs)', all(after[h] not in (None, before[h]) for h in G_SERVERS),
                   '%s -> %s' % (before, after))
        self.g_check_serving(step, run, 5)
        removed = [e for e in run.events if 'Take this server out of each router' in e['task'] and e['outcome'] != 'skipped']
        step.check('no drain: no idle line, no worker removed from the router', not drains and not removed,
                   '%s; %s' % (drains, [(e['host'], e['outcome']) for e in removed]))
        step.notes.append('without the drain the router finds out by its own health checks (interval 2 s, 2 failures); '
                          'failed %d, truncated %d: what the drain saves' % (row['failed'], row['truncated']))
        healthy = self.g_wait_both_healthy(60)
        step.figures['both_healthy_after_s'] = healthy
        step.check('the router lists both servers healthy again (its own health checks)', healthy is not None,
                   self.g_workers())

    def step_g_rollback(self, step):
        if not self.g_running(step):
            return
        before = self.g_pids()
        good = str(self.models / 'drafters' / GOOD)
        run, row, drains = self.g_rollout(step, {
            'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / RANDOM),
            'sglang_server_speculative_depth': 5, 'llmops_rollback': True, 'llmops_serial': 1}, limit='srv1')
        after = self.g_pids()
        checks = self.g_health(run, 'srv1')
        step.figures['health_checks'] = ['%s %s: %s' % (e['outcome'], e['result'].get('status'),
                                                        str(e['result'].get('msg') or '')[:200]) for e in checks]
        step.check('playbook failed the host', run.rc != 0, 'rc %s' % run.rc)
        step.check('srv1 drained before its stop', 'srv1' in drains, drains)
        if step.check('two health checks on srv1: the random drafter, then the rollback', len(checks) == 2, len(checks)):
            verdict, back = checks
            accept = (verdict['result'].get('smoke') or {}).get('accept_length')
            message = str(verdict['result'].get('msg') or '')
            step.check('the random drafter failed the floor', verdict['outcome'] == 'failed' and NOT_ACCEPTED in message
                       and accept is not None and accept < FLOOR, '%s, accept %s: %s' % (verdict['outcome'], accept, message))
            step.check('the rollback health check: ready', back['result'].get('status') == 'ready', back['result'].get('status'))
            smoke = back['result'].get('smoke') or {}
            step.figures.update(random_accept_length=accept, accept_length=smoke.get('accept_length'),
                                failure_to_serving_s=round(back['time'] - verdict['time'], 1))
            step.check('rolled-back server: accept length >= %.1f' % FLOOR,
                       smoke.get('accept_length') is not None and smoke['accept_length'] >= FLOOR, smoke.get('accept_length'))
        result = run.fact('sglang_server_result') or {}
        step.figures['rollback_s'] = result.get('rollback_s')
        step.check('sglang_server_result says rolled_back', result.get('state') == 'rolled_back', result.get('state'))
        argv = process_argv(after['srv1'])
        drafter = argv[argv.index('--speculative-draft-model-path') + 1] if '--speculative-draft-model-path' in argv else None
        step.check('srv1 runs a new server with the good drafter', after['srv1'] not in (None, before['srv1'])
                   and drafter == good, '%s -> %s, drafter %s' % (before['srv1'], after['srv1'], drafter))
        self.check_flags(step, after['srv1'], 5)
        step.check('srv2 untouched (same PID)', after['srv2'] == before['srv2'], '%s -> %s' % (before['srv2'], after['srv2']))
        registered = [e for e in run.events if 'Put the rolled-back server back into the routers' in e['task']
                      and e['outcome'] != 'skipped']
        step.check('the rolled-back server was put back into the router', registered, len(registered))
        healthy = self.g_wait_both_healthy(30)
        step.check('the router lists both servers healthy afterwards', healthy is not None, self.g_workers())
        step.check('the clients saw no failed request', row['failed'] == 0, row['failed'])
        step.check('no stream truncated', row['truncated'] == 0, row['truncated'])

    def step_g_sampled(self, step):
        """Last, since it may cost the server: one sampled stream (temperature 1.0, OpenAI's default)
        straight to srv2. Every earlier request of the proofs was greedy; in the attempt of
        2026-12-04 the first sampled streams left both servers answering nothing."""
        url = self.g_urls()['srv2']
        with ClientLoad(url, 'tiny-llama', 1, 0.0, limit=1, timeout=40, temperature=1.0) as probe:
            probe.wait_sent(1, 50)
        answered = probe.sent == 1 and probe.failed == 0 and probe.truncated == 0
        step.figures['sampled_stream'] = 'answered' if answered else 'no answer in 40 s'
        if not answered:
            self.g_diagnose(step)
        step.check('a sampled stream straight to srv2 answered (else: diagnosed in hang-srv2.txt)', answered,
                   'sent %d, failed %d, truncated %d' % (probe.sent, probe.failed, probe.truncated))
        self.g_keep_logs(step)

    def step_g_warm_sampled(self, step):
        """srv1 alone, deployed with the role's sampled warm-up on an empty FlashInfer JIT cache, a sampled
        stream straight to it, then a restart (depth 3) with the cache kept: what the warm-up took each time."""
        cache = Path(os.environ.get('FLASHINFER_WORKSPACE_BASE') or Path.home()) / '.cache' / 'flashinfer'
        removed = sorted(str(d) for d in cache.glob('*/*/cached_ops/sampling'))
        for folder in removed:
            shutil.rmtree(folder, ignore_errors=True)
        step.figures['cold_cache'] = 'removed %s' % removed if removed else 'no FlashInfer sampling build in %s' % cache
        good = str(self.models / 'drafters' / GOOD)
        for label, depth in (('cold', 5), ('warm', 3)):
            run = self.g_playbook(step, 'deploy.yml', {
                'sglang_server_speculative_draft_model_path': good, 'sglang_server_speculative_depth': depth,
                'sglang_router_group': 'none_such'}, tag=label, limit='srv1')
            step.check('deploy.yml (srv1, depth %d, %s JIT cache) succeeded' % (depth, label), run.rc == 0,
                       'rc %s; %s' % (run.rc, failure_messages(run)))
            checks = self.g_health(run, 'srv1')
            last = checks[-1]['result'] if checks else {}
            warm = last.get('warm_sampled') or {}
            step.figures['%s_ready_s' % label] = last.get('elapsed')
            step.figures['%s_warm_sampled_s' % label] = warm.get('seconds')
            step.check('%s: the sampled warm-up answered' % label, warm.get('ok') is True, warm)
            with ClientLoad(self.g_urls()['srv1'], 'tiny-llama', 1, 0.0, limit=4, timeout=20, temperature=1.0) as probe:
                probe.wait_sent(4, 40)
            slowest = max((x['seconds'] for x in probe.samples), default=None)
            step.figures['%s_sampled_streams_slowest_s' % label] = slowest
            if not step.check('%s: 4 sampled streams straight to srv1 answered' % label,
                              probe.sent == 4 and probe.failed == 0 and probe.truncated == 0,
                              'sent %d, failed %d, truncated %d' % (probe.sent, probe.failed, probe.truncated)):
                self.g_diagnose(step)
                break
        self.g_keep_logs(step)

    def step_g_stop(self, step):
        pids = self.g_pids()
        step.figures['pids'] = pids
        run = self.g_playbook(step, 'stop.yml', {})
        step.check('stop.yml (both servers) succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        router = pids.get('router')
        how = 'not running'
        if router is not None and Path('/proc', str(router)).exists():
            how = stop_session(router)
        step.figures['router_stop'] = how
        pidfile = self.g_pidfiles()['router']
        if pidfile.exists() and not self.server_processes(router):
            pidfile.unlink()
        left = [p for host in pids for p in (self.server_processes(pids[host]) if pids[host] else [])]
        apps, gpus, raw = self.nvidia_smi()
        (step.folder / 'nvidia-smi.txt').write_text(raw)
        step.check('no process of either server nor of the router left', not left, left)
        step.check('nvidia-smi lists no compute process', not apps, apps)
        step.check('GPU memory back to idle (< 1024 MiB used)', gpus and all(row[1] < 1024 for row in gpus),
                   gpus or raw[-300:])
        step.check('pidfiles removed', not any(path.exists() for path in self.g_pidfiles().values()),
                   [str(p) for p in self.g_pidfiles().values() if p.exists()])
        self.g_keep_logs(step)
        if not left and self.front_door():
            self.memo(front_door={})  # phase fd over: the next phase g runs without keys and TLS

    # ---------------------------------------------------------------- phase fd: the front door (issue 51)
    def front_door(self):
        """Phase fd's state across its calls (memo): ``{vars_files, tls}`` while its servers run, else {}."""
        return self.memo().get('front_door') or {}

    def front_door_keys(self):
        """The inference, admin and control-plane keys and their 0600 vars file."""
        return self.secret_vars('front-door-keys.yml', F_KEYS)

    def f_tls_dir(self):
        return self.work / 'tls'

    def f_tls_vars(self):
        """README "TLS on the wire" as a vars file: each host's certificate of the fleet CA, --enable-ssl-refresh, the
        router's own listener and its client certificate towards the servers (mTLS)."""
        own = str(self.f_tls_dir() / '{{ inventory_hostname }}')
        settings = {'llmops_tls_ca_cert': str(self.f_tls_dir() / 'ca.crt'), 'sglang_server_tls_refresh': True}
        for prefix in ('sglang_server_tls', 'sglang_router_tls', 'sglang_router_client'):
            settings.update({prefix + '_cert': own + '.crt', prefix + '_key': own + '.key'})
        path = self.work / 'front-door-tls.yml'
        path.write_text(json.dumps(settings, indent=1) + '\n')
        return path

    def f_certificates(self, step, tag):
        """playbooks/tls.yml: the fleet CA and a certificate per host (what is missing is made)."""
        run = self.g_playbook(step, 'tls.yml', {'llmops_tls_dir': str(self.f_tls_dir())}, tag=tag, timeout=120)
        step.check('tls.yml (%s) succeeded' % tag, run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        keys = sorted(self.f_tls_dir().glob('*.key'))
        modes = [(path.name, oct(path.stat().st_mode & 0o777)) for path in keys]
        step.check('the CA and host keys written, mode 0600', keys and all(m == '0o600' for dummy, m in modes), modes)

    def step_f_keys(self, step):
        """Phase g's start (both servers together, then router.yml) with the three keys and TLS from the first start,
        so that one start serves the TLS steps too; then what each key may do, and where the keys are."""
        keys, keys_file = self.front_door_keys()
        self.f_certificates(step, 'tls')
        self.memo(front_door={'vars_files': [str(keys_file), str(self.f_tls_vars())], 'tls': True})
        self.step_g_start(step)
        if not step.checks or not all(c['ok'] for c in step.checks):
            return
        self.f_check_wire(step)
        self.f_check_keys(step, keys)
        self.f_check_key_places(step, keys)
        self.g_keep_logs(step)

    def f_check_wire(self, step):
        """The router's listener is TLS only and verified with the fleet CA; the launch files carry the TLS flags."""
        router = self.g_router()
        status, text = http_request(router.replace('https:', 'http:') + '/readiness', method='GET')
        step.check("the router's listener is TLS only (plain HTTP gets no answer)", status is None, '%s %s' % (status, text[:160]))
        status, text = http_request(router + '/readiness', method='GET', context=ssl.create_default_context())
        step.check('a client without the fleet CA refuses the router', status is None and 'CERTIFICATE_VERIFY_FAILED' in text,
                   '%s %s' % (status, text[:160]))
        script = self.work / 'etc' / 'sglang-router-main.sh'
        argv = script.read_text() if script.exists() else ''
        flags = ['--tls-cert-path', '--tls-key-path', '--ca-cert-paths', '--client-cert-path', '--client-key-path']
        step.check('the router verifies the servers with the CA and presents its client certificate (%s)' % ' '.join(flags),
                   all(flag in argv.split() for flag in flags), [flag for flag in flags if flag not in argv.split()])
        for host, pid in self.g_pids().items():
            if host in G_SERVERS:
                argv = process_argv(pid)
                flags = ['--ssl-certfile', '--ssl-keyfile', '--ssl-ca-certs', '--enable-ssl-refresh']
                step.check('%s runs with %s' % (host, ' '.join(flags)), all(flag in argv for flag in flags),
                           [flag for flag in flags if flag not in argv])
        step.notes.append('mTLS: the router presents its client certificate; SGLang 0.5.15.post1 has no flag that makes '
                          'a server require one (README "TLS on the wire"), so the servers do not check it')

    def f_check_keys(self, step, keys):
        """Status codes of each key on the servers' admin endpoints, their inference and the router's /workers."""
        inference, admin, control = (keys[name] for name in F_KEYS)
        context = self.g_auth()['context']
        body = {'model': 'tiny-llama', 'prompt': 'hello', 'max_tokens': 4}
        codes, wrong = [], []
        for host, url in self.g_urls().items():
            for route in F_ADMIN_ROUTES:
                got = [http_request(url + route, key=key, raw=b'{', context=context)[0] for key in (inference, None)]
                codes.append('%s %s: inference key %s, no key %s' % (host, route, got[0], got[1]))
                # The simulator routes few of these: a 404 there is a route it does not play (device: 401).
                wrong += ['%s %s %s' % (host, route, code) for code in got
                          if code not in (401, 403) and not (self.simulate and code == 404)]
            asked = [('/flush_cache', {}, 'admin'), ('/weights_checker', {'action': 'checksum'}, 'admin'),
                     ('/pause_generation', {}, 'admin'), ('/continue_generation', {}, 'admin'),
                     ('/v1/completions', body, 'inference'), ('/v1/completions', body, 'admin'),
                     ('/v1/completions', body, None)]
            for route, payload, who in asked:
                code = http_request(url + route, key={'admin': admin, 'inference': inference}.get(who), body=payload,
                                    context=context, timeout=60)[0]
                codes.append('%s %s: %s %s' % (host, route, '%s key' % who if who else 'no key', code))
            self.f_expect(step, codes, host, {
                '/flush_cache: admin key': 200, '/weights_checker: admin key': 200, '/pause_generation: admin key': 200,
                '/continue_generation: admin key': 200, '/v1/completions: inference key': 200,
                '/v1/completions: admin key': 401, '/v1/completions: no key': 401})
        step.check('every admin endpoint refuses the inference key and no key (401/403)', not wrong, wrong)
        router = self.g_router()
        for route, payload, key, label in (('/v1/completions', body, inference, 'inference key'),
                                           ('/v1/completions', body, control, 'control-plane key'),
                                           ('/v1/completions', body, None, 'no key'),
                                           ('/workers', None, inference, 'inference key'),
                                           ('/workers', None, control, 'control-plane key'),
                                           ('/workers', None, None, 'no key'),
                                           ('/workers', {'url': 'http://10.255.0.1:30000'}, inference, 'inference key, add')):
            code = http_request(router + route, key=key, body=payload, method='POST' if payload else 'GET',
                                context=context, timeout=60)[0]
            codes.append('router %s: %s %s' % (route, label, code))
        self.f_expect(step, codes, 'router', {
            '/v1/completions: inference key': 200, '/v1/completions: control-plane key': 401, '/v1/completions: no key': 401,
            '/workers: inference key': 401, '/workers: control-plane key': 200, '/workers: no key': 401,
            '/workers: inference key, add': 401})
        step.figures['status_codes'] = codes
        if self.simulate:
            step.notes.append('SIMULATED: the simulator answers 404 on the admin routes it does not play')

    @staticmethod
    def f_expect(step, codes, who, want):
        """Checks ``who``'s status codes (lines ``who route: key code`` of ``codes``) against ``want``."""
        got = {line.split(' ', 1)[1].rsplit(' ', 1)[0]: line.rsplit(' ', 1)[1] for line in codes if line.startswith(who + ' ')}
        step.check('%s: %s' % (who, ', '.join('%s %s' % item for item in want.items())),
                   all(got.get(k) == str(v) for k, v in want.items()),
                   {k: got.get(k) for k, v in want.items() if got.get(k) != str(v)})

    def f_check_key_places(self, step, keys):
        """No key in a /proc/PID/cmdline or environ, a log or the bundle; every file that holds one is its owner's."""
        held = {name: process_holding(key.encode()) for name, key in keys.items()}
        step.check('no key of the three in any /proc/PID/cmdline or environ (servers, router, every process)',
                   not any(held.values()), held)
        holders = []
        for top in sorted(self.work.iterdir()):
            if top.name in F_SCAN_SKIP:
                continue
            for path in sorted(top.rglob('*')) if top.is_dir() else [top]:
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
                    data = path.read_bytes()
                    names = [name for name, key in keys.items() if key.encode() in data]
                    if names:
                        holders.append((str(path.relative_to(self.work)), oct(path.stat().st_mode & 0o777), names))
        step.figures['files_holding_a_key'] = ['%s %s %s' % (p, m, ' '.join(n)) for p, m, n in holders]
        logs = [h for h in holders if h[0].endswith(('.log', '.jsonl')) or h[0].startswith(('log/', 'results/'))]
        step.check('no key in any log (servers, router, playbook output, task results)', not logs, logs)
        readable = [h for h in holders if int(h[1], 8) & 0o077]
        step.check('every file holding a key is readable by its owner only (0600)', not readable, readable)

    def step_f_tls(self, step):
        """Phase g's drained rolling deploy (depth 5 -> 3, one host per batch) under the streaming clients, over TLS:
        clients to the router on HTTPS, the router to the servers on HTTPS (verified, with its client certificate)."""
        step.check('the servers and the router serve HTTPS (f_keys passed in this machine hold)',
                   self.front_door().get('tls') is True, self.front_door())
        self.step_g_drain(step)

    def step_f_rotate(self, step):
        """New certificates for both servers (playbooks/tls.yml after the old ones are moved away), written by deploy.yml
        under the streaming clients: served without a restart (--enable-ssl-refresh)."""
        if not self.g_running(step):
            return
        before, context = self.g_pids(), self.g_auth()['context']
        served = {host: served_certificate(url, context) for host, url in self.g_urls().items()}
        for host in G_SERVERS:
            cert = self.f_tls_dir() / ('%s.crt' % host)
            if cert.exists():
                cert.replace(cert.with_suffix('.crt.old'))
        self.f_certificates(step, 'renew')
        now = {}

        def renewed():
            now.update({host: served_certificate(url, context) for host, url in self.g_urls().items()})
            return all(now[host] not in (None, served[host]) for host in G_SERVERS)

        run, row, drains = self.g_rollout(step, {'sglang_server_speculative_depth': 3, 'llmops_serial': 1}, settle=renewed)
        after = self.g_pids()
        step.figures['certificates'] = ['%s: %s -> %s' % (host, served[host], now.get(host)) for host in G_SERVERS]
        step.check('deploy.yml (the renewed certificates, depth 3, serial 1) succeeded', run.rc == 0,
                   'rc %s; %s' % (run.rc, failure_messages(run)))
        step.check('each server serves its renewed certificate', row.get('settled_after_s') is not None, step.figures['certificates'])
        step.check('no server nor the router restarted (same PIDs)', after == before, '%s -> %s' % (before, after))
        step.check('no drain (nothing restarted)', not drains, drains)
        step.check('no request failed', row['failed'] == 0, row['failed'])
        step.check('no stream truncated', row['truncated'] == 0, row['truncated'])
        step.check('the router lists both servers healthy afterwards', self.g_wait_both_healthy(30) is not None, self.g_workers())

    def step_f_bench(self, step):
        """The benchmark (llm_benchmark's client, module_utils/_benchmark.py, as tests/perf/tls_cost.py) through the
        router on TLS, then the same after deploy.yml and router.yml without the TLS variables."""
        if not self.g_running(step):
            return
        measured = {'tls': self.f_measure(step, 'tls')}
        state = self.front_door()
        self.memo(front_door=dict(state, tls=False, vars_files=state['vars_files'][:1]))
        run = self.g_playbook(step, 'deploy.yml', {'sglang_server_speculative_depth': 3, 'llmops_serial': 2,
                                                   'sglang_router_group': 'none_such'}, tag='plain')
        step.check('deploy.yml without the TLS variables (both servers, serial 2) succeeded', run.rc == 0,
                   'rc %s; %s' % (run.rc, failure_messages(run)))
        self.g_check_serving(step, run, 3)
        router = self.g_playbook(step, 'router.yml', {}, tag='router-plain')
        step.check('router.yml without TLS succeeded', router.rc == 0, 'rc %s; %s' % (router.rc, failure_messages(router)))
        step.check('the router lists both servers (http://) healthy', self.g_wait_both_healthy(60) is not None, self.g_workers())
        if all(c['ok'] for c in step.checks):
            measured['plain'] = self.f_measure(step, 'plain')
        if all(measured.get(label) for label in ('tls', 'plain')):
            tls, plain = measured['tls'], measured['plain']
            step.figures['tls_over_plain_output_tok_s'] = round(tls['output_throughput'] / plain['output_throughput'], 3)
            step.figures['tls_over_plain_ttft_p50'] = round(tls['ttft_ms']['p50'] / plain['ttft_ms']['p50'], 3)
        step.notes.append('TLS measured first, plain after the restart (one restart between them, not alternated); '
                          '%(prompts)d prompts of %(input_len)d words, %(output_len)d tokens out, concurrency '
                          '%(concurrency)d, %(rounds)d rounds each' % F_BENCH)
        if self.simulate:
            step.notes.append('SIMULATED: the simulator answers in milliseconds, so TLS weighs far more than on a GPU')
        self.g_keep_logs(step)

    def f_measure(self, step, label):
        """One benchmark through the router (the inference key; the CA while it serves HTTPS): the combined run."""
        _benchmark = self.module_utils('_benchmark')
        ca = str(self.f_tls_dir() / 'ca.crt') if self.front_door().get('tls') else None
        client = _benchmark.Client(self.g_router(), api_key=self.g_auth()['key'], timeout=60, http_library='http.client',
                                   ca_path=ca)
        prompts = _benchmark.synthetic_prompts(F_BENCH['prompts'], F_BENCH['input_len'], F_BENCH['output_len'], 1)
        try:
            run = _benchmark.benchmark(client, 'completions', prompts, [F_BENCH['concurrency']], model='tiny-llama',
                                       warmup_requests=F_BENCH['concurrency'], rounds=F_BENCH['rounds'])['runs'][0]
        except _benchmark.BenchmarkError as exc:
            step.check('%s: the benchmark ran' % label, False, exc)
            return None
        (step.folder / ('bench-%s.json' % label)).write_text(json.dumps(run, indent=1, default=str))
        step.check('%s: every request completed' % label, run['failed'] == 0 and not run.get('truncated'), run.get('errors'))
        step.figures['%s_output_tok_s' % label] = round(run['output_throughput'] or 0, 1)
        step.figures['%s_ttft_p50_ms' % label] = round(run['ttft_ms']['p50'], 2)
        return run

    def module_utils(self, name):
        """A module_utils module of the collection (this checkout, through the proof's collections link)."""
        if str(self.work / 'collections') not in sys.path:
            sys.path.insert(0, str(self.work / 'collections'))
        return importlib.import_module('ansible_collections.llmops.serving.plugins.module_utils.' + name)

    def f_checksums(self):
        """host -> the engine checksum of /weights_checker (the admin key; as the collection's attestation reads it:
        module_utils/_weights.py), or what answered instead."""
        keys, sums, weights = self.front_door_keys()[0], {}, self.module_utils('_weights')
        for host, url in self.g_urls().items():
            status, text = http_request(url + '/weights_checker', key=keys['sglang_server_admin_api_key'],
                                        body={'action': 'checksum'}, context=self.g_auth()['context'], timeout=120)
            try:
                sums[host] = (weights.engine_checksum(json.loads(text)) if status == 200 else None) or 'HTTP %s' % status
            except (ValueError, TypeError, AttributeError):
                sums[host] = 'HTTP %s: %s' % (status, text[:100])
        return sums

    def step_f_attest(self, step):
        """Both replicas report one checksum; srv2 redeployed on a copy of the target with one tensor changed is named
        the outlier by the deploy's attestation and fails its host; srv1 untouched."""
        if not self.g_running(step):
            return
        sums = self.f_checksums()
        step.figures['checksums'] = ['%s: %s' % item for item in sums.items()]
        step.check('both replicas report the same checksum of the weights they loaded',
                   len(set(sums.values())) == 1 and not str(sums['srv1']).startswith('HTTP'), sums)
        modified = self.models / 'target-modified'
        if modified.exists():
            shutil.rmtree(modified)
        shutil.copytree(self.models / 'target', modified)
        changed = change_one_tensor(sorted(modified.glob('*.safetensors'))[0])
        step.figures['modified_tensor'] = '%s (%s): last element %s -> %s' % changed
        before = self.g_pids()
        # No rollback (on by default): it would start srv2 once more on the device (about 80 s) to show what phases e
        # and g showed; the failed srv2 keeps serving the modified weights, out of the router, and its checksum shows it.
        run = self.g_playbook(step, 'deploy.yml', {'sglang_server_model_path': str(modified), 'llmops_serial': 1,
                                                   'sglang_server_speculative_depth': 3, 'llmops_rollback': False,
                                                   'sglang_server_weights_attestation': True}, tag='modified', limit='srv2')
        after, message = self.g_pids(), failure_messages(run)
        attest = [e for e in run.events if e['action'].endswith('sglang_weights_checksum') and e['outcome'] != 'skipped']
        step.figures['attestation'] = ['%s %s: %s' % (e['host'], e['outcome'], str(e['result'].get('msg'))[:300]) for e in attest]
        step.check('deploy.yml --limit srv2 on the modified weights failed the host', run.rc != 0 and attest
                   and attest[-1]['outcome'] == 'failed', 'rc %s; %s' % (run.rc, step.figures['attestation']))
        step.check('the failure names srv2 as the outlier against srv1',
                   re.search(r'srv2 loaded weights whose checksum \w+ differs from \w+ of srv1', message) is not None,
                   message[-600:])
        step.check('srv1 untouched (same PID)', after['srv1'] == before['srv1'], '%s -> %s' % (before['srv1'], after['srv1']))
        state = (run.fact('sglang_server_result') or {}).get('state')
        sums = self.f_checksums()
        step.figures.update(srv2_state=state, srv2_pid='%s -> %s' % (before['srv2'], after['srv2']),
                            checksums_after=['%s: %s' % item for item in sums.items()])
        step.check("srv2 (failed, not rolled back) reports another checksum than srv1's",
                   state != 'rolled_back' and sums['srv2'] != sums['srv1'] and not str(sums['srv2']).startswith('HTTP'), sums)
        self.g_keep_logs(step)

    # ---------------------------------------------------------------- phase p: prefill/decode disaggregation
    def p_pidfiles(self, hosts=P_SERVERS, routers=('main',)):
        pidfiles = {host: self.work / ('run-pd-%s' % host) / ('sglang-pd-%s.pid' % host) for host in hosts}
        for name in routers:
            pidfiles['router' if name == 'main' else 'router_c'] = self.work / 'run-pd-router' / ('sglang-router-%s.pid' % name)
        return pidfiles

    def p_pids(self, hosts=P_SERVERS, routers=('main',)):
        pids = {}
        for host, path in self.p_pidfiles(hosts, routers).items():
            try:
                data = json.loads(path.read_text())
                pids[host] = data['pid'] if isinstance(data, dict) else int(data)
            except (OSError, ValueError, KeyError, TypeError):
                pids[host] = None
        return pids

    def p_url(self, name):
        return 'http://127.0.0.1:%s' % self.p_ports[name.upper()]

    def p_workers(self, router='PD_ROUTER'):
        """url -> (worker_type, is_healthy) as the router lists them ({} when it does not answer)."""
        try:
            with urllib.request.urlopen(self.p_url(router) + '/workers', timeout=5) as resp:
                return {w['url']: (w.get('worker_type'), w['is_healthy']) for w in json.loads(resp.read().decode())['workers']}
        except (OSError, ValueError, KeyError):
            return {}

    def p_expected(self, hosts=P_SERVERS):
        return {self.p_url(h): ('prefill' if h in P_PREFILLS + ['cp'] else 'decode', True) for h in hosts}

    def p_wait_all_healthy(self, timeout, router='PD_ROUTER', hosts=P_SERVERS):
        want = self.p_expected(hosts)
        return wait_until(lambda: self.p_workers(router) == want, timeout, 0.2)

    def p_playbook(self, step, name, extra, tag='', limit=None, timeout=None):
        return self.playbook(step, REPO / 'playbooks' / name, extra=extra, tag=tag, limit=limit,
                             inventory='inventory-p.yml', timeout=timeout or STEP_TIMEOUT[step.name])

    def p_keep_logs(self, step, hosts=P_SERVERS, routers=('main',)):
        for host in hosts:
            path = self.work / 'log' / ('sglang-pd-%s.log' % host)
            if path.exists():
                target = step.folder / ('server-%s.log' % host)
                shutil.copyfile(path, target)
                trim_file(target, 150, 250)
        for name in routers:
            path = self.work / 'log' / ('sglang-router-%s.log' % name)
            if path.exists():
                shutil.copyfile(path, step.folder / ('router-%s.log' % name))
                trim_file(step.folder / ('router-%s.log' % name), 150, 250)
        apps, gpus, raw = self.nvidia_smi()
        (step.folder / 'nvidia-smi.txt').write_text(raw)
        step.figures['gpu'] = apps + ['GPU %s: %s of %s MiB used' % row for row in gpus]

    def p_log_lines(self, host, needle, since=0):
        """Lines of host's server log (from byte ``since``) that hold ``needle``."""
        path = self.work / 'log' / ('sglang-pd-%s.log' % host)
        try:
            with path.open('rb') as handle:
                handle.seek(since)
                text = handle.read().decode(errors='replace')
        except OSError:
            return []
        return [line.strip()[:300] for line in text.splitlines() if needle in line]

    def p_log_sizes(self, hosts=P_SERVERS):
        sizes = {}
        for host in hosts:
            try:
                sizes[host] = (self.work / 'log' / ('sglang-pd-%s.log' % host)).stat().st_size
            except OSError:
                sizes[host] = 0
        return sizes

    def p_check_flags(self, step, host, depth, mode):
        argv = process_argv(self.p_pids([host], ())[host])
        pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith('--')}
        want = {'--speculative-num-draft-tokens': str(depth), '--speculative-num-steps': str(depth - 1),
                '--speculative-eagle-topk': '1', '--nccl-port': self.env['LLMOPS_PROOF_PORT_%s_NCCL' % host.upper()]}
        if mode:
            want.update({'--disaggregation-mode': mode, '--disaggregation-transfer-backend': 'mooncake_tcp'})
        if mode == 'prefill':
            want['--disaggregation-bootstrap-port'] = self.env['LLMOPS_PROOF_PORT_%s_BOOTSTRAP' % host.upper()]
        got = {k: pairs.get(k) for k in want}
        step.check('%s runs with the flags of depth %d%s' % (host, depth, ', %s, mooncake_tcp' % mode if mode else ''),
                   got == want, 'pid %s: %s' % (self.p_pids([host], ())[host], got))

    def p_check_serving(self, step, run, depth, hosts=P_SERVERS, floor=True):
        """Each host's last health check ready; the acceptance floor on the decodes (a prefill decodes nothing)."""
        for host in hosts:
            checks = self.g_health(run, host)
            last = checks[-1]['result'] if checks else {}
            smoke = last.get('smoke') or {}
            step.figures['%s_ready_s' % host] = last.get('elapsed')
            step.figures['%s_accept' % host] = smoke.get('accept_length')
            if not step.check('%s: health ready' % host, last.get('status') == 'ready', last.get('msg') or last.get('status')):
                self.engine_down = 'a server did not become ready in step %s' % step.folder.name
            mode = None if host == 'ref' else ('prefill' if host in P_PREFILLS + ['cp'] else 'decode')
            if floor and mode == 'decode':
                value = smoke.get('accept_length')
                step.check('%s (decode): accept length >= %.1f' % (host, FLOOR), value is not None and value >= FLOOR, value)
            self.p_check_flags(step, host, depth, mode)

    def p_metric(self, host, name):
        """Sum of a Prometheus metric over its label sets on host's /metrics (None without an answer)."""
        try:
            with urllib.request.urlopen(self.p_url(host) + '/metrics', timeout=5) as resp:
                text = resp.read().decode(errors='replace')
        except OSError:
            return None
        total, seen = 0.0, False
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in ('{', ' '):
                try:
                    total += float(line.rsplit(None, 1)[-1])
                    seen = True
                except ValueError:
                    pass
        return total if seen else None

    def p_generate(self, url, text, tokens=32, logprobs=False, timeout=60):
        body = {'text': text, 'sampling_params': {'temperature': 0, 'max_new_tokens': tokens, 'ignore_eos': True}}
        if logprobs:
            body.update(return_logprob=True, top_logprobs_num=2)
        req = urllib.request.Request(url + '/generate', data=json.dumps(body).encode(),
                                     headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode())

    def step_p_mooncake(self, step):
        """The transfer engine SGLang's mooncake_tcp backend imports (mooncake.engine), with the device's torch."""
        if self.simulate:
            step.check('dry run: the simulator moves no KV and needs no transfer engine', True)
            step.notes.append('SIMULATED: mooncake is not imported in the dry run')
            return
        code = ('import importlib.metadata as m, os, torch\n'
                'import mooncake\n'
                'print("dir", os.path.dirname(mooncake.__file__))\n'
                'from mooncake.engine import TransferEngine\n'
                'print("version", m.version("mooncake-transfer-engine-cuda13"), TransferEngine.__name__)\n')
        rc, out = self.command([self.ansible_python, '-c', code], timeout=120)
        (step.folder / 'mooncake.log').write_text(out)
        found = re.search(r'^dir (\S+)', out, re.M)
        if found:
            dummy, ldd = self.command(['ldd', os.path.join(found.group(1), 'engine.so')])
            missing = [line.strip() for line in ldd.splitlines() if 'not found' in line]
            step.figures['engine_so_missing_libs'] = missing
            (step.folder / 'ldd-engine.txt').write_text(ldd)
        version = re.search(r'^version (\S+)', out, re.M)
        step.figures['mooncake'] = version.group(1) if version else None
        step.check('mooncake.engine imports beside the device torch', rc == 0 and version, out.strip()[-600:])

    def step_p_start(self, step):
        good = str(self.models / 'drafters' / GOOD)
        common = {'sglang_server_speculative_draft_model_path': good, 'sglang_server_speculative_depth': 5,
                  'llmops_serial': 2, 'sglang_router_group': 'none_such'}
        # The prefills first, ready before the decodes start (as the standalone probe did; each server takes its memory
        # share from what is free at its start), then the decodes; no router yet (none to drain or register with).
        self.memo(p_depth=5)
        for tag, hosts in (('prefills', P_PREFILLS), ('decodes', P_DECODES)):
            run = self.p_playbook(step, 'deploy.yml', common, tag=tag, limit=','.join(hosts))
            step.check('deploy.yml (%s, serial 2) succeeded' % ', '.join(hosts), run.rc == 0,
                       'rc %s; %s' % (run.rc, failure_messages(run)))
            self.p_check_serving(step, run, 5, hosts)
            if not step.checks or not all(c['ok'] for c in step.checks):
                self.p_keep_logs(step)
                return
        for host in P_DECODES:
            value = step.figures.get('%s_accept' % host)
            step.check('%s: accept length within 5%% of the non-PD figure %.3f' % (host, NONPD_ACCEPT),
                       value is not None and abs(value - NONPD_ACCEPT) <= 0.05 * NONPD_ACCEPT, value)
        step.figures['bootstrap'] = self.g_router_venv()
        started = time.monotonic()
        router = self.p_playbook(step, 'router.yml', {}, tag='router')
        step.figures['router_yml_s'] = round(time.monotonic() - started, 1)
        step.check('router.yml succeeded', router.rc == 0, 'rc %s; %s' % (router.rc, failure_messages(router)))
        # The router names its process sglang::router (its /proc cmdline is that title): its launch script's command.
        script = self.work / 'etc' / 'sglang-router-main.sh'
        argv = script.read_text().split() if script.exists() else []
        step.figures['router_argv'] = [' '.join(argv)[-700:]]
        ports = [self.env['LLMOPS_PROOF_PORT_%s_BOOTSTRAP' % h.upper()] for h in P_PREFILLS]
        want = ['--pd-disaggregation'] + [x for h, port in zip(P_PREFILLS, ports) for x in ('--prefill', self.p_url(h), port)] + [
            x for h in P_DECODES for x in ('--decode', self.p_url(h))]
        step.check('the router runs in PD mode (--pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...)',
                   ' '.join(want) in ' '.join(argv), argv[-14:])
        healthy = self.p_wait_all_healthy(60)
        step.check('the router lists both prefills and both decodes healthy, with their types', healthy is not None,
                   self.p_workers())
        with ClientLoad(self.p_url('PD_ROUTER'), 'tiny-llama', 8, 0.0, limit=16, timeout=60) as probe:
            probe.wait_sent(16, 90)
        step.check('16 streams through the router completed', probe.sent == 16 and probe.failed == 0 and probe.truncated == 0,
                   'sent %d, failed %d, truncated %d' % (probe.sent, probe.failed, probe.truncated))
        try:
            answer = self.p_generate(self.p_url('PD_ROUTER'), 'The quick brown fox', 32)
            meta = answer.get('meta_info') or {}
            step.figures['router_generate_accept'] = meta.get('spec_accept_length')
            step.check('/generate through the router: 32 tokens', len(answer.get('output_ids') or []) == 32,
                       str(answer)[:300])
        except (OSError, ValueError) as exc:
            step.check('/generate through the router: 32 tokens', False, exc)
        transfer = {h: self.p_metric(h, 'sglang:kv_transfer_total_mb_sum') for h in P_PREFILLS}
        step.figures['kv_transfer_total_mb'] = ', '.join('%s %s' % kv for kv in transfer.items())
        if self.simulate:
            step.notes.append('SIMULATED: the simulator moves no KV (kv_transfer_total_mb not checked)')
        else:
            step.check('the prefills counted KV transfers (sglang:kv_transfer_total_mb_sum > 0, a histogram)',
                       sum(v or 0 for v in transfer.values()) > 0, transfer)
        self.memo(p_pids_start=self.p_pids())
        self.p_keep_logs(step)

    def p_running(self, step):
        pids = self.p_pids()
        running = all(pid is not None and Path('/proc', str(pid)).exists() for pid in pids.values())
        step.check('the prefills, the decodes and the router run (p_start passed in this machine hold)', running, pids)
        return running and self.p_wait_all_healthy(60) is not None

    def step_p_roll(self, step):
        if not self.p_running(step):
            return
        before, sizes = self.p_pids(), self.p_log_sizes()
        pause = G_LOAD['pause_simulate'] if self.simulate else G_LOAD['pause_device']
        with ClientLoad(self.p_url('PD_ROUTER'), 'tiny-llama', G_LOAD['clients'], pause) as load:
            warm = load.wait_sent(G_LOAD['warm_requests'], 60)
            begin = time.monotonic()
            # Batches of a prefill and its decode (p1+d1, then p2+d2): the prefill is drained out of the router first;
            # on 0.5.15.post1 a decode that gets requests for a prefill that went away kills its scheduler
            # (decode.py _ensure_prefill_info), so the decode restarts in the same batch, and the drain keeps the
            # router from sending the other decode any request for the stopped prefill.
            # A depth change is a change of speculative settings, which the deploy refuses to roll one batch at a
            # time (issue 48: new prefills would pair with old decodes) unless llmops_pd_mixed_ok: here it says so,
            # and the run shows whether SGLang serves such mixed pairs (depth 3 prefill, depth 5 decode) meanwhile.
            run = self.p_playbook(step, 'deploy.yml', {'sglang_server_speculative_depth': 3, 'llmops_serial': 2,
                                                       'llmops_pd_mixed_ok': True})
            end = time.monotonic()
            after_ok = load.wait_sent(load.sent + G_LOAD['after_requests'], 60)
        row = load.row(begin, end)
        row['rollout_s'] = round(end - begin, 1)
        drains = self.g_drains(run)
        row['drain_s'] = ', '.join('%s %.2f (%s, %d reads)' % (h, *drains[h]) for h in sorted(drains)) or 'none'
        step.figures.update(row)
        step.figures['rollout'] = row
        after = self.p_pids()
        step.check('clients warmed up through the router before the deploy', warm, 'sent %d' % load.sent)
        step.check('clients went on after the deploy', after_ok, 'sent %d' % load.sent)
        step.check('deploy.yml (depth 5 -> 3, serial 2: p1+d1, then p2+d2, llmops_pd_mixed_ok) succeeded', run.rc == 0,
                   'rc %s; %s' % (run.rc, failure_messages(run)))
        if run.rc == 0:
            self.memo(p_depth=3)
        step.check('all four restarted (new PIDs)', all(after[h] not in (None, before[h]) for h in P_SERVERS),
                   '%s -> %s' % (before, after))
        self.p_check_serving(step, run, 3)
        step.check('each server drained: its idle line printed', sorted(drains) == sorted(P_SERVERS), drains)
        step.check('no request failed', row['failed'] == 0, row['failed'])
        step.check('no stream truncated', row['truncated'] == 0, row['truncated'])
        step.check('at least %d requests' % P_MIN_REQUESTS, row['requests'] >= P_MIN_REQUESTS, row['requests'])
        lost = {h: self.p_log_lines(h, 'Lost connection with prefill', sizes.get(h, 0)) for h in P_DECODES}
        step.figures['decode_lost_connection_lines'] = ['%s: %s' % (h, line) for h in P_DECODES for line in lost[h][:5]]
        step.notes.append('decode log lines "Lost connection with prefill" during the rollout: %s (a decode heartbeats '
                          'every prefill it took KV from; the drained prefill had no request left for it)'
                          % ', '.join('%s %d' % (h, len(lost[h])) for h in P_DECODES))
        healthy = self.p_wait_all_healthy(30)
        step.check('the router lists all four healthy afterwards', healthy is not None, self.p_workers())
        lo, hi = begin - load.origin, end - load.origin
        kept = [x for x in load.samples if x['outcome'] != 'ok' or lo <= x['start'] <= hi][:20000]
        (step.folder / 'requests.jsonl').write_text(''.join(json.dumps(sample) + '\n' for sample in kept))
        self.p_keep_logs(step)

    def p_guard(self):
        """The acceptance poller's logic (extensions/eda/plugins/event_source/acceptance_poller.py: its counters and
        Watch) over the decodes, read with urllib here: what the speculation guard would see."""
        import importlib.util  # pylint: disable=import-outside-toplevel
        import types  # pylint: disable=import-outside-toplevel
        if 'aiohttp' not in sys.modules:
            try:
                import aiohttp  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
            except ImportError:
                sys.modules['aiohttp'] = types.ModuleType('aiohttp')  # used only by its async reader, not here
        path = REPO / 'extensions' / 'eda' / 'plugins' / 'event_source' / 'acceptance_poller.py'
        spec = importlib.util.spec_from_file_location('llmops_acceptance_poller', path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def p_guard_read(self, poller, host):
        try:
            with urllib.request.urlopen(self.p_url(host) + '/metrics', timeout=2) as resp:
                return poller.counters(resp.read().decode(errors='replace'))
        except OSError:
            return None

    def p_health(self, host):
        try:
            with urllib.request.urlopen(self.p_url(host) + '/health', timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 'no answer'

    def step_p_kill(self, step):
        if not self.p_running(step):
            return
        poller = self.p_guard()
        watch = poller.Watch([{'host': h, 'url': self.p_url(h), 'floor': FLOOR} for h in P_DECODES], for_s=3.0)
        before, sizes = self.p_pids(), self.p_log_sizes()
        victim = before['p1']
        timeline, events, last = [], [], None
        pause = G_LOAD['pause_simulate'] if self.simulate else G_LOAD['pause_device']
        with ClientLoad(self.p_url('PD_ROUTER'), 'tiny-llama', G_LOAD['clients'], pause) as load:
            load.wait_sent(G_LOAD['warm_requests'], 60)
            watch.round({h: self.p_guard_read(poller, h) for h in P_DECODES}, time.monotonic())
            killed = time.monotonic()
            os.killpg(victim, signal.SIGKILL)
            step.figures['killed'] = 'p1 session %s, SIGKILL' % victim
            # What each side shows, every second for P_KILL_WATCH_S: the servers' /health, their processes, the router's
            # view of its workers, the guard's rounds on the decodes, the clients' failures.
            while time.monotonic() - killed < P_KILL_WATCH_S:
                now = time.monotonic()
                pids = self.p_pids()
                state = {'health': {h: self.p_health(h) for h in P_SERVERS},
                         'alive': {h: bool(self.server_processes(pids[h])) if pids[h] else False for h in P_SERVERS},
                         'router': {url.rsplit(':', 1)[-1]: healthy for url, (dummy, healthy) in self.p_workers().items()},
                         'failed': load.failed, 'truncated': load.truncated}
                for event in watch.round({h: self.p_guard_read(poller, h) for h in P_DECODES}, now):
                    events.append('%.1f s: %s %s %s' % (now - killed, event['alert']['host'], event['alert']['status'],
                                                        event['alert']['annotations']['value']))
                shown = {k: v for k, v in state.items() if k not in ('failed', 'truncated')}
                if shown != last:
                    timeline.append('%.1f s: %s' % (now - killed, json.dumps(state, sort_keys=True)))
                    last = shown
                time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
            step.figures['watch_failed'] = load.failed
            step.figures['watch_truncated'] = load.truncated
            # What the collection's status.yml says meanwhile.
            status = self.p_playbook(step, 'status.yml', {}, tag='status', timeout=120)
            step.figures['status_lines'] = [' '.join(line.split())[:300] for line in status.lines
                                            if not line.startswith('TASK')
                                            and re.search(r'\b(p1|p2|d1|d2|router)\b.*(healthy|down|running|stopped|pairs|worker)', line)][:30]
            # The way back: deploy.yml (p1 was SIGKILLed: it starts again), then, where a decode still fails requests,
            # a forced restart of the decodes (their scheduler died: 0.5.15.post1, fixed upstream in 0.5.17).
            recovering = time.monotonic()
            # At the depth the servers run (p_roll leaves them at 3): the way back changes nothing else.
            depth = {'sglang_server_speculative_depth': self.memo().get('p_depth', 5)}
            run = self.p_playbook(step, 'deploy.yml', dict(depth, llmops_serial=2), tag='recover')
            step.figures['recover_rc'] = run.rc
            probe_from = load.sent
            load.wait_sent(probe_from + 40, 40)
            if any(x['outcome'] != 'ok' for x in load.samples[probe_from:]) or run.rc != 0:
                step.notes.append('after deploy.yml requests still failed (or it failed): the decodes restarted too')
                run2 = self.p_playbook(step, 'deploy.yml', dict(depth, llmops_serial=1, sglang_server_restart=True),
                                       tag='recover-decodes', limit=','.join(P_DECODES))
                step.figures['recover_decodes_rc'] = run2.rc
            healthy = self.p_wait_all_healthy(90)
            back = time.monotonic()
            load.wait_sent(load.sent + G_LOAD['after_requests'], 60)
        kill_s = killed - load.origin
        after_kill = [x for x in load.samples if x['start'] >= kill_s]
        failures = [x for x in after_kill if x['outcome'] != 'ok']
        last_failure = max((x['start'] + x['seconds'] for x in failures), default=None)
        step.figures.update(
            requests_after_kill=len(after_kill), failed_after_kill=sum(x['outcome'] == 'failed' for x in after_kill),
            truncated_after_kill=sum(x['outcome'] == 'truncated' for x in after_kill),
            last_failure_after_kill_s=None if last_failure is None else round(last_failure - kill_s, 1),
            recovery_playbooks_s=round(back - recovering, 1),
            all_four_healthy_in_router_after_kill_s=None if healthy is None else round(back - killed, 1))
        step.figures['timeline'] = timeline[:60]
        step.figures['guard_events'] = events or ['none fired (floor %.1f, 3 s below it, 1 s rounds)' % FLOOR]
        for host in P_DECODES:
            step.figures['%s_log_after_kill' % host] = (
                self.p_log_lines(host, 'Lost connection', sizes.get(host, 0))[:3] +
                self.p_log_lines(host, 'Could not fetch prefill parallel info', sizes.get(host, 0))[:3] +
                self.p_log_lines(host, "has no attribute 'abort'", sizes.get(host, 0))[:3])
        step.check('p1 was killed', not Path('/proc', str(victim)).exists() or not self.server_processes(victim), victim)
        step.check('the pair serves again: all four healthy in the router', healthy is not None, self.p_workers())
        tail = [x for x in load.samples if x['start'] >= back - load.origin]
        step.check('requests through the router succeed again (every one after the recovery)',
                   tail and all(x['outcome'] == 'ok' for x in tail), '%d after, %d not ok' % (
                       len(tail), sum(x['outcome'] != 'ok' for x in tail)))
        (step.folder / 'requests.jsonl').write_text(''.join(json.dumps(x) + '\n' for x in after_kill[:20000]))
        self.p_keep_logs(step)

    def p_stop(self, step, hosts, routers, extra):
        """The router first (SIGTERM to its session), then stop.yml without a router: the drain gate refuses to take a
        router's last prefill or decode out of it, and the router goes away anyway."""
        pids = self.p_pids(hosts, routers)
        step.figures['pids'] = pids
        for name in routers:
            key = 'router' if name == 'main' else 'router_c'
            how = 'not running'
            if pids.get(key) is not None and Path('/proc', str(pids[key])).exists():
                how = stop_session(pids[key])
            step.figures['%s_stop' % key] = how
            pidfile = self.p_pidfiles((), (name,))[key]
            if pidfile.exists() and not self.server_processes(pids.get(key)):
                pidfile.unlink()
        run = self.p_playbook(step, 'stop.yml', dict(extra, sglang_router_group='none_such'))
        step.check('stop.yml (%s) succeeded' % ', '.join(hosts), run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        left = [p for key in pids for p in (self.server_processes(pids[key]) if pids[key] else [])]
        apps, gpus, raw = self.nvidia_smi()
        (step.folder / 'nvidia-smi.txt').write_text(raw)
        step.check('no process of the servers nor of the router left', not left, left)
        step.check('nvidia-smi lists no compute process', not apps, apps)
        step.check('GPU memory back to idle (< 1024 MiB used)', gpus and all(row[1] < 1024 for row in gpus),
                   gpus or raw[-300:])
        step.check('pidfiles removed', not any(path.exists() for path in self.p_pidfiles(hosts, routers).values()),
                   [str(p) for p in self.p_pidfiles(hosts, routers).values() if p.exists()])
        self.p_keep_logs(step, hosts, routers)

    def step_p_stop(self, step):
        self.p_stop(step, P_SERVERS, ('main',), {})

    def step_p_content(self, step):
        """target-varied served by a PD pair behind its own router and by a non-PD server: greedy ids compared."""
        good = str(self.models / 'drafters' / GOOD)
        if not (self.models / 'target-varied' / 'config.json').exists():
            step.check('models/target-varied written (make_models.py --varied-target)', False, self.models)
            return
        common = {'sglang_server_speculative_draft_model_path': good, 'sglang_server_speculative_depth': 5,
                  'llmops_serial': 3, 'sglang_router_group': 'none_such'}
        # The three together (a decode needs no prefill to start; p_start showed the prefill-first order), then the
        # pair's own router.
        hosts = P_CONTENT + ['ref']
        run = self.p_playbook(step, 'deploy.yml', dict(common, llmops_hosts=','.join(hosts)), tag='deploy')
        step.check('deploy.yml (%s) succeeded' % ', '.join(hosts), run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        self.p_check_serving(step, run, 5, hosts, floor=False)
        if not all(c['ok'] for c in step.checks):
            self.p_keep_logs(step, hosts, ('content',))
            return
        router = self.p_playbook(step, 'router.yml', {'sglang_router_group': 'proof_content_routers',
                                                      'sglang_router_worker_group': 'proof_content'}, tag='router')
        step.check('router.yml (router_c in front of cp and cd) succeeded', router.rc == 0,
                   'rc %s; %s' % (router.rc, failure_messages(router)))
        step.check('router_c lists cp and cd healthy', self.p_wait_all_healthy(60, 'PD_ROUTER_C', P_CONTENT) is not None,
                   self.p_workers('PD_ROUTER_C'))
        rows, equal, near_ties, diverged = [], 0, 0, []
        sent = time.monotonic()
        for index, prompt in enumerate(content_prompts(P_PROMPTS)):
            try:
                pd = self.p_generate(self.p_url('PD_ROUTER_C'), prompt, P_TOKENS)
                ref = self.p_generate(self.p_url('REF'), prompt, P_TOKENS, logprobs=True)
            except (OSError, ValueError) as exc:
                rows.append({'prompt': prompt, 'error': str(exc)})
                continue
            a, b = pd.get('output_ids') or [], ref.get('output_ids') or []
            row = {'prompt': prompt, 'pd': a, 'ref': b, 'equal': a == b and len(a) == P_TOKENS}
            if row['equal']:
                equal += 1
            else:
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                top = ((ref.get('meta_info') or {}).get('output_top_logprobs') or [])
                gap = None
                if at < len(top) and top[at] and len(top[at]) >= 2:
                    gap = round(abs(top[at][0][0] - top[at][1][0]), 4)
                row.update(first_difference=at, ref_top2_logprob_gap=gap)
                near_ties += gap is not None and gap < P_NEAR_TIE
                diverged.append('prompt %d at token %d (gap %s)' % (index, at, gap))
            rows.append(row)
        step.figures['compare_s'] = round(time.monotonic() - sent, 1)
        (step.folder / 'content.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
        seqs = [tuple(r['ref']) for r in rows if 'ref' in r]
        distinct_ids = len(set(x for s in seqs for x in s))
        varied = sum(len(set(s)) > 1 for s in seqs)
        step.figures.update(prompts=len(rows), equal=equal, diverged=', '.join(diverged) or 'none', distinct_ids=distinct_ids,
                            sequences_with_several_ids=varied, distinct_sequences=len(set(seqs)))
        step.check('greedy ids through the PD pair equal the non-PD server\'s for >= %d of %d prompts (%d tokens each)'
                   % (P_MIN_EQUAL, P_PROMPTS, P_TOKENS), equal >= P_MIN_EQUAL, '%d equal' % equal)
        step.check('every difference starts at a near tie of the non-PD server (top-2 logprob gap < %.2f)' % P_NEAR_TIE,
                   len(diverged) == near_ties, diverged)
        step.check('the target emits varied tokens (>= 16 distinct ids, most sequences more than one id)',
                   distinct_ids >= 16 and varied >= len(seqs) // 2, '%d distinct ids, %d of %d sequences' % (
                       distinct_ids, varied, len(seqs)))
        # Prompts p and p+1 end in the same word and differ before it: different continuations show that the ids depend
        # on the whole prompt (its KV), not on the last token alone.
        pairs = [(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2) if 'ref' in rows[i] and 'ref' in rows[i + 1]]
        context = sum(x['ref'] != y['ref'] for x, y in pairs)
        step.figures['same_last_word_pairs_that_differ'] = '%d of %d' % (context, len(pairs))
        if self.simulate:
            step.notes.append('SIMULATED: the simulator\'s ids do not depend on the prompt (no content proof in a dry run)')
        else:
            step.check('the ids depend on the whole prompt (pairs that end alike continue differently)', context >= len(pairs) // 2,
                       '%d of %d' % (context, len(pairs)))
        transfer = self.p_metric('cp', 'sglang:kv_transfer_total_mb_sum')
        step.figures['cp_kv_transfer_total_mb'] = transfer
        self.p_keep_logs(step, P_CONTENT + ['ref'], ('content',))

    def step_p_cstop(self, step):
        self.p_stop(step, P_CONTENT + ['ref'], ('content',), {'llmops_hosts': 'proof_content,proof_reference'})

    # ---------------------------------------------------------------- phase h: time to serving, 16 GB model
    def step_h_model(self, step):
        """The 16 GB Llama-3-8B-shaped target and its drafter, written by make_big_model.py with the device's
        torch into the "source" folder that stage.yml copies from. The dry run copies the tiny ones instead."""
        source = self.work / 'big-source'
        if self.simulate:
            for name, origin in (('target', self.models / 'target'), ('drafter', self.models / 'drafters' / GOOD)):
                if not (source / name).exists():
                    shutil.copytree(origin, source / name)
            rc, out = 0, 'dry run: the tiny target and drafter copied to %s' % source
        else:
            rc, out = self.command([self.models_python, str(H200 / 'make_big_model.py'), str(self.models), str(source)],
                                   env=self.models_env, timeout=STEP_TIMEOUT['h_model'])
        (step.folder / 'make_big_model.log').write_text(out[-20000:])
        step.check('model written', rc == 0, out.strip().splitlines()[-1:] if out.strip() else rc)
        size = sum(p.stat().st_size for p in (source / 'target').glob('*.safetensors'))
        step.figures['target_gb'] = round(size / 1e9, 2)
        if not self.simulate:
            step.check('target of at least 16 GB', size >= 16e9, '%.2f GB' % (size / 1e9))

    def step_h_stage(self, step):
        """stage.yml copies both from the source folder to the staged location; a second run copies nothing."""
        source = self.work / 'big-source'
        extra = {'model_stage_models': [{'name': H_MODELS['target'], 'source': str(source / 'target')},
                                        {'name': H_MODELS['drafter'], 'source': str(source / 'drafter')}],
                 'model_stage_dest_root': str(self.work / 'staged'),
                 'model_stage_manifest_cache_dir': str(self.work / 'manifests')}
        for label in ('first', 'again'):
            run = self.playbook(step, REPO / 'playbooks' / 'stage.yml', extra=extra, timeout=STEP_TIMEOUT['h_stage'],
                                tag=label)
            step.check('stage.yml (%s) succeeded' % label, run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
            results = [item for r in run.results('model_stage') for item in r.get('results') or [r]]
            copies = [r for r in results if 'files_copied' in r]
            copied = sum(r.get('bytes_copied') or 0 for r in copies)
            step.figures['%s_copied_gb' % label] = round(copied / 1e9, 2)
            step.figures['%s_seconds' % label] = round(run.seconds, 1)
            if label == 'first':
                manifests = [r for r in results if 'manifest_built' in r]
                step.figures['manifest_s'] = [r.get('seconds') for r in manifests]
                step.figures['copy_bytes_per_s'] = [r.get('bytes_per_second') for r in copies]
                paths = run.fact('model_stage_paths') or {}
                step.check('both staged', sorted(paths) == sorted(H_MODELS.values()), paths)
                self.memo(h_paths={key: paths.get(name) for key, name in H_MODELS.items()})
            else:
                step.check('the rerun copied nothing', copies and copied == 0 and not any(r.get('changed') for r in copies),
                           [(r.get('files_copied'), r.get('changed')) for r in copies])

    def h_engine_paths(self):
        """What the engine imports from: the installed wheels and the device's torch and CUDA libraries."""
        if self.simulate:
            return [str(REPO / 'tests' / 'sim')]
        code = 'import os, torch, nvidia; print(os.path.dirname(torch.__file__)); print(list(nvidia.__path__)[0])'
        rc, out = self.command([self.ansible_python, '-c', code])
        return [str(self.site)] + (out.split() if rc == 0 else [])

    def drop_caches(self, step):
        """Empty the page cache (root on the device); the figure says how much was cached before and after."""
        def cached():
            for line in Path('/proc/meminfo').read_text().splitlines():
                if line.startswith('Cached:'):
                    return round(int(line.split()[1]) / 1e6, 1)
            return None
        before = cached()
        if self.simulate:
            step.figures['page_cache'] = 'not dropped: dry run (not root here)'
            return
        os.sync()
        try:
            Path('/proc/sys/vm/drop_caches').write_text('3\n')
        except OSError as exc:
            step.check('page cache dropped', False, exc)
            return
        step.figures['page_cache'] = 'dropped: %s -> %s GB cached' % (before, cached())

    def h_deploy(self, step, mode, extra):
        """deploy.yml onto the staged 16 GB model with the JIT caches in the proof's persistent folder; the
        figures of the start from wait_for_llm_health and from SGLang's own log lines (h_phases)."""
        source = self.work / 'big-source'
        paths = self.memo().get('h_paths') or {'target': str(source / 'target'), 'drafter': str(source / 'drafter')}
        if not step.check('the model is there (step h_model; h_stage staged it)',
                          all(Path(p).is_dir() for p in paths.values()), paths):
            return
        marker = self.work / 'h-start-marker'
        marker.write_text('')
        run, plan, health, smoke, pid = self.deploy(step, dict({
            'sglang_server_model_path': paths['target'], 'sglang_server_speculative_draft_model_path': paths['drafter'],
            'sglang_server_speculative_depth': 5, 'llmops_proof_jit_cache': str(self.work / 'jit-cache')}, **extra),
            STEP_TIMEOUT['h_' + mode])
        self.check_ready(step, run, health, smoke)
        step.figures['h_mode'] = mode
        warm = [r for r in run.results('async_status') if 'bytes' in r]
        if warm:
            step.figures.update(warmup_gb=round(warm[-1]['bytes'] / 1e9, 2), warmup_s=warm[-1].get('seconds'),
                                warmup_skipped_gb=round((warm[-1].get('skipped_bytes') or 0) / 1e9, 2))
        step.figures['warm_sampled_s'] = (health.get('warm_sampled') or {}).get('seconds')
        # The role rotates the log at each start (sglang-main.log.1): it holds this start only.
        text = self.log_path.read_text(errors='replace') if self.log_path.exists() else ''
        ready = [p.get('elapsed') for p in health.get('phases') or [] if p.get('phase') == 'ready']
        step.figures.update(h_phases(text, ready[-1] if ready else health.get('elapsed')))
        step.figures['written_outside'] = self.h_written_outside(marker)
        return plan

    def h_default_caches(self):
        user = os.environ.get('USER') or str(os.getuid())
        return [Path(os.path.expanduser(p.format(user=user))) for p in H_DEFAULT_CACHES]

    def h_written_outside(self, marker):
        """MB written since ``marker`` under the home folder and /tmp, outside the proof's own folders, by folder
        (two levels below the home folder or /tmp): compiled state the JIT cache variables did not catch."""
        since = marker.stat().st_mtime
        keep = (str(self.work), str(self.state))
        found = {}
        for top in sorted({Path.home(), Path('/tmp')}):
            for root, dirs, files in os.walk(top):
                if root.startswith(keep):
                    dirs[:] = []
                    continue
                for name in files:
                    path = os.path.join(root, name)
                    try:
                        info = os.lstat(path)
                    except OSError:
                        continue
                    if info.st_mtime >= since:
                        key = str(top / Path(*Path(path).relative_to(top).parts[:2]))
                        found[key] = found.get(key, 0) + info.st_size
        return dict((k, round(v / 1e6, 1)) for k, v in sorted(found.items()) if v >= 1e5)

    def h_empty_default_caches(self, step):
        """An all-cold start: the engines' default cache folders emptied too (MB that each held)."""
        if self.simulate:
            step.figures['default_caches_emptied_mb'] = 'not emptied: dry run (this machine\'s own caches)'
            return
        emptied = {}
        ours = [Path(p).resolve() for p in (self.work, self.state, REPO)]
        for path in self.h_default_caches():
            if path.is_dir() and not any(path.resolve() in (p, *p.parents) for p in ours):
                size = sum(f.stat().st_size for f in path.rglob('*') if f.is_file() and not f.is_symlink())
                shutil.rmtree(path, ignore_errors=True)
                emptied[str(path)] = round(size / 1e6, 1)
        step.figures['default_caches_emptied_mb'] = emptied

    def step_h_cold(self, step, sampled=True):
        """All cold: the server stopped, the page cache dropped, the JIT cache folder and the engines' default cache
        folders empty, then deploy.yml."""
        run = self.playbook(step, REPO / 'playbooks' / 'stop.yml', timeout=STEP_TIMEOUT['stop'], tag='stop')
        step.check('stop.yml succeeded', run.rc == 0, 'rc %s; %s' % (run.rc, failure_messages(run)))
        jit = self.work / 'jit-cache'
        shutil.rmtree(jit, ignore_errors=True)
        jit.mkdir(parents=True)
        self.h_empty_default_caches(step)
        self.drop_caches(step)
        plan = self.h_deploy(step, 'cold', {'deploy_warm_start': False, 'sglang_server_warm_sampled': sampled})
        if plan is not None:
            step.check('the server started', plan.get('action') == 'start', plan.get('action'))

    def step_h_cold_ready(self, step):
        """The all-cold start measured to ready: the sampled warm-up (a FlashInfer JIT build after ready, measured
        by step h_cold) left out."""
        self.step_h_cold(step, sampled=False)

    def step_h_warm_ready(self, step):
        """The warm restart measured to ready, without the sampled warm-up after it."""
        self.step_h_warm(step, sampled=False)

    def step_h_warm(self, step, sampled=True):
        """The collection's warm restart: with the page cache dropped while the server still serves, deploy.yml
        restarts it (deploy_warm_start: the model, the drafter and the engine read first; the JIT caches kept)."""
        step.check('a server is running (the warm start is a restart)', self.server_pid(), self.pidfile)
        self.drop_caches(step)
        plan = self.h_deploy(step, 'warm', {'sglang_server_restart': True, 'deploy_warm_start': True,
                                            'deploy_warm_extra_paths': self.h_engine_paths(),
                                            'sglang_server_warm_sampled': sampled})
        if plan is not None:
            step.check('the server restarted', plan.get('action') == 'restart', plan.get('action'))

    def step_h_bench(self, step):
        """llm_benchmark beside bench_serving on the running 16 GB model (depth 5)."""
        paths = self.memo().get('h_paths') or {}
        if step.check('a server is running', self.server_pid(), self.pidfile):
            self.compare(step, paths.get('target'), H_COMPARE)

    # ---------------------------------------------------------------- bundle
    # ---------------------------------------------------------------- phase i: two releases side by side
    def i_wheelhouse(self):
        """The wheelhouse of install.yml: on the device the folder release/ that device_step.sh install unpacked
        (the second release's wheels; the first one's are one folder up, the other --find-links) with the wheel
        that puts the device's torch on a release's path (its own virtualenv on this device, torch not on PyPI's
        index there); in the dry run the simulated releases (tests/sim on the path, SGLANG_SIM_VERSION), built
        as tests/integration/test_release_upgrade.py builds them."""
        sys.path.insert(0, str(REPO / 'tests'))
        from tiny_wheels import build_wheel  # pylint: disable=import-outside-toplevel
        folder = self.work / 'release-wheels' if self.simulate else self.state / 'wheels' / 'release'
        folder.mkdir(parents=True, exist_ok=True)
        if self.simulate:
            for version in I_RELEASES:
                pth = '%s\nimport os; os.environ.setdefault("SGLANG_SIM_VERSION", %r)\n' % (REPO / 'tests' / 'sim', version)
                build_wheel(str(folder), 'sglang', version, 'llmops_sim_release', '', {'llmops-sim-release.pth': pth})
        else:
            name, version = DEVICE_TORCH.split('==')
            pth = 'import site; site.addsitedir(%r)\n' % sysconfig.get_paths()['purelib']
            build_wheel(str(folder), name, version, name.replace('-', '_'), '', {name + '.pth': pth})
        return folder

    def i_vars(self, version):
        """install.yml's and deploy.yml's vars of ``version``: its pins (the wheel list's, installed with --no-deps
        as device_step.sh does), the wheelhouse, the server's python following the release (group_vars), and the
        server's environment without the proof's PYTHONPATH (the virtualenv decides what the server imports)."""
        env = {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1'}
        if self.simulate:
            packages, find_links = [], ''
            env.update(NVSIM_STATE_DIR=self.env['NVSIM_STATE_DIR'], SGLANG_SIM_SPEED=self.env['SGLANG_SIM_SPEED'])
        else:
            lines = (REPO / 'tests' / 'gpu' / I_RELEASES[version]).read_text().splitlines()
            pins = [line.split('#')[0].strip() for line in lines]
            packages = [pin for pin in pins if pin and not pin.lower().startswith(('sglang==', 'ansible-core=='))]
            packages.append(DEVICE_TORCH)
            find_links = ' --find-links %s' % (self.state / 'wheels')
        return {'llmops_proof_releases': True, 'sglang_install_version': version, 'sglang_install_packages': packages,
                'sglang_install_wheelhouse': str(self.i_wheelhouse()), 'sglang_install_wheelhouse_on_host': True,
                'sglang_install_pip_extra_args': '--no-deps' + find_links, 'llmops_proof_env': env,
                'sglang_server_speculative_draft_model_path': str(self.models / 'drafters' / OTHER),
                'sglang_server_speculative_depth': 5}

    def i_python(self, version):
        """The python of ``version``'s virtualenv (module_utils/_releases.py, as the roles name it)."""
        sys.path.insert(0, str(REPO / 'plugins' / 'module_utils'))
        from _releases import venv_path  # pylint: disable=import-outside-toplevel
        packages = self.i_vars(version)['sglang_install_packages']
        return os.path.join(venv_path('sglang', version, packages, str(self.work / 'releases')), 'bin', 'python')

    def i_check_serving(self, step, run, health, smoke, pid, version):
        """Health, smoke and acceptance floor, and the running server: ``version``'s python and engine."""
        self.check_ready(step, run, health, smoke)
        argv = process_argv(pid)
        step.figures['python'] = argv[0] if argv else None
        step.check("the server runs %s's python" % version, argv[:1] == [self.i_python(version)],
                   'pid %s: %s' % (pid, argv[:1]))
        result = run.fact('sglang_server_result') or {}
        step.check('the server reports SGLang %s' % version, result.get('version') == version, result.get('version'))
        self.check_flags(step, pid, 5)

    def step_i_install(self, step):
        for version in list(I_RELEASES) + [I_SECOND]:
            rerun = any(c['check'].startswith('install.yml %s' % version) for c in step.checks)
            tag = version + ('-rerun' if rerun else '')
            run = self.playbook(step, REPO / 'playbooks' / 'install.yml', extra=self.i_vars(version), tag=tag,
                                timeout=STEP_TIMEOUT['i_install'] / 2)
            result = run.fact('sglang_install_result') or {}
            step.figures['install_' + tag] = '%.1f s, %d packages installed' % (run.seconds, len(result.get('installed') or []))
            step.check('install.yml %s%s succeeded' % (version, ' (rerun)' if rerun else ''), run.rc == 0,
                       'rc %s; %s' % (run.rc, failure_messages(run)))
            step.check('%s imports in its own virtualenv' % version,
                       result.get('module_version') == version and result.get('python') == self.i_python(version),
                       '%s in %s' % (result.get('module_version'), result.get('python')))
            if rerun:
                step.check('the rerun installed nothing', result.get('installed') == [] and 'changed=0' in ' '.join(run.recap()),
                           '%s; %s' % (result.get('installed'), run.recap()))
        step.check('both virtualenvs side by side', all(Path(self.i_python(v)).exists() for v in I_RELEASES),
                   [self.i_python(v) for v in I_RELEASES])

    def step_i_deploy(self, step):
        run, plan, health, smoke, pid = self.deploy(step, self.i_vars(I_FIRST), STEP_TIMEOUT['i_deploy'])
        self.i_check_serving(step, run, health, smoke, pid, I_FIRST)
        self.memo(pid_i_first=pid)

    def step_i_upgrade(self, step):
        before = self.memo().get('pid_i_first')
        run, plan, health, smoke, pid = self.deploy(step, self.i_vars(I_SECOND), STEP_TIMEOUT['i_upgrade'])
        self.i_check_serving(step, run, health, smoke, pid, I_SECOND)
        step.check('a new server', pid is not None and pid != before, '%s -> %s' % (before, pid))
        change = '%s -> %s' % (I_FIRST, I_SECOND)
        step.check('the deploy summary names the release change', any(change in line for line in run.lines), change)
        step.check('%s still installed beside it' % I_FIRST, Path(self.i_python(I_FIRST)).exists())
        self.memo(pid_i_second=pid)

    def step_i_rollback(self, step):
        before = self.memo().get('pid_i_second')
        extra = dict(self.i_vars(I_SECOND), llmops_rollback_to='previous')
        run, plan, health, smoke, pid = self.deploy(step, extra, STEP_TIMEOUT['i_rollback'], playbook='rollback.yml')
        pid = self.server_pid()
        result = run.fact('sglang_server_result') or {}
        step.check('sglang_server_result says rolled_back', result.get('state') == 'rolled_back', result.get('state'))
        self.i_check_serving(step, run, health, smoke, pid, I_FIRST)
        step.check('a new server', pid is not None and pid != before, '%s -> %s' % (before, pid))

    def cleanup(self):
        """Stop the server if anything of it is left (recorded as a step); phase g's servers and
        router too, unless this call (g1, g2, h1, h2) passed and the next one goes on with them."""
        if self.keep_running:
            print('the servers (and the router) left running for the next call', flush=True)
            return
        p_main = any(path.exists() for path in self.p_pidfiles().values())
        p_content = any(path.exists() for path in self.p_pidfiles(P_CONTENT + ['ref'], ('content',)).values())
        # phase g's and phase p's servers are not this one
        g_running = any(path.exists() for path in self.g_pidfiles().values()) or p_main or p_content
        if self.pidfile.exists() or (not g_running and self.server_processes(self.server_pid())):
            self.budget = max(self.budget, time.monotonic() - self.started + RESERVE_S + 120)
            self.run_step('stop')
        if any(path.exists() for path in self.g_pidfiles().values()):
            self.budget = max(self.budget, time.monotonic() - self.started + RESERVE_S + 150)
            self.run_step('g_stop')
        if p_main:
            self.budget = max(self.budget, time.monotonic() - self.started + RESERVE_S + 150)
            self.run_step('p_stop')
        if p_content:
            self.budget = max(self.budget, time.monotonic() - self.started + RESERVE_S + 150)
            self.run_step('p_cstop')

    def bundle(self, label):
        self.out.mkdir(parents=True, exist_ok=True)
        tar = self.out / 'h200-proof.tar.gz'
        with tarfile.open(tar, 'w:gz') as archive:
            archive.add(self.results, arcname='h200-proof')
        shutil.copyfile(self.results / 'summary.md', self.out / 'summary.md')
        data = self.summary()
        counts = {k: sum(s['outcome'] == k for s in data['steps']) for k in ('PASS', 'FAIL', 'SKIP')}
        print('phase %s done in %.0f s: %s; bundle %s (%d KiB), summary %s' % (
            label, time.monotonic() - self.started, counts, tar, tar.stat().st_size // 1024, self.out / 'summary.md'))


class ClientLoad:
    """``clients`` threads streaming greedy completions (16 tokens; ``temperature`` 0 as the
    benchmark's: the attempt of 2026-12-04 sent OpenAI's default 1.0 and both servers stopped
    answering, see step g_sampled) through ``url`` until stopped (or
    ``limit`` requests were sent), each waiting ``pause`` s after each request; counts requests,
    failed (HTTP or connection error, timeout) and truncated (no ``[DONE]``) and keeps
    ``{start, ttft, seconds, outcome}`` per request (times relative to the load's start). ``key``: the
    inference key (``Authorization: Bearer``), ``context``: the ssl context of an https ``url`` (phase fd)."""

    def __init__(self, url, model, clients=8, pause=0.0, limit=None, timeout=60, temperature=0.0, key=None, context=None):
        self.url, self.model, self.pause, self.limit, self.timeout = url, model, pause, limit, timeout
        self.temperature, self.context = temperature, context
        self.headers = {'Content-Type': 'application/json'}
        if key:
            self.headers['Authorization'] = 'Bearer ' + key
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.sent = self.failed = self.truncated = self.started = 0
        self.samples, self.origin = [], time.monotonic()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _client in range(clients)]

    def client(self):
        body = json.dumps({'model': self.model, 'prompt': 'hello', 'max_tokens': 16, 'stream': True,
                           'temperature': self.temperature}).encode()
        while not self.stop.is_set():
            with self.lock:
                if self.limit is not None and self.started >= self.limit:
                    return
                self.started += 1
            req = urllib.request.Request(self.url + '/v1/completions', data=body, headers=self.headers)
            start, ttft, outcome = time.monotonic(), None, 'truncated'
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                    for line in resp:
                        if ttft is None and line.startswith(b'data:'):
                            ttft = time.monotonic() - start
                        if line.strip() == b'data: [DONE]':
                            outcome = 'ok'
            except (OSError, ValueError):
                outcome = 'failed'
            with self.lock:
                self.sent += 1
                self.failed += outcome == 'failed'
                self.truncated += outcome == 'truncated'
                self.samples.append({'start': round(start - self.origin, 4), 'ttft': None if ttft is None else round(ttft, 5),
                                     'seconds': round(time.monotonic() - start, 4), 'outcome': outcome})
            self.stop.wait(self.pause)

    def wait_sent(self, count, timeout):
        start = time.monotonic()
        while self.sent < count and time.monotonic() - start < timeout:
            time.sleep(0.05)
        return self.sent >= count

    def row(self, begin, end):
        """Figures of one run: TTFT during [begin, end] (monotonic) and outside it."""
        lo, hi = begin - self.origin, end - self.origin
        during = [s['ttft'] for s in self.samples if lo <= s['start'] <= hi and s['ttft'] is not None]
        outside = [s['ttft'] for s in self.samples if not lo <= s['start'] <= hi and s['ttft'] is not None]
        slowest = max((s['seconds'] for s in self.samples if lo <= s['start'] <= hi), default=None)
        return {'requests': self.sent, 'failed': self.failed, 'truncated': self.truncated,
                'requests_during': sum(1 for s in self.samples if lo <= s['start'] <= hi),
                'ttft_p50_during_ms': ms(percentile(during, 0.5)), 'ttft_p99_during_ms': ms(percentile(during, 0.99)),
                'ttft_p50_outside_ms': ms(percentile(outside, 0.5)), 'ttft_p99_outside_ms': ms(percentile(outside, 0.99)),
                'slowest_request_during_s': slowest}

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def wait_until(predicate, timeout, step=0.5):
    """Seconds until predicate() is true, or None after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return round(time.monotonic() - start, 1)
        time.sleep(step)
    return None


def http_request(url, key=None, body=None, method='POST', context=None, timeout=10, raw=None):
    """``(status, text)`` of one request (``raw``: the body as bytes, else ``body`` as JSON); an HTTP error is an
    answer, no answer (refused, TLS handshake failed, timeout) is ``(None, why)``."""
    headers = {'Content-Type': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer ' + key
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode(errors='replace')
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors='replace')
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return None, '%s: %s' % (type(exc).__name__, exc)


def served_certificate(url, context):
    """The first 16 hex digits of the SHA-256 of the certificate an https URL serves (verified with ``context``),
    or None without a handshake."""
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
            with context.wrap_socket(sock, server_hostname=parts.hostname) as tls:
                return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()[:16]
    except (OSError, ssl.SSLError):
        return None


def change_one_tensor(path):
    """Changes one tensor of a safetensors file in place: the last element of the first layer's MLP down projection
    (the tiny target's carrier and signal are dimensions 0 and 1; its final norm is zero, so greedy decoding is
    unchanged): its sign flipped, or 1/128 where it is 0. ``(name, dtype, bytes before, bytes after)``."""
    width = {'BF16': 2, 'F16': 2, 'F32': 4}
    one_128 = {'BF16': b'\x00\x3c', 'F16': b'\x00\x20', 'F32': b'\x00\x00\x00\x3c'}
    with path.open('r+b') as handle:
        size = struct.unpack('<Q', handle.read(8))[0]
        header = json.loads(handle.read(size))
        names = sorted(n for n, v in header.items() if n != '__metadata__' and v.get('dtype') in width)
        name = next((n for n in names if n.endswith('layers.0.mlp.down_proj.weight')), names[0])
        dtype, (begin, end) = header[name]['dtype'], header[name]['data_offsets']
        at = 8 + size + end - width[dtype]
        handle.seek(at)
        before = handle.read(width[dtype])
        if before.strip(b'\x00\x80'):
            after = before[:-1] + bytes([before[-1] ^ 0x80])
        else:
            after = one_128[dtype]
        handle.seek(at)
        handle.write(after)
    return name, dtype, before.hex(), after.hex()


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else None


def ms(seconds):
    return None if seconds is None else round(1000 * seconds, 1)


def stop_session(pid, grace=20):
    """SIGTERM to the process group (session) of ``pid``, SIGKILL after ``grace`` s: what happened."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError as exc:
        return 'SIGTERM failed: %s' % exc
    start = time.monotonic()
    while time.monotonic() - start < grace:
        try:
            gone = Path('/proc', str(pid), 'stat').read_text().split(') ')[-1][:1] == 'Z'
        except OSError:
            gone = True
        if gone:
            return 'SIGTERM, gone after %.1f s' % (time.monotonic() - start)
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    return 'SIGKILL after %d s' % grace


# -------------------------------------------------------------------- helpers
CONTENT_WORDS = ['river', 'stone', 'quick', 'cloud', 'amber', 'lunar', 'maple', 'orbit', 'pixel', 'delta', 'ember', 'frost']


def content_prompts(count):
    """Phase p's prompts, deterministic: prompts 2k and 2k+1 end in the same words and differ before them."""
    prompts = []
    for i in range(count):
        head = ' '.join(CONTENT_WORDS[(i * 5 + k * 7) % len(CONTENT_WORDS)] for k in range(3 + i % 4))
        prompts.append('%s %d %s' % (head, i // 2, CONTENT_WORDS[(i // 2) % len(CONTENT_WORDS)]))
    return prompts


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def trim_file(path, head, tail):
    lines = path.read_text(errors='replace').splitlines()
    if len(lines) > head + tail:
        lines = lines[:head] + ['... %d lines cut ...' % (len(lines) - head - tail)] + lines[-tail:]
        path.write_text('\n'.join(lines) + '\n')


def failure_messages(run):
    return '; '.join('%s: %s' % (e['task'], str(e['result'].get('msg', ''))[-600:])
                     for e in run.events if e['outcome'] == 'failed')


def process_argv(pid):
    try:
        return Path('/proc', str(pid), 'cmdline').read_bytes().decode(errors='replace').split('\0')
    except (OSError, TypeError):
        return []


def process_holding(secret):
    """``[(pid, session id, 'cmdline'|'environ')]`` of every process whose command line or
    environment holds ``secret`` (bytes); the driver itself holds it only in memory."""
    held = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            stat = Path('/proc', entry, 'stat').read_text()
            session = stat[stat.rfind(')') + 2:].split()[3]
            for name in ('cmdline', 'environ'):
                if secret in Path('/proc', entry, name).read_bytes():
                    held.append((entry, session, name))
        except (OSError, IndexError):
            continue
    return held


def files_text(folder):
    """``[(relative path, text)]`` of every file under ``folder``."""
    return [(str(path.relative_to(folder)), path.read_bytes().decode(errors='replace'))
            for path in sorted(folder.rglob('*')) if path.is_file()]


def safetensors_names(path):
    try:
        with path.open('rb') as handle:
            size = struct.unpack('<Q', handle.read(8))[0]
            return [n for n in json.loads(handle.read(size)) if n != '__metadata__']
    except (OSError, ValueError, struct.error):
        return []


def h_phases(text, ready_s):
    """SGLang's start, from its log lines of one start (0.5.15.post1 wording): the scheduler's imports
    (``server_args=`` to ``Init torch distributed begin``), the target's and the drafter's ``Load weight
    end. elapsed``, the CUDA graph captures (sum of ``... graph end. elapsed``), and the launcher's imports
    (the ready time less ``server_args=`` to ``fired up``; one-second log stamps)."""
    stamps, weights, capture = {}, [], 0.0
    for line in text.splitlines():
        found = LOG_TIME.match(line)
        when = time.mktime(time.strptime(found.group(1), '%Y-%m-%d %H:%M:%S')) if found else None
        for key, needle in (('args', 'server_args='), ('dist', 'Init torch distributed begin'),
                            ('fired', 'The server is fired up')):
            if needle in line and when is not None and key not in stamps:
                stamps[key] = when
        weight = re.search(r'Load weight end\. elapsed=([0-9.]+) s', line)
        if weight:
            weights.append(float(weight.group(1)))
        graph = GRAPH_END.search(line)
        if graph:
            capture += float(graph.group(1))
    figures = {'ready_s': ready_s, 'weights_s': weights[0] if weights else None,
               'draft_weights_s': weights[1] if len(weights) > 1 else None, 'capture_s': round(capture, 2)}
    if 'args' in stamps and 'dist' in stamps:
        figures['scheduler_imports_s'] = stamps['dist'] - stamps['args']
    if 'args' in stamps and 'fired' in stamps and ready_s is not None:
        figures['launcher_imports_s'] = round(ready_s - (stamps['fired'] - stamps['args']), 1)
    return figures


def h_table(starts):
    """Phase h: one row per start, the median per mode, and the targets of issue 36."""
    if not starts:
        return []
    cols = ['ready_s', 'launcher_imports_s', 'scheduler_imports_s', 'weights_s', 'draft_weights_s', 'capture_s',
            'warm_sampled_s', 'warmup_s', 'warmup_gb']
    out = ['', '## Starts of the 16 GB model (phase h)', '', '| start | mode | outcome | ' + ' | '.join(cols) + ' |',
           '| --- ' * (len(cols) + 3) + '|']
    for s in starts:
        out.append('| %s | %s | %s | %s |' % (s['folder'], s['figures']['h_mode'], s['outcome'],
                                              ' | '.join(str(s['figures'].get(c)) for c in cols)))
    medians = {}
    for mode in ('cold', 'warm'):
        rows = [s['figures'] for s in starts if s['figures']['h_mode'] == mode and s['outcome'] == 'PASS']
        medians[mode] = {c: percentile([r[c] for r in rows if isinstance(r.get(c), (int, float))], 0.5) for c in cols}
        out.append('| median of %d | %s | | %s |' % (len(rows), mode, ' | '.join(
            '' if medians[mode][c] is None else '%.2f' % medians[mode][c] for c in cols)))
    cold, warm = medians['cold'], medians['warm']
    for col, bound in (('ready_s', 0.6), ('weights_s', 0.3)):
        if cold.get(col) and warm.get(col) is not None:
            ratio = warm[col] / cold[col]
            verdict = 'met' if ratio <= bound else 'NOT met'
            out.append('- warm/cold %s: %.2f (target at most %.1f): %s' % (col, ratio, bound, verdict))
    return out


def render(data):
    out = ['# H200 proof of llmops.serving: %s' % data.get('mode'), '']
    for key, value in (data.get('versions') or {}).items():
        out.append('- %s: %s' % (key, value))
    out += ['', '| step | outcome | seconds | figures |', '| --- | --- | --- | --- |']
    for s in data['steps']:
        figures = ', '.join('%s %s' % (k, v) for k, v in s['figures'].items() if not isinstance(v, (list, dict)))
        out.append('| %s | %s | %s | %s |' % (s['folder'], s['outcome'], s['seconds'], figures))
    runs = [s for s in data['steps'] if isinstance(s['figures'].get('rollout'), dict)]
    if runs:
        cols = ['requests', 'requests_during', 'failed', 'truncated', 'rollout_s', 'ttft_p50_during_ms',
                'ttft_p99_during_ms', 'ttft_p50_outside_ms', 'ttft_p99_outside_ms', 'slowest_request_during_s', 'drain_s']
        out += ['', '## Rollouts behind the router (8 streaming clients)', '',
                '| run | outcome | ' + ' | '.join(cols) + ' |', '| --- ' * (len(cols) + 2) + '|']
        for s in runs:
            out.append('| %s | %s | %s |' % (s['folder'], s['outcome'],
                                             ' | '.join(str(s['figures']['rollout'].get(c)) for c in cols)))
    out += h_table([s for s in data['steps'] if s['figures'].get('h_mode')])
    for s in data['steps']:
        out += ['', '## %s: %s' % (s['folder'], s['outcome'])]
        out += ['- [%s] %s%s' % ('x' if c['ok'] else ' ', c['check'], (': ' + c['detail']) if c['detail'] else '')
                for c in s['checks']]
        out += ['- note: %s' % n for n in s['notes']]
        for key, value in s['figures'].items():
            if isinstance(value, (list, dict)) and value:
                out += ['', '%s:' % key, '```'] + (
                    [str(v) for v in value] if isinstance(value, list) else [json.dumps(value, indent=1)]) + ['```']
    return '\n'.join(out) + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description='H200 proof of llmops.serving (tests/gpu/README.md)')
    parser.add_argument('--simulate', action='store_true', help='SGLang simulator and nvidia-smi stand-in')
    parser.add_argument('what', nargs='*', default=['all'],
                        help='phases a, b, c, d (SGLang 0.5.11 installed), e, f, g (device: g1, g2, g3), h (device: h1, h2, h3), '
                             'i (device: i1, i2, i3), p (device: p1, p2, p3), fd (device: fd1, fd2), '
                             'all (a, b, c; '
                             'default) or step names: %s' % ', '.join(STEP_TIMEOUT))
    args = parser.parse_args(argv)
    steps, label = [], ' '.join(args.what)
    for item in args.what:
        if item == 'all':
            steps += PHASES['a'] + PHASES['b'] + PHASES['c']
        elif item in PHASES:
            steps += PHASES[item]
        elif item in STEP_TIMEOUT:
            steps.append(item)
        else:
            parser.error('unknown phase or step %r' % item)
    proof = Proof(args.simulate)

    def terminate(signum, frame):
        raise KeyboardInterrupt('signal %d' % signum)

    signal.signal(signal.SIGTERM, terminate)
    proof.prepare(fresh=args.what[0] in ('all', 'a'))
    seen, outcomes = set(), []
    try:
        for name in steps:
            if name == 'models' and (name in seen or proof.models_done()):
                continue  # once per call, and not again after it passed on this machine
            seen.add(name)
            outcomes.append(proof.run_step(name).outcome)
        # Phase g's servers and router (phase h's server) stay up for the next call (g1 -> g2 -> g3, h1 -> h2
        # -> h3, or a skipped step named alone) when this call ran a g (h) step, not the stop, and nothing failed.
        proof.keep_running = (any(n.startswith(('g_', 'h_', 'i_', 'p_', 'f_')) for n in steps)
                              and not {'g_stop', 'stop', 'p_stop', 'p_cstop'} & set(steps)
                              and bool(outcomes) and all(o in ('PASS', 'SKIP') for o in outcomes))
    except KeyboardInterrupt as exc:
        print('interrupted (%s): stopping the server' % exc, flush=True)
        proof.keep_running = False
    finally:
        proof.cleanup()
        proof.bundle(label)
    return 0 if all(s['outcome'] == 'PASS' for s in proof.summary()['steps']) else 1


if __name__ == '__main__':
    sys.exit(main())
