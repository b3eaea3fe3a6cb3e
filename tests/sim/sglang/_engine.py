# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Batched decode loop of the simulated SGLang (TEST DOUBLE; the formulas are in README.md).

One scheduler thread runs steps. A step either prefills every waiting request (each gets
its first token) or decodes one verify step for every running request. Step time (ms, at
SGLANG_SIM_SPEED=1):

    prefill:  T_BASE + K_PREFILL * new_prompt_tokens
    decode:   T_BASE + K_VERIFY * B * N + K_TREE * B * N^2 + (N - 1) * T_DRAFT

with B running requests and N = speculative_num_draft_tokens (N = 1 without speculation).
A verify step accepts draft k (k = 0 .. N-2) with probability quality * DECAY^k, stopping
at the first rejection; the request gets accepted + 1 tokens.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

from ._drafter import parse_quality
from ._metrics import RequestMetrics

T_BASE = 15.0
K_PREFILL = 0.005
K_VERIFY = 0.02
K_TREE = 0.005
T_DRAFT = 0.2
DECAY = 0.98
WORDS = ('This', ' is', ' simulated', ' output', ' from', ' the', ' SGLang', ' test', ' double', '.')


def step_ms(batch, draft_tokens):
    n = draft_tokens
    return T_BASE + K_VERIFY * batch * n + K_TREE * batch * n * n + (n - 1) * T_DRAFT


def expected_accept_length(quality, draft_tokens):
    total, p = 1.0, 1.0
    for k in range(draft_tokens - 1):
        p *= quality * DECAY ** k if quality < 1.0 else 1.0
        total += p
    return total


def token_text(index):
    return WORDS[index % len(WORDS)]


class QualityFile:
    """SGLANG_SIM_QUALITY_FILE: while this file exists, the quality it holds replaces the drafter's
    (a running server's acceptance length changes without a restart, as when traffic or the target
    changes under a drafter). Read again when its modification time changes."""

    def __init__(self, path, quality):
        self.path, self.drafter_quality = path, quality
        self.stamp, self.quality = None, quality

    def current(self):
        if not self.path:
            return self.drafter_quality
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self.stamp, self.quality = None, self.drafter_quality
            return self.quality
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp != self.stamp:
            try:
                with open(self.path, encoding='utf-8') as f:
                    self.quality = parse_quality(f.read())
                self.stamp = stamp
            except ValueError:
                pass  # being written: keep the previous quality, read it again next step
        return self.quality


class Request:
    def __init__(self, prompt_tokens, max_new_tokens, stream=False, counted=True):
        self.rid = uuid.uuid4().hex
        self.stream = stream    # outputs reach the tokenizer as they are made (else only at the end)
        self.counted = counted  # health-check generations are not in /metrics
        self.received_mono = time.monotonic()
        self.last_output = None
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max(1, int(max_new_tokens))
        self.output = 0
        self.verify_ct = 0
        self.accepted = 0
        self.proposed = 0
        self.histogram = []
        self.chunks = []
        self.cond = threading.Condition()
        self.done = False
        self.received = time.time()
        self.finished = None

    def push(self, count, done):
        with self.cond:
            self.chunks.append(count)
            self.output += count
            self.done = done
            if done:
                self.finished = time.time()
            self.cond.notify_all()

    def next_chunk(self, timeout=None):
        """Block until a chunk is available; return (token count, done) or None on timeout."""
        with self.cond:
            if not self.chunks and not self.done:
                self.cond.wait(timeout)
            if not self.chunks:
                return None if not self.done else (0, True)
            count = self.chunks.pop(0)
            return count, self.done and not self.chunks


IDLE_REFRESH_S = 30.0  # real seconds, as SGLang's: not scaled by SGLANG_SIM_SPEED (SGLANG_SIM_IDLE_REFRESH_S sets it)


