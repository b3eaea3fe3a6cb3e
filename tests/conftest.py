"""Makes the collection importable as ``ansible_collections.llmops.serving`` in tests.

The repository root is the collection, so a link to it under
``build/pytest/ansible_collections/llmops/serving`` lets unit tests import the live
sources (``plugins/module_utils`` etc.) without building and installing first.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_IMPORT_ROOT = os.path.join(ROOT, 'build', 'pytest')
_LINK = os.path.join(_IMPORT_ROOT, 'ansible_collections', 'llmops', 'serving')

if not os.path.islink(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    try:
        os.symlink(ROOT, _LINK)
    except FileExistsError:
        pass
if _IMPORT_ROOT not in sys.path:
    sys.path.insert(0, _IMPORT_ROOT)
