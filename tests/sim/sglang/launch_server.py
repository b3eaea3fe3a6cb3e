# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python -m sglang.launch_server``: the SGLang simulator (TEST DOUBLE), see tests/sim/README.md."""

from __future__ import annotations

import sys

from sglang._server import main

if __name__ == '__main__':
    sys.exit(main())
