# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engines the collection serves with and how their versions read (private: not an API).

One ``parse_version`` for every module: ``None`` or an empty string is "no version
given" (``None``); anything else must start with a version number (``'0.5.15.post1'``,
``'v0.5.23'``, ``'0.6'``, ``'1'``) and becomes a ``(major, minor, patch)`` tuple with
missing parts 0; text that holds no version (``'latest'``, ``'dev'``) raises ValueError
naming it, so a typo never silently selects another version's rules.
"""

from __future__ import annotations

import re

ENGINES = ('sglang', 'vllm')

_VERSION = re.compile(r'^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?![\d])')


def parse_version(text):
    """'0.5.15.post1' -> (0, 5, 15); None or '' -> None; ValueError when unreadable."""
    if text is None or str(text).strip() == '':
        return None
    match = _VERSION.match(str(text).strip())
    if not match:
        raise ValueError('engine version %r is not a version such as 0.5.11' % (text,))
    return tuple(int(part or 0) for part in match.groups())