class Engine:
    def __init__(self, speed, draft_tokens, quality, max_running, log, decode_log_interval=40, seed=0,
                 quality_file=None, adaptive=None, idle_refresh=IDLE_REFRESH_S):
        self.speed = speed
        self.idle_refresh = idle_refresh
        # --speculative-adaptive (_adaptive.Adaptive): the steps of each verify pass per batch size
        self.adaptive = adaptive
        self.draft_tokens = draft_tokens
        self.quality = QualityFile(quality_file, quality)
        self.max_running = max_running
        self.log = log
        self.decode_log_interval = decode_log_interval
        self.rng = random.Random(seed)
        self.cond = threading.Condition()
        self.waiting = []
        self.running = []
        self.clock = 0.0
        self.metrics = RequestMetrics()
        self.flush()
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.last_gen_throughput = 0.0
        self.avg_spec_accept_length = None
        self._interval = [0, 0, 0, 0, time.monotonic()]  # steps, tokens, verifies, accepted, start
        # (running, queued) as the /metrics gauges show them: SGLang sets them when its scheduler
        # logs a batch (a prefill, every decode_log_interval decode steps) and when it has been idle
        # for IDLE_REFRESH_S (seen on the H200: 30.0-30.2 s after a drain), not as requests finish.
        self.gauges = (0, 0)
        self.on_gauges = None  # PD mode: its queue gauges are set with these (_pd.PD.refresh_gauges)
        self._logged = time.monotonic()
        threading.Thread(target=self._loop, name='scheduler', daemon=True).start()

    def flush(self):
        """/flush_cache: forget the acceptance counters (they include warm-up traffic)."""
        self.avg_spec_accept_length = None
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0

    def submit(self, prompt_tokens, max_new_tokens, stream=False, counted=True):
        return self.submit_many([prompt_tokens], max_new_tokens, stream, counted)[0]

    def submit_many(self, prompts, max_new_tokens, stream=False, counted=True):
        """Queue requests together (a batched /generate): they are prefilled in the same step."""
        reqs = [Request(p, max_new_tokens, stream, counted) for p in prompts]
        with self.cond:
            self.waiting.extend(reqs)
            self.cond.notify()
        return reqs

    def _sleep(self, ms):
        now = time.monotonic()
        deadline = max(self.clock, now) + ms * self.speed / 1000.0
        self.clock = deadline
        if deadline > now:
            time.sleep(deadline - now)

    def _loop(self):
        while True:
            with self.cond:
                while not self.waiting and not self.running:
                    idle = time.monotonic() - self._logged
                    if idle >= self.idle_refresh:
                        self._set_gauges(0)
                        idle = 0.0
                    self.cond.wait(max(0.05, self.idle_refresh - idle))
                room = self.max_running - len(self.running)
                new, self.waiting = self.waiting[:room], self.waiting[room:]
            if new:
                self._prefill(new)
            else:
                self._decode()

    def _prefill(self, new):
        tokens = sum(r.prompt_tokens for r in new)
        self._sleep(T_BASE + K_PREFILL * tokens)
        self._set_gauges(len(self.running), batch=len(new))
        self.log('Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: 0.00, #running-req: %d, '
                 '#queue-req: %d, #pending-token: 0, cuda graph: True, input throughput (token/s): %.2f'
                 % (len(new), tokens, len(self.running), len(self.waiting), tokens / max(1e-9, (T_BASE * self.speed / 1000.0))))
        finished = False
        for req in new:
            done = req.max_new_tokens <= 1
            self._push(req, 1, done)
            if done:
                self._finish(req)
                finished = True
            else:
                self.running.append(req)
        self._overlap_tail(finished)

    def _push(self, req, count, done):
        req.push(count, done)
        if req.counted and req.stream:
            self.metrics.output(req, count, time.monotonic())

    def _finish(self, req):
        if req.counted:
            self.metrics.finished(req, time.monotonic())

    def _decode(self):
        batch = list(self.running)
        n = self.adaptive.steps(len(batch)) + 1 if self.adaptive else self.draft_tokens
        self._sleep(step_ms(len(batch), n))
        produced = verifies = accepted_total = 0
        finished = False
        quality = self.quality.current()
        accepted_per_req = []
        for req in batch:
            accepted = 0
            if n > 1:
                while accepted < n - 1 and self.rng.random() < (quality * DECAY ** accepted if quality < 1.0 else 1.0):
                    accepted += 1
                req.verify_ct += 1
                req.accepted += accepted
                req.proposed += n - 1
                while len(req.histogram) <= accepted:
                    req.histogram.append(0)
                req.histogram[accepted] += 1
                verifies += 1
                accepted_total += accepted
            accepted_per_req.append(accepted)
            count = min(accepted + 1, req.max_new_tokens - req.output)
            produced += count
            done = req.output + count >= req.max_new_tokens
            self._push(req, count, done)
            if done:
                self.running.remove(req)
                self._finish(req)
                finished = True
        if self.adaptive:
            self.adaptive.update(len(batch), accepted_per_req)
        self._count_decode(batch, produced, verifies, accepted_total)
        self._overlap_tail(finished)

    def _overlap_tail(self, finished):
        """SGLang's overlap scheduler has already launched the next decode forward when a request
        finishes; with nothing else running that forward still counts towards the decode log
        interval. (The recorded random-drafter run logged its first ``Decode batch`` during the
        32-token smoke request, after an 8-token warm-up and two health checks: 7 + 31 verify
        steps alone would not reach 40.)"""
        if finished and not self.running:
            self._count_decode([], 0, 0, 0)

    def _count_decode(self, batch, produced, verifies, accepted):
        iv = self._interval
        iv[0] += 1
        iv[1] += produced
        iv[2] += verifies
        iv[3] += accepted
        if iv[0] >= self.decode_log_interval:
            # SGLang logs the batch that ran: a request finishing in this step still counts.
            self._decode_log(len(batch), sum(r.prompt_tokens + r.output for r in batch))

    def _set_gauges(self, running, batch=0):
        self.gauges = (running, len(self.waiting))
        self._logged = time.monotonic()
        if self.on_gauges:
            self.on_gauges(batch)

    def _decode_log(self, running, kv_tokens):
        self._set_gauges(running)
        steps, tokens, verifies, accepted, start = self._interval
        now = time.monotonic()
        self.last_gen_throughput = tokens / max(1e-9, now - start)
        spec = ''
        if self.draft_tokens > 1 and verifies:
            self.last_accept_length = (verifies + accepted) / verifies
            self.last_accept_rate = accepted / (verifies * (self.draft_tokens - 1))
            self.avg_spec_accept_length = self.last_accept_length
            spec = 'accept len: %.2f, accept rate: %.2f, ' % (self.last_accept_length, self.last_accept_rate)
        self.log('Decode batch, #running-req: %d, #token: %d, token usage: 0.00, %scuda graph: True, '
                 'gen throughput (token/s): %.2f, #queue-req: %d' % (running, kv_tokens, spec, self.last_gen_throughput,
                                                                     len(self.waiting)))
        self._interval = [0, 0, 0, 0, now]
