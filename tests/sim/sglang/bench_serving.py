# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of ``python -m sglang.bench_serving``: not SGLang's client, a stand-in for dry runs.

Takes the flags that ``tests/gpu/h200/bench_compare.py`` passes to SGLang 0.5.15.post1's
``sglang.benchmark.serving`` (checked against its source: ``--backend sglang`` only, the
``sharegpt`` dataset from ``--dataset-path``, fixed output length, ``--max-concurrency``) and
refuses any other, sends each prompt once to ``/generate`` streamed with ``ignore_eos`` after
one warm-up request, and appends one JSON line with the keys that the real one writes for the
compared figures (``completed``, ``output_throughput``, ``median_ttft_ms``, ``mean_tpot_ms``,
``median_tpot_ms``, ``median_itl_ms``), defined as there. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def parse(argv):
    parser = argparse.ArgumentParser(prog='sglang.bench_serving (simulator stand-in)')
    parser.add_argument('--backend', choices=['sglang'], required=True)
    parser.add_argument('--base-url', required=True)
    parser.add_argument('--model', required=True)
    parser.add_argument('--tokenizer', required=True)
    parser.add_argument('--dataset-name', choices=['sharegpt'], required=True)
    parser.add_argument('--dataset-path', required=True)
    parser.add_argument('--sharegpt-output-len', type=int, required=True)
    parser.add_argument('--num-prompts', type=int, default=1000)
    parser.add_argument('--max-concurrency', type=int, default=None)
    parser.add_argument('--disable-tqdm', action='store_true')
    parser.add_argument('--output-file', required=True)
    parser.add_argument('--seed', type=int, default=42)
    return parser.parse_args(argv)


def one_request(url, prompt, output_len):
    """(ok, output tokens, ttft s, latency s, [itl s per token])."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    body = {'text': prompt, 'stream': True,
            'sampling_params': {'temperature': 0.0, 'max_new_tokens': output_len, 'ignore_eos': True}}
    start = time.perf_counter()
    ttft, last, last_len, itl = 0.0, start, 0, []
    try:
        conn.request('POST', '/generate', json.dumps(body), {'Content-Type': 'application/json'})
        response = conn.getresponse()
        if response.status != 200:
            return False, 0, 0.0, 0.0, []
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith('data: ') or line == 'data: [DONE]':
                continue
            data = json.loads(line[len('data: '):])
            if not data.get('text'):
                continue
            now = time.perf_counter()
            count = data['meta_info']['completion_tokens']
            if ttft == 0.0:
                ttft = now - start
            elif count > last_len:
                itl += [(now - last) / (count - last_len)] * (count - last_len)
            else:
                continue
            last, last_len = now, count
        return True, last_len, ttft, time.perf_counter() - start, itl
    except (OSError, ValueError, KeyError):
        return False, 0, 0.0, 0.0, []
    finally:
        conn.close()


def main(argv=None):
    args = parse(argv)
    random.seed(args.seed)
    with open(args.dataset_path, encoding='utf-8') as handle:
        prompts = [c['conversations'][0]['value'] for c in json.load(handle) if len(c.get('conversations', [])) >= 2]
    random.shuffle(prompts)
    prompts = prompts[:args.num_prompts]
    url = args.base_url.rstrip('/')
    print('sglang.bench_serving SIMULATOR stand-in: %d prompts, concurrency %s' % (len(prompts), args.max_concurrency))
    one_request(url, prompts[0], args.sharegpt_output_len)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.max_concurrency or len(prompts)) as pool:
        outputs = list(pool.map(lambda p: one_request(url, p, args.sharegpt_output_len), prompts))
    duration = time.perf_counter() - start
    done = [o for o in outputs if o[0]]
    tpots = [(o[3] - o[2]) / (o[1] - 1) for o in done if o[1] > 1]
    itls = [x for o in done for x in o[4]]
    result = {
        'backend': args.backend, 'max_concurrency': args.max_concurrency, 'duration': duration,
        'completed': len(done), 'total_output_tokens': sum(o[1] for o in done),
        'output_throughput': sum(o[1] for o in done) / duration,
        'median_ttft_ms': statistics.median([o[2] for o in done]) * 1000 if done else None,
        'mean_tpot_ms': statistics.mean(tpots) * 1000 if tpots else None,
        'median_tpot_ms': statistics.median(tpots) * 1000 if tpots else None,
        'median_itl_ms': statistics.median(itls) * 1000 if itls else None,
    }
    with open(args.output_file, 'a', encoding='utf-8') as handle:
        handle.write(json.dumps(result) + '\n')
    print(json.dumps(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
