"""Holds GPU memory with torch until stopped (helper of gpu_memory_proof.py).

``python3 torch_holder.py --tag NAME --gib 10 [--ignore-term] [--device 0]``: allocates and
touches GIB GiB on the device, prints ``ready <pid>``, then sleeps. The tag only makes the
command line recognisable for the reclaim pattern.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--tag', required=True)
    parser.add_argument('--gib', type=float, default=10)
    parser.add_argument('--device', type=int, default=0)
    parser.add_argument('--ignore-term', action='store_true')
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    block = torch.empty(int(args.gib * 2 ** 30), dtype=torch.uint8, device='cuda:%d' % args.device)
    block.fill_(1)
    torch.cuda.synchronize()
    print('ready %d' % os.getpid(), flush=True)
    while True:
        time.sleep(3600)


if __name__ == '__main__':
    main()
