# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much of the roles and playbooks is a program in Jinja? Counts the lines of roles/*/tasks,
roles/*/vars, playbooks/ and playbooks/tasks that hold ``{{ }}`` or ``{% %}``, and of those the ones whose
template carries logic: anything but a bare variable name or attribute (``{{ sglang_server_port }}``,
``{{ plan.url }}``), a ``{% %}`` statement, and every line of an expression that spans several lines.

    python tests/perf/templated_logic.py [TREE ...]     (default: this checkout)

Issue 46's target: at most 186 lines with logic (187 by this count at ff7d8ca).
"""

from __future__ import annotations

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATTERNS = ('roles/*/tasks/*.yml', 'roles/*/vars/*.yml', 'playbooks/*.yml', 'playbooks/tasks/*.yml')
BARE = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\s*')


def count(tree):
    """``(templated lines, lines with logic)`` of ``tree``."""
    templated = logic = 0
    for pattern in PATTERNS:
        for path in sorted(glob.glob(os.path.join(tree, pattern))):
            depth = 0
            with open(path, encoding='utf-8') as handle:
                for line in handle:
                    continued = depth > 0
                    depth += line.count('{{') + line.count('{%') - line.count('}}') - line.count('%}')
                    if not (continued or '{{' in line or '{%' in line):
                        continue
                    templated += 1
                    expressions = re.findall(r'\{\{(.*?)\}\}', line)
                    if continued or depth > 0 or '{%' in line or not all(BARE.fullmatch(e) for e in expressions):
                        logic += 1
    return templated, logic


def main(argv):
    for tree in argv or [ROOT]:
        templated, logic = count(tree)
        print('%s: %d templated lines, %d with logic' % (tree, templated, logic))


if __name__ == '__main__':
    main(sys.argv[1:])
