# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated ``sglang::scheduler`` child process (TEST DOUBLE).

It owns the simulated GPU memory that the launcher records for its PID. SIGTERM ends it at
once. When the launcher dies without stopping it (SIGKILL), it notices, keeps the memory
for SGLANG_SIM_ORPHAN_SECONDS (nvidia-smi then shows its name as ``[No data]``, as recorded
for a real orphan), and exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import nvsim


def _mark_orphan():
    path = nvsim.holder_path(os.getpid())
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except (OSError, ValueError):
        return
    nvsim.write_holder(data['mib'], '[No data]')


def main():
    parent = int(sys.argv[1])

    def stop(signum, frame):
        nvsim.remove_holder()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.getppid() == parent:
        time.sleep(0.05)
    _mark_orphan()
    time.sleep(float(os.environ.get('SGLANG_SIM_ORPHAN_SECONDS') or 3.0))
    nvsim.remove_holder()
    return 0


if __name__ == '__main__':
    sys.exit(main())
