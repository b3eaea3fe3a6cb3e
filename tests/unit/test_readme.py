# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The README's "Layout" names every module, filter, role and playbook of the collection, and the
action group of meta/runtime.yml is exactly the modules that share the server options."""

from __future__ import annotations

import ast
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _names(directory, suffix):
    path = os.path.join(ROOT, directory)
    return sorted(name[:-len(suffix)] if suffix else name for name in os.listdir(path)
                  if name.endswith(suffix) and not name.startswith(('_', '.')))


def _layout():
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as handle:
        readme = handle.read()
    section = readme.split('\n## Layout\n', 1)[1].split('\n## ', 1)[0]
    return set(re.findall(r'`([a-z0-9_]+)`', section))


@pytest.mark.parametrize('kind, names', [
    ('module', _names('plugins/modules', '.py')),
    ('filter', _names('plugins/filter', '.yml')),
    ('role', [name for name in _names('roles', '') if os.path.isdir(os.path.join(ROOT, 'roles', name))]),
    ('playbook', _names('playbooks', '.yml')),
])
def test_readme_layout_names_every_module_filter_role_and_playbook(kind, names):
    assert names, kind
    missing = [name for name in names if name not in _layout()]
    assert not missing, 'README.md, section "Layout", does not name the %s(s) %s' % (kind, ', '.join(missing))


def _documentation(module):
    with open(os.path.join(ROOT, 'plugins', 'modules', module + '.py'), encoding='utf-8') as handle:
        tree = ast.parse(handle.read())
    return next(yaml.safe_load(node.value.value) for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == 'DOCUMENTATION')


def test_action_group_is_the_modules_with_the_server_options():
    with open(os.path.join(ROOT, 'meta', 'runtime.yml'), encoding='utf-8') as handle:
        groups = yaml.safe_load(handle)['action_groups']
    sharing = [module for module in _names('plugins/modules', '.py')
               if 'llmops.serving.server_api' in _documentation(module).get('extends_documentation_fragment', [])]
    assert sorted(groups['llm_server']) == sharing
