# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated ``python -m sglang.launch_server`` (TEST DOUBLE: no model runs, no GPU is used).

Start-up follows the recorded 0.5.15.post1 log: imports, argument parsing, weight loading
(port closed), CUDA graph capture (port closed), HTTP up with /health 503 during warm-up,
then 200 and ``The server is fired up and ready to roll!``. See README.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings

import nvsim
from sglang import __version__
from sglang import _adaptive, _args, _dist, _drafter, _flags, _http, _pd, _weights
from sglang._engine import IDLE_REFRESH_S, Engine

PHASES = ('imports', 'load', 'graphs', 'warmup')
DEFAULT_PHASES = {'imports': 2.0, 'load': 3.0, 'graphs': 2.0, 'warmup': 4.0}
TERM_DRAIN_SECONDS = 1.0
FAULTS = ('oom', 'health_flap', 'slow_health', 'warmup_fail')
PREFILL_TOKENS = ('[4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, '
                  '352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, '
                  '2816, 3072, 3328, 3584, 3840, 4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192]')
GB = 1024.0
# Memory a scheduler holds beyond mem_fraction_static * total (CUDA context, graphs, activations):
# the H200 recordings at --mem-fraction-static 0.3 show 45242-45254 MiB for 0.3 * 143771 = 43131.
OVERHEAD_MIB = 2117
# tqdm progress bars as the recorded logs have them: every update starts with a carriage return.
LOADING = ('\rMulti-thread loading shards:   0%% Completed | 0/1 [00:00<?, ?it/s]'
           '\rMulti-thread loading shards: 100%% Completed | 1/1 [00:00<00:00, %.2fit/s]\n')
# Printed once per process, in the first capture, by nvidia-cutlass-dsl (harmless, as recorded).
CUTE_DSL_WALK = 'Unexpected error during package walk: cutlass.cute.experimental'
# Up to 0.5.11 (recorded on the H200) the target is loaded, gets its KV cache and its CUDA
# graphs before the drafter is loaded; the KV and capture lines are worded differently.
TARGET_FIRST_UNTIL = (0, 5, 12)
MINUTES = ' This can take up to several minutes.'


class Fatal(Exception):
    """A start-up failure: ``text`` is the last line of the traceback (``RuntimeError: ...``)."""

    def __init__(self, text, where='scheduler'):
        super().__init__(text)
        self.text = text
        self.where = where


class Config:
    """Simulator settings from the environment (SGLANG_SIM_*)."""

    def __init__(self, environ):
        self.version = environ.get('SGLANG_SIM_VERSION') or '0.5.15.post1'
        self.speed = float(environ.get('SGLANG_SIM_SPEED') or 1.0)
        self.idle_refresh = float(environ.get('SGLANG_SIM_IDLE_REFRESH_S') or IDLE_REFRESH_S)
        self.phases = dict(DEFAULT_PHASES)
        for item in (environ.get('SGLANG_SIM_PHASES') or '').split(','):
            if '=' in item:
                key, value = item.split('=', 1)
                if key.strip() not in PHASES:
                    raise SystemExit('SGLANG_SIM_PHASES: unknown phase %r (known: %s)' % (key, ', '.join(PHASES)))
                self.phases[key.strip()] = float(value)
        self.fault = environ.get('SGLANG_SIM_FAULT') or None
        self.crash = self.hang = None
        if self.fault:
            kind, dummy, phase = self.fault.partition(':')
            if kind in ('crash', 'hang') and phase in PHASES:
                setattr(self, kind, phase)
            elif self.fault not in FAULTS:
                raise SystemExit('SGLANG_SIM_FAULT: unknown fault %r (crash:<phase>, hang:<phase>, %s; phases: %s)'
                                 % (self.fault, ', '.join(FAULTS), ', '.join(PHASES)))
        self.quality_file = environ.get('SGLANG_SIM_QUALITY_FILE') or None
        # The first N /health requests answer 503 whatever the phase: a wait that lasts N
        # probes on a loaded machine as on an idle one (phase durations are wall-clock).
        self.unhealthy_probes = int(environ.get('SGLANG_SIM_UNHEALTHY_PROBES') or 0)
        orphan = environ.get('SGLANG_SIM_ORPHAN_SECONDS')
        self.orphan_seconds = float(orphan) if orphan else 3.0 * self.speed

    def seconds(self, phase, share=1.0):
        return self.phases[phase] * share * self.speed


