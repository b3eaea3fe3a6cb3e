# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Request metrics of the simulated SGLang (TEST DOUBLE), kept as SGLang 0.5.15.post1's
tokenizer manager keeps them (sglang/srt/managers/tokenizer_manager.py, collect_metrics):

- the counters (prompt and generation tokens, verify calls, requests) grow when a request
  finishes, not per step; health-check generations are not counted (recorded: 8 health checks,
  one warm-up request, num_requests_total 1);
- time to first token is observed when the first output reaches the tokenizer: for a request
  that is not streamed that is its end (recorded: TTFT sum = e2e sum for the warm-up);
- inter-token latency is observed between two outputs of a streamed request, the interval
  counted once per new token in the bucket of interval / tokens (observe_inter_token_latency).

Bucket bounds: TTFT and e2e as recorded on the H200; inter-token latency from the 0.5.15.post1
wheel's defaults (not in the recording: its traffic was not streamed).
"""

from __future__ import annotations

import threading

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = TTFT_BUCKETS + (600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)


class Histogram:
    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.observed = False

    def observe(self, value, count=1, total=None):
        """``count`` observations in the bucket of ``value``; ``total`` is added to the sum (default value * count)."""
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        self.counts[index] += count
        self.sum += value * count if total is None else total
        self.observed = True

    def samples(self, labels):
        """(suffix, label text, value) as SGLang writes them: cumulative buckets, _sum, _count; labels sorted."""
        def text(extra):
            merged = dict(labels, **extra)
            return ','.join('%s="%s"' % (k, merged[k]) for k in sorted(merged))
        out, running = [], 0
        for bound, count in zip(self.bounds + (None,), self.counts):
            running += count
            out.append(('_bucket', text({'le': '+Inf' if bound is None else repr(float(bound))}), running))
        return out + [('_sum', text({}), self.sum), ('_count', text({}), running)]


class RequestMetrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.counters = {'prompt_tokens': 0, 'generation_tokens': 0, 'verify_calls': 0, 'requests': 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def output(self, req, count, now):
        """``count`` new tokens of ``req`` reached the tokenizer at ``now`` (streamed requests)."""
        with self.lock:
            if req.last_output is None:
                self.ttft.observe(now - req.received_mono)
            else:
                interval = now - req.last_output
                self.itl.observe(interval / count, count, interval)
            req.last_output = now

    def finished(self, req, now):
        with self.lock:
            if req.last_output is None:
                self.ttft.observe(now - req.received_mono)
            self.counters['prompt_tokens'] += req.prompt_tokens
            self.counters['generation_tokens'] += req.output
            self.counters['verify_calls'] += req.verify_ct
            self.counters['requests'] += 1
            self.e2e.observe(now - req.received_mono)
