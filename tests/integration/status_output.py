"""Reading the table that playbooks/status.yml prints (one row per host, aligned columns)."""

from __future__ import annotations

import re

TASK = 'TASK [Show one table of every host]'
_COLUMN = re.compile(r'\S+(?: \S+)*')


def status_table(stdout):
    """``{host: {column: cell}}`` from status.yml's output, columns named as in the header.

    Every cell must start exactly under its header: a row that is not aligned raises
    AssertionError naming it.
    """
    block = stdout.rpartition(TASK)[2]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith('msg: |'))
    indent = None
    table = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        if indent is None:
            indent = len(line) - len(line.lstrip())
        if len(line) - len(line.lstrip()) < indent:
            break
        table.append(line[indent:])
    columns = [(m.start(), m.group()) for m in _COLUMN.finditer(table[0])]
    rows = {}
    for line in table[1:]:
        for place, (offset, name) in enumerate(columns):
            assert line[offset:offset + 1].strip() and (offset == 0 or line[offset - 1] == ' '), \
                'column %r not aligned in %r (header %r)' % (name, line, table[0])
            if place + 1 < len(columns):
                assert line[columns[place + 1][0] - 2:columns[place + 1][0]] == '  ', (name, line)
        cells = [line[offset:(columns[i + 1][0] if i + 1 < len(columns) else None)].strip()
                 for i, (offset, dummy) in enumerate(columns)]
        rows[cells[0]] = dict(zip((name for dummy, name in columns), cells))
    return rows