class Logger:
    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, message):
        with self.lock:
            self.stream.write(time.strftime('[%Y-%m-%d %H:%M:%S] ') + message + '\n')
            self.stream.flush()

    def raw(self, text):
        with self.lock:
            self.stream.write(text)
            self.stream.flush()


class Server(_http.Counters):
    def __init__(self, config, args, log):
        super().__init__()
        self.config = config
        self.args = args
        self.log = log
        self.version = config.version
        self.spec = args['speculative_algorithm'] is not None
        self.draft_tokens = args['speculative_num_draft_tokens'] if self.spec else 1
        self.children = []
        self.status = 'starting'
        self.engine = None
        self.httpd = None
        self.context_length = args['context_length'] or _args.read_model_config(args['model_path']).get(
            'max_position_embeddings', _args.DEFAULT_CONTEXT_LENGTH)
        self.max_total_num_tokens = 0
        self.memory_usage = None
        self.drafter = None
        self.started = time.time()
        self.stopping = False
        self.paused = False     # /pause_generation until /continue_generation
        self.unhealthy = False  # a /health generation timed out (until one succeeds)
        # the release's HTTP facts (tests/releases/fixtures): whether it routes /ready, what
        # the API key leaves free, what node ranks >= 1 serve
        self.http = _flags.releases.load(_flags.fixture_version(self.version))['http']
        self.health_calls = 0
        self.deprecations = _flags.version_tuple(self.version) >= (0, 5, 15)
        self.target_first = _flags.version_tuple(self.version) < TARGET_FIRST_UNTIL
        self.cutlass_walked = False
        self.group = None
        self.adaptive = None
        # --disaggregation-mode prefill|decode (_pd.py); None in SGLang's default mode ('null')
        self.pd = _pd.PD(self) if args.get('disaggregation_mode') in ('prefill', 'decode') else None
        # the answer of /weights_checker (_weights.py), from the weights read at load, where the release routes it
        self.weights_checksum = None

    def metrics_text(self):
        return _http.metrics_text(self)

    # ------------------------------------------------------------ helpers
    def pause(self, phase, share=1.0):
        if self.config.hang == phase:
            while True:
                time.sleep(3600)
        time.sleep(self.config.seconds(phase, share))

    def crash_point(self, phase):
        if self.config.crash == phase:
            raise Fatal('RuntimeError: simulated crash during %s (SGLANG_SIM_FAULT=%s)' % (phase, self.config.fault))

    # ------------------------------------------------------------ GPUs
    def gpu_indexes(self):
        gpus = nvsim.load_gpus()
        if gpus is None or gpus['fault'] in ('missing', 'no_devices'):
            raise Fatal('RuntimeError: No CUDA GPUs are available')
        if gpus['fault'] == 'nvml_error':
            raise Fatal('RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before '
                        'calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported '
                        'display driver / cuda driver combination')
        visible = list(range(gpus['count']))
        env = os.environ.get('CUDA_VISIBLE_DEVICES')
        if env is not None:
            visible = []
            for item in env.split(','):
                if not item.strip().isdigit() or int(item) >= gpus['count']:
                    break
                visible.append(int(item))
        if not visible:
            raise Fatal('RuntimeError: No CUDA GPUs are available')
        tp = self.local_ranks()
        first, step = self.args['base_gpu_id'], self.args['gpu_id_step']
        wanted = [first + rank * step for rank in range(tp)]
        if wanted[-1] >= len(visible):
            raise Fatal('torch.AcceleratorError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously '
                        'reported at some other API call, so the stacktrace below might be incorrect.')
        return gpus, [visible[i] for i in wanted]

    def local_ranks(self):
        """TP ranks on this node: --tp-size counts the GPUs of every node (--nnodes)."""
        return max(1, self.args['tp_size'] // max(1, self.args['nnodes']))

    def join_nodes(self):
        """Multi-node only: the rendezvous at --dist-init-addr (see _dist.py)."""
        a = self.args
        group = _dist.Group(a['nnodes'], a['node_rank'], a['dist_init_addr'], a['dist_timeout'], self.local_ranks(),
                            self.peer_lost)
        try:
            group.join()
        except _dist.RendezvousError as exc:
            raise Fatal(str(exc))
        self.group = group

    def peer_lost(self, rank):
        """Another node rank died: this one stays up but useless, as NCCL leaves it (sglang#3099): rank 0's
        /health answers 503 from now on (SGLang's health check times out on a stuck scheduler), a
        dummy /health of a rank >= 1 keeps answering 200."""
        if not self.stopping:
            self.status = 'broken'

    def free_mib(self, gpus):
        own = set(c.pid for c in self.children)
        memory = nvsim.gpu_memory(gpus, nvsim.live_holders(), exclude_pids=own)
        return dict((i, memory[i][1]) for i in memory)

    def check_gpus(self):
        """SGLang's checks while torch distributed starts: CUDA present, memory free and balanced."""
        gpus, indexes = self.gpu_indexes()
        free = self.free_mib(gpus)
        for rank, index in enumerate(indexes):
            if free[index] < 1024:
                raise Fatal(_oom_text(index, gpus['total_mib'], free[index], 2048))
        if len(indexes) > 1:
            lowest = min(free[i] for i in indexes) / GB
            for index in indexes:
                local = free[index] / GB
                if lowest < local * 0.9:
                    raise Fatal('RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. '
                                'min_per_gpu_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r'
                                % (round(lowest, 2), round(local, 2), local * 0.9))
        return gpus, indexes, free

    def spawn_children(self, indexes):
        """Scheduler processes (one per TP rank), like SGLang's ``sglang::scheduler_TP<n>``, then the detokenizer.

        Only the schedulers hold GPU memory (``hold`` pairs them with the GPUs in order).
        """
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env['PYTHONPATH'] = here + os.pathsep + env.get('PYTHONPATH', '')
        env['SGLANG_SIM_ORPHAN_SECONDS'] = str(self.config.orphan_seconds)
        titles = ['sglang::scheduler_TP%d' % rank if len(indexes) > 1 else 'sglang::scheduler' for rank in range(len(indexes))]
        for title in titles + ['sglang::detokenizer']:
            child = subprocess.Popen([title, '-m', 'sglang._scheduler', str(os.getpid())], executable=sys.executable, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            child.title = title
            self.children.append(child)

    def hold(self, indexes, mib_per_rank):
        for child, index, mib in zip(self.children, indexes, mib_per_rank):
            nvsim.write_holder({index: int(mib)}, child.title, pid=child.pid)

    def kill_children(self):
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
            nvsim.remove_holder(child.pid)

    # ------------------------------------------------------------ start-up
    def startup(self):
        a, log = self.args, self.log
        if self.spec and self.target_first:
            log('Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.')
        log('server_args=%s' % _args.server_args_repr(a))
        log('Using default HuggingFace chat template with detected content format: string')
        if self.spec:
            draft = a['speculative_draft_model_path']
            folder = draft if os.path.isdir(draft) else os.path.dirname(draft)
            if not os.path.exists(os.path.join(folder, 'generation_config.json')):
                log("Failed to load generation config for %s: %s does not appear to have a file named generation_config.json. "
                    "Checkout 'https://huggingface.co/%s/tree/main' for available files.. Proceeding without generation config."
                    % (draft, draft, draft))
        self.pause('load', 0.3)
        log('Init torch distributed begin.')
        if a['nnodes'] > 1:
            self.join_nodes()
        self.spawn_children(range(self.local_ranks()))
        gpus, indexes, free = self.check_gpus()
        local = indexes[0]
        log('Init torch distributed ends. elapsed=0.23 s, mem usage=0.09 GB')
        total = gpus['total_mib']
        weights = _weights_mib(a['model_path']) / a['tp_size']
        self.crash_point('load')
        self.pause('load', 0.4)
        avail = free[local] / GB
        log('Load weight begin. avail mem=%.2f GB' % avail)
        self.log.raw(LOADING % 189.86)
        elapsed = _read_weights(a['model_path'])
        if '/weights_checker' in self.http['routes']:
            self.weights_checksum = _weights.checksum_answer(_weight_files(a['model_path']), a['tp_size'],
                                                             a.get('pp_size') or 1, a.get('dp_size') or 1)
        archs = _args.read_model_config(a['model_path']).get('architectures') or ['LlamaForCausalLM']
        log('Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB.'
            % (elapsed, archs[0], avail - weights / GB, weights / GB))
        self.hold(indexes, [weights] * len(indexes))
        if self.spec and not self.target_first:
            self.load_drafter(avail - weights / GB)
        self.pause('load', 0.3)
        # KV cache: SGLang 0.5.x sizes it from the memory it found at its own start (the `total_gpu_memory`
        # its model runner is given is what torch distributed saw available), keeps (1 - mem_fraction_static)
        # of that and fills the rest. Alone on a GPU that base is the whole GPU; beside another server
        # (or a holder) it is what the others left, so a second server at 0.3 starts with 0.3 of the rest.
        others = [total - nvsim.RESERVED_MIB - free[i] for i in indexes]
        base = [total - other for other in others]
        rest = min(free[i] - weights - b * (1 - a['mem_fraction_static']) for i, b in zip(indexes, base))
        if rest <= 0:
            raise Fatal('RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.')
        if self.config.fault == 'oom':
            raise Fatal(_oom_text(local, total, free[local] - weights, rest + 2048))
        # One token costs K and V (bf16) of every layer, target and drafter (one layer) alike.
        layers, per_layer = _kv_shape(a['model_path'], a['tp_size'])
        drafter_layers = 1 if self.spec else 0
        tokens = int(rest * 1024 * 1024 / (2 * per_layer * (layers + drafter_layers)))
        # --max-total-tokens caps the pool (ModelRunner: min of the profiled count and the cap), and
        # only the capped pool is allocated: the rest of the fraction stays free for other processes.
        cap = a['max_total_tokens']
        if cap is not None and cap > tokens:
            log('max_total_tokens=%d is larger than the profiled value %d. Use the profiled value instead.' % (cap, tokens))
        capped = cap is not None and cap < tokens
        if capped:
            tokens = cap
        self.max_total_num_tokens = tokens
        kv_gb = 2 * tokens * per_layer * (layers + drafter_layers) / 1024.0 ** 3
        hold = [(weights + kv_gb * GB if capped else max(weights, b * a['mem_fraction_static'])) + OVERHEAD_MIB for b in base]
        self.hold(indexes, hold)
        self.memory_usage = {'weight': round(weights / GB, 2), 'kvcache': round(kv_gb, 2), 'token_capacity': tokens, 'graph': 0.04}
        avail -= weights / GB
        if self.target_first:
            left = self.target_first_start(avail, tokens, per_layer, layers)
        else:
            avail = self.kv_cache_lines(avail, tokens, per_layer, [layers] + [drafter_layers] * drafter_layers)
            left = self.capture_graphs(avail)
        log('max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, context_len=%d, '
            'available_gpu_mem=%.2f GB' % (tokens, a['chunked_prefill_size'], a['max_prefill_tokens'],
                                           a['max_running_requests'] or 4096, self.context_length, left))
        if not self.target_first:
            log('Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False hierarchical=False '
                'streaming_wrapped=False')

    def kv_cache_lines(self, avail, tokens, per_layer, layer_counts):
        """The KV cache lines of each model (layer count); returns the memory left."""
        for count in layer_counts:
            k_gb = tokens * per_layer * count / 1024.0 ** 3
            avail -= 2 * k_gb
            if self.target_first:
                self.log('Using KV cache dtype: torch.bfloat16')
                self.log('KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB' % (tokens, k_gb, k_gb))
            else:
                self.log('KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: %.2f GB, V size: %.2f GB'
                         % (tokens, k_gb, k_gb))
            self.log('Memory pool end. avail mem=%.2f GB' % avail)
        return avail

    def target_first_start(self, avail, tokens, per_layer, layers):
        """0.5.11's order: target KV cache and graphs, then the drafter's load, KV cache and graphs."""
        bs = self.args['cuda_graph_config']['decode']['bs']
        avail = self.kv_cache_lines(avail, tokens, per_layer, [layers])
        target = [('cuda graph', MINUTES, ['Capture cuda graph bs %s' % bs], 0.04),
                  ('piecewise CUDA graph', '', ['Capture cuda graph num tokens %s' % PREFILL_TOKENS,
                                                'Compiling a graph for dynamic shape takes 0.10 s'], 0.13)]
        avail = self.target_first_captures(target, avail)
        self.crash_point('graphs')
        if self.spec:
            self.load_drafter(avail)
            avail = self.kv_cache_lines(avail, tokens, per_layer, [1])
            drafter = [('draft cuda graph', MINUTES, [], 0.06), ('draft extend cuda graph', MINUTES, [], 0.03)]
            avail = self.target_first_captures(drafter, avail)
        return avail

    def target_first_captures(self, steps, avail):
        for name, note, lines, used in steps:
            self.log('Capture %s begin.%s avail mem=%.2f GB' % (name, note, avail))
            for line in lines:
                self.log(line)
            self.cutlass_walk()
            self.pause('graphs', 0.25)
            avail -= used
            self.log('Capture %s end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB.'
                     % (name, self.config.seconds('graphs', 0.25), used, avail))
        return avail

    def cutlass_walk(self):
        """nvidia-cutlass-dsl's own logger line, then SGLang's copy of it: once, in the first capture (0.5.11 and 0.5.15)."""
        if self.cutlass_walked:
            return
        self.cutlass_walked = True
        self.log.raw('%s,%03d - CUTE_DSL - WARNING - [handle_import_error] - %s\n'
                     % (time.strftime('%Y-%m-%d %H:%M:%S'), int(time.time() * 1000) % 1000, CUTE_DSL_WALK))
        self.log(CUTE_DSL_WALK)

    def load_drafter(self, avail):
        a, log = self.args, self.log
        log('SPECULATIVE_MOE_RUNNER_BACKEND is not initialized, using auto backend')
        log('SPECULATIVE_MOE_A2A_BACKEND is not initialized, using none backend')
        log('Init torch distributed begin.')
        log('Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB')
        log('Load weight begin. avail mem=%.2f GB' % avail)
        try:
            self.drafter = _drafter.judge(a['speculative_draft_model_path'], self.version)
        except (OSError, ValueError, KeyError) as exc:
            raise Fatal('OSError: cannot read the drafter checkpoint %s: %s' % (a['speculative_draft_model_path'], exc))
        if self.drafter['crash']:
            raise Fatal(self.drafter['crash'])
        self.log.raw(LOADING % 478.97)
        log('Load weight end. elapsed=0.01 s, type=%s, avail mem=%.2f GB, mem usage=0.00 GB.' % (self.drafter['architecture'], avail))
        if a.get('speculative_adaptive'):
            try:
                self.adaptive = _adaptive.Adaptive(self.version, a['speculative_num_steps'], a['speculative_adaptive_config'])
            except (OSError, ValueError) as exc:
                raise Fatal('%s: %s' % (type(exc).__name__, exc))
            log('AdaptiveSpeculativeParams initialized: %s' % self.adaptive.describe())

    def capture_graphs(self, avail):
        a, log = self.args, self.log
        bs = a['cuda_graph_config']['decode']['bs']
        n = self.draft_tokens
        # (name, detail, GB used): the recorded graphs' memory
        steps = [('target prefill', 'backend=breakable, num_tokens=%s' % PREFILL_TOKENS, 0.15)]
        if self.spec:
            steps += [('target verify', 'backend=full, num_tokens_per_bs=%d, bs=%s' % (n, bs), 0.04),
                      ('draft prefill', 'backend=breakable, num_tokens=%s' % PREFILL_TOKENS, 0.12),
                      ('draft decode', 'backend=full, num_tokens_per_bs=1, bs=%s' % bs, 0.04),
                      ('draft extend', 'backend=full, num_tokens_per_bs=%d, bs=%s' % (n, bs), 0.04)]
        else:
            steps += [('target decode', 'backend=full, num_tokens_per_bs=1, bs=%s' % bs, 0.04)]
        for number, (name, detail, used) in enumerate(steps):
            log('Capture %s CUDA graph begin. %s, avail mem=%.2f GB' % (name, detail, avail))
            if 'num_tokens=[' in detail:
                label, items = 'Capturing num tokens (num_tokens=%d avail_mem=%.2f GB)', _int_list(detail, 'num_tokens')
            else:
                label, items = 'Capturing batches (bs=%d avail_mem=%.2f GB)', _int_list(detail, 'bs')
            labels = [label % (item, avail - used * k / len(items)) for k, item in enumerate(reversed(items))]
            self.log.raw(_progress('', 0, len(items)) + _progress(labels[0], 0, len(items)))
            self.cutlass_walk()
            self.pause('graphs', 1.0 / len(steps))
            if number == len(steps) - 1:
                self.crash_point('graphs')
            self.log.raw(''.join(_progress(text, k, len(items)) for k, text in enumerate(labels))
                         + _progress(labels[-1], len(items), len(items)) + '\n')
            avail -= used
            log('Capture %s CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB.'
                % (name, self.config.seconds('graphs', 1.0 / len(steps)), used, avail))
        return avail

    def quality(self):
        if not self.spec:
            return 0.0
        return self.drafter['quality']

    def serve(self):
        a, log = self.args, self.log
        multi_rank = a['nnodes'] > 1 and a['node_rank'] >= 1
        self.engine = Engine(self.config.speed, self.draft_tokens, self.quality(), a['max_running_requests'] or 4096, log,
                             a['decode_log_interval'], a['random_seed'], self.config.quality_file, self.adaptive,
                             self.config.idle_refresh)
        if self.pd is not None:
            self.engine.on_gauges = self.pd.refresh_gauges
            try:
                self.pd.start()
            except OSError as exc:
                raise Fatal('OSError: [Errno %d] error while attempting to bind on address (%r, %d): %s'
                            % (exc.errno or 0, a['host'], a['disaggregation_bootstrap_port'], exc.strerror or exc))
        try:
            tls = {'certfile': a.get('ssl_certfile'), 'keyfile': a.get('ssl_keyfile'), 'ca_certs': a.get('ssl_ca_certs'),
                   'refresh': a.get('enable_ssl_refresh')}
            self.httpd = _http.make_server(self, a['host'], a['port'], dummy=multi_rank, tls=tls)
        except OSError as exc:
            log("ERROR:    [Errno %d] error while attempting to bind on address ('%s', %d): %s"
                % (exc.errno or 0, a['host'], a['port'], (exc.strerror or str(exc)).lower()))
            self.kill_tree()
        log('INFO:     Started server process [%d]' % os.getpid())
        log('INFO:     Waiting for application startup.')
        if not _tokenizer_has(a['tokenizer_path'] or a['model_path'], ('yes', 'no')):
            log('Using fallback token IDs for yes/no (9693/2152)')
        log('INFO:     Application startup complete.')
        log('INFO:     Uvicorn running on %s://%s:%d (Press CTRL+C to quit)'
            % ('https' if a.get('ssl_certfile') else 'http', a['host'], a['port']))
        threading.Thread(target=self.httpd.serve_forever, name='http', daemon=True).start()
        if multi_rank:
            self.status = 'ready'
            return
        self.crash_point('warmup')
        # SGLang's warm-up thread first waits for /model_info, then sends one /generate.
        _http.access_log(self, '127.0.0.1:43440', 'GET', '/model_info', 200)
        self.pause('warmup')
        if self.config.fault == 'warmup_fail':
            log('Initialization failed. warmup error: Traceback (most recent call last):\n'
                '  File "%s", line 1, in _wait_and_warmup\n'
                'AssertionError: res=<Response [500]>, res.text=\'{"object":"error","message":"Internal server error '
                '(SGLANG_SIM_FAULT=warmup_fail)","type":"InternalServerError","param":null,"code":500}\'\n' % __file__)
            self.kill_tree()
        if self.status == 'broken':  # a node rank died: the warm-up generation never returns (NCCL)
            while True:
                time.sleep(3600)
        req = self.engine.submit(26, 8)
        while not req.done:
            req.next_chunk(1.0)
        _http.access_log(self, '127.0.0.1:43444', 'POST', '/generate', 200)
        self.status = 'ready'
        log('The server is fired up and ready to roll!')

    # ------------------------------------------------------------ stopping
    def kill_tree(self):
        self.log('kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d' % (os.getpid(), os.getpid()))
        self.kill_children()
        os.kill(os.getpid(), signal.SIGKILL)

    def fail(self, fatal):
        frame = traceback.format_stack(limit=3)
        text = 'Traceback (most recent call last):\n%s%s\n' % (''.join(frame), fatal.text)
        self.log('Scheduler hit an exception: %s' % text)
        self.log('Received sigquit from a child process. It usually means the child failed.')
        self.kill_tree()

    def on_term(self, signum, frame):
        if self.stopping:
            return
        self.stopping = True
        self.log('SIGTERM received. signum=None frame=None. Draining requests and shutting down...')
        # SGLang drains before it ends its children: a stopper that signals the whole process
        # group finds every child still alive (as recorded), not gone before its signal.
        time.sleep(TERM_DRAIN_SECONDS * self.config.speed)
        self.kill_children()
        self.log('Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].')
        os._exit(0)


def _int_list(detail, key):
    """The integers of ``key=[...]`` in a capture line's detail."""
    inside = detail.split(key + '=[', 1)[1].split(']', 1)[0]
    return [int(item) for item in inside.split(',')]


def _progress(label, done, total):
    """One tqdm update (no newline), as SGLang's capture loops write it."""
    blocks = ('\u2588' * (10 * done // total)).ljust(10)
    rate = '00:00<00:00, 30.00it/s' if done else '00:00<?, ?it/s'
    return '\r%s%3d%%|%s| %d/%d [%s]' % (label + ': ' if label else '', 100 * done // total, blocks, done, total, rate)


def _weight_files(model_path):
    if not os.path.isdir(model_path):
        return []
    return sorted(os.path.join(model_path, name) for name in os.listdir(model_path)
                  if name.endswith(('.safetensors', '.bin')))


def _read_weights(model_path):
    """Seconds to read every byte of the weight files, as SGLang's loader does (its elapsed= figure):
    the one part of a start that takes the disk's and the page cache's real time, not a scripted pause."""
    started = time.monotonic()
    for path in _weight_files(model_path):
        with open(path, 'rb', buffering=0) as handle:
            while handle.read(8 << 20):
                pass
    return time.monotonic() - started


def _weights_mib(model_path):
    return sum(os.path.getsize(path) for path in _weight_files(model_path)) / 1024.0 / 1024.0


def _kv_shape(model_path, tp_size):
    """(layers, bytes of K for one token in one layer on one rank) from the model's config.json."""
    config = _args.read_model_config(model_path)
    heads = config.get('num_attention_heads') or 32
    kv_heads = max(1, (config.get('num_key_value_heads') or heads) // tp_size)
    head_dim = config.get('head_dim') or (config.get('hidden_size') or 4096) // heads
    return config.get('num_hidden_layers') or 32, kv_heads * head_dim * 2


def _tokenizer_has(folder, words):
    """Whether tokenizer.json's vocabulary holds every word as one token (unknown: assume it does)."""
    try:
        with open(os.path.join(folder, 'tokenizer.json'), encoding='utf-8') as f:
            vocab = json.load(f)['model']['vocab']
    except (OSError, ValueError, KeyError, TypeError):
        return True
    if isinstance(vocab, list):  # Unigram: [token, score] pairs
        vocab = [item[0] for item in vocab]
    return all(word in vocab for word in words)


def _oom_text(index, total_mib, free_mib, want_mib):
    return ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity of %.2f GiB '
            'of which %.2f GiB is free. Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the allocated '
            'memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but '
            'unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  '
            'See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)'
            % (want_mib / GB, index, total_mib / GB, max(free_mib, 0) / GB, 0.5))


def main(argv=None):
    config = Config(os.environ)
    log = Logger(sys.stderr)
    sys.stderr.write('SGLang SIMULATOR (llmops.serving test double, not SGLang): version %s, speed %s, GPUs from %s\n'
                     % (config.version, config.speed, nvsim.state_dir()))
    if config.crash == 'imports':
        time.sleep(config.seconds('imports', 0.5))
        sys.stderr.write('Traceback (most recent call last):\n  File "<frozen runpy>", line 198, in _run_module_as_main\n'
                         'ImportError: simulated crash during imports (SGLANG_SIM_FAULT=%s)\n' % config.fault)
        return 1
    if config.hang == 'imports':
        while True:
            time.sleep(3600)
    time.sleep(config.seconds('imports'))
    if _flags.version_tuple(config.version) >= (0, 5, 11):  # recorded in 0.5.11 and 0.5.15
        warnings.warn(
            "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.\n"
            "  Example: sglang serve --model-path <model> [options]", UserWarning, stacklevel=1)
    namespace = _flags.build_parser(config.version).parse_args(argv)
    try:
        args = _args.resolve(namespace, log)
    except _args.ServerArgsError as exc:
        sys.stderr.write('Traceback (most recent call last):\n  File "%s", line 1, in __post_init__\nValueError: %s\n' % (__file__, exc))
        return 1
    server = Server(config, args, log)
    signal.signal(signal.SIGTERM, server.on_term)
    signal.signal(signal.SIGINT, server.on_term)
    try:
        server.startup()
        server.serve()
    except Fatal as fatal:
        server.fail(fatal)
    while True:
        time.sleep(3600)
