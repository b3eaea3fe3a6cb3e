# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""text_table: the alignment of the deploy summary and of playbooks/templates/status.j2, each
checked against the code it replaced."""

from __future__ import annotations

import os

import jinja2
import pytest

from ansible_collections.llmops.serving.plugins.filter.deploy_summary import text_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# The end of playbooks/templates/status.j2 before it called text_table.
STATUS_J2_ALIGNMENT = '''
{%- set widths = [] -%}
{%- for column in header -%}
{%-   set _ = widths.append(rows | map(attribute=loop.index0) | map('string') | map('length') | max) -%}
{%- endfor -%}
{%- for row in rows -%}
{%-   set cells = [] -%}
{%-   for cell in row -%}
{%-     set _ = cells.append(('%-' ~ widths[loop.index0] ~ 's') | format(cell | string)) -%}
{%-   endfor -%}
{{ cells | join('  ') | trim }}
{% endfor -%}
'''
TABLES = [
    [['host', 'running', 'pid', 'healthy', 'accept length', 'refused/why'],
     ['gpu-node-01', 'yes', 4711, True, 2.61, '-'],
     ['b', 'no', '-', 'broken', None, 'group b, c: c not running; a deploy restarts the whole group'],
     ['über', '', 0, False, 3.0, '']],
    [['host', 'why'], ['a', 'trailing spaces   '], ['long-host-name', '-']],
    [['only'], ['x'], ['a longer cell']],
    [['host', 'state'], ['a', '']],
]


def _status_template_tail():
    with open(os.path.join(ROOT, 'playbooks', 'templates', 'status.j2'), encoding='utf-8') as handle:
        template = handle.read()
    return template[template.rindex('{%- for line in rows'):]


@pytest.mark.parametrize('rows', TABLES)
def test_the_status_table_is_aligned_as_before(rows):
    env = jinja2.Environment()
    env.filters['llmops.serving.text_table'] = text_table
    before = env.from_string(STATUS_J2_ALIGNMENT).render(header=rows[0], rows=rows)
    assert env.from_string(_status_template_tail()).render(rows=rows) == before


@pytest.mark.parametrize('rows', TABLES)
def test_the_deploy_summary_is_aligned_as_before(rows):
    rows = [[str(cell) for cell in row] for row in rows]
    # plugins/filter/deploy_summary.py before it called text_table
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    before = ['  '.join([cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]).rstrip() for row in rows]
    assert text_table(rows) == before


def test_columns_are_two_spaces_apart_and_lines_end_without_space():
    assert text_table([['host', 'pid', 'why'], ['gpu-a', 11, '-'], ['b', '-', 'no answer ']]) == [
        'host   pid  why', 'gpu-a  11   -', 'b      -    no answer']
    assert text_table([]) == []
