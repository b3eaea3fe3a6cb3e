# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of the ``sglang`` package: a simulator of SGLang's server, not SGLang.

Put ``tests/sim`` on ``PYTHONPATH``; ``python -m sglang.launch_server ...`` then runs the
simulator. The simulated version comes from ``SGLANG_SIM_VERSION`` (default 0.5.15.post1).
"""

from __future__ import annotations

import os

__version__ = os.environ.get('SGLANG_SIM_VERSION') or '0.5.15.post1'
SIMULATOR = True
