"""Every task's arguments against its module's argument spec, and every role variable a role reads
against the role's ``meta/argument_specs.yml`` (issue 46, item 2).

What it checks, per file (roles/*/tasks, roles/*/handlers, roles/*/vars, playbooks/*.yml,
playbooks/tasks/*.yml):

- a task (found through block/rescue/always and the plays' task lists) that calls a module of
  this collection, ``llmops.serving.<name>``, passes only option names (or aliases) of that
  module's ``ARGUMENT_SPEC`` (else of the ``options`` of its DOCUMENTATION and of the doc
  fragments it extends); suboptions of a literal dict are checked the same way;
- the same for the ``ansible.builtin.*`` modules, from ansible-core's DOCUMENTATION (modules
  that take free-form arguments or variables as arguments - set_fact, add_host, command... -
  are checked only where they are given a dict, or not at all);
- ``module_defaults`` entries naming one module are checked like a task of that module;
- ``llmops.serving.role_module`` (the generic wrapper of wave 3, removed in 1.1.0) appears nowhere;
- every variable named ``<role>_...`` that a role's task or vars file reads (Jinja, parsed with
  jinja2's ``meta.find_undeclared_variables``; ``when``/``until``/``that``... as expressions) is
  an option of an entry point of the role's ``meta/argument_specs.yml``, or set by the role
  itself (``set_fact``, ``register``, ``vars:``, ``loop_var``, a key of ``vars/*.yml``).

Run it on other files to see its messages: ``python tests/unit/roles/test_task_arguments.py FILE...``.
"""

from __future__ import annotations

import ast
import difflib
import glob
import importlib
import os
import re
import sys

import jinja2
import pytest
import yaml
from jinja2 import meta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COLLECTION = 'llmops.serving'
WRAPPER = 'llmops.serving.role_module'

# The keywords of a task, a block and a play (ansible-core's playbook objects): any other key of a
# task is its module (or a lookup loop, with_*).
TASK_KEYWORDS = frozenset('''
action any_errors_fatal args async become become_exe become_flags become_method become_user
changed_when check_mode collections connection debugger delay delegate_facts delegate_to
diff environment failed_when ignore_errors ignore_unreachable local_action loop loop_control
module_defaults name no_log notify poll port register remote_user retries run_once tags
throttle timeout until vars when listen block rescue always
'''.split())
# Values of these keys are Jinja expressions without {{ }}.
EXPRESSION_KEYS = frozenset(('when', 'changed_when', 'failed_when', 'until'))
# ansible.builtin modules whose arguments are variables or free-form text: not checked at all
# (set_fact, add_host, set_stats take any key), or only when given a dict.
ANY_KEYS = frozenset(('set_fact', 'add_host', 'group_by', 'set_stats'))
FREE_FORM = frozenset(('command', 'shell', 'raw', 'script', 'meta', 'include_tasks', 'import_tasks',
                       'include_vars', 'import_playbook'))
# Keys Ansible itself adds to a free-form module's arguments.
IMPLICIT = frozenset(('_raw_params', '_uses_shell', '_variable_params'))

_ENV = jinja2.Environment()
_NAME = re.compile(r'\b([a-zA-Z_][a-zA-Z0-9_]*)\b')


# ---------------------------------------------------------------------------------------------
# Argument specs
# ---------------------------------------------------------------------------------------------

def _literal_assignments(path):
    """{name: value} of the module-level (and ModuleDocFragment class-level) string assignments."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    found = {}
    bodies = [tree.body] + [node.body for node in tree.body if isinstance(node, ast.ClassDef)]
    for body in bodies:
        for node in body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value.value
    return found


def _fragment_path(name):
    """(path of the doc fragment file, attribute) for an extends_documentation_fragment entry."""
    parts = name.split('.')
    if len(parts) >= 3:
        namespace, collection, rest = parts[0], parts[1], parts[2:]
    else:
        namespace, collection, rest = 'ansible', 'builtin', parts
    attribute = rest[1].upper() if len(rest) > 1 else 'DOCUMENTATION'
    if (namespace, collection) == ('ansible', 'builtin'):
        import ansible.plugins.doc_fragments as fragments
        return os.path.join(os.path.dirname(fragments.__file__), rest[0] + '.py'), attribute
    if '%s.%s' % (namespace, collection) == COLLECTION:
        return os.path.join(ROOT, 'plugins', 'doc_fragments', rest[0] + '.py'), attribute
    return None, attribute


def _doc_options(path):
    """The options of a module's DOCUMENTATION and of the doc fragments it extends, or None."""
    doc = yaml.safe_load(_literal_assignments(path).get('DOCUMENTATION') or '{}') or {}
    if not doc:
        return None
    options = dict(doc.get('options') or {})
    for fragment in doc.get('extends_documentation_fragment') or []:
        fragment_path, attribute = _fragment_path(fragment)
        if fragment_path and os.path.exists(fragment_path):
            text = _literal_assignments(fragment_path).get(attribute)
            options.update((yaml.safe_load(text or '{}') or {}).get('options') or {})
    return options


def _known(spec):
    """{name or alias: its entry} of an argument spec or documentation options."""
    known = {}
    for name, entry in (spec or {}).items():
        entry = entry or {}
        known[name] = entry
        for alias in entry.get('aliases') or []:
            known[alias] = entry
    return known


_SPECS = {}


def module_spec(fqcn):
    """(known option names with their entries, or None when the module does not exist)."""
    if fqcn in _SPECS:
        return _SPECS[fqcn]
    namespace, collection, name = fqcn.split('.', 2)
    spec = None
    if '%s.%s' % (namespace, collection) == COLLECTION:
        path = os.path.join(ROOT, 'plugins', 'modules', name + '.py')
        if os.path.exists(path):
            if 'ARGUMENT_SPEC' in open(path, encoding='utf-8').read():
                module = importlib.import_module('ansible_collections.llmops.serving.plugins.modules.' + name)
                spec = getattr(module, 'ARGUMENT_SPEC', None)
            if spec is None:
                spec = _doc_options(path) or {}
    else:
        import ansible.modules
        path = os.path.join(os.path.dirname(ansible.modules.__file__), name + '.py')
        if os.path.exists(path):
            spec = _doc_options(path) or {}
    _SPECS[fqcn] = None if spec is None else _known(spec)
    return _SPECS[fqcn]


def _closest(name, names):
    """The known name closest to ``name`` (by spelling), or None when there is none."""
    names = sorted(names)
    if not names:
        return None
    return max(names, key=lambda known: difflib.SequenceMatcher(None, name, known).ratio())


def _templated(value):
    return isinstance(value, str) and ('{{' in value or '{%' in value)


def _parse_kv(text):
    from ansible.parsing.splitter import parse_kv
    return parse_kv(text, check_raw=False)


def _check_options(where, module, args, known, path=''):
    problems = []
    for option in args:
        if option in IMPLICIT:
            continue
        label = path + str(option)
        if option not in known:
            close = _closest(str(option), [k for k in known if not k.startswith('_')])
            problems.append('%s: %s has no option %s%s' % (
                where, module, label, ' (did you mean %s%s?)' % (path, close) if close else ''))
            continue
        sub = known[option].get('options') or known[option].get('suboptions')
        value = args[option]
        if sub and isinstance(value, dict):
            problems.extend(_check_options(where, module, value, _known(sub), label + '.'))
        elif sub and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    problems.extend(_check_options(where, module, item, _known(sub), label + '[].'))
    return problems


def check_call(where, module, args, task_args=None):
    """Problems of one call of ``module`` with ``args`` (the module's value) and the task's
    ``args:`` keyword."""
    if not module.startswith((COLLECTION + '.', 'ansible.builtin.')):
        return []
    if module == WRAPPER:
        problems = ['%s: %s must not be used (removed in 1.1.0): call the module it runs by its name, '
                    'with its arguments' % (where, WRAPPER)]
        if isinstance(args, dict) and isinstance(args.get('module'), str):
            # what it runs: its args, and the options it reads from <prefix><option> variables
            inner = dict(args['args']) if isinstance(args.get('args'), dict) else {}
            inner.update(dict.fromkeys(o for o in args.get('options') or [] if isinstance(o, str)))
            problems.extend(check_call('%s (through %s)' % (where, WRAPPER), args['module'], inner))
        return problems
    short = module.split('.')[-1]
    builtin = module.startswith('ansible.builtin.')
    if builtin and short in ANY_KEYS:
        return []
    known = module_spec(module)
    if known is None:
        if builtin:
            return []  # an action-only builtin without documentation in ansible/modules: not checked
        names = [os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py'))]
        close = _closest(short, names)
        return ['%s: %s is not a module of %s%s' % (
            where, module, COLLECTION, ' (did you mean %s.%s?)' % (COLLECTION, close) if close else '')]
    problems = []
    action = os.path.join(ROOT, 'plugins', 'action', short + '.py')
    if not builtin and os.path.exists(action) and 'role_variable' in open(action, encoding='utf-8').read():
        problems.append('%s: the action plugin of %s reads role variables (RoleAction.role_variable), not only '
                        'its task\'s arguments: pass them as arguments' % (where, module))
    merged = {}
    for given in (args, task_args):
        if isinstance(given, dict):
            merged.update(given)
        elif isinstance(given, str) and given.strip() and not (builtin and short in FREE_FORM) \
                and not _templated(given.strip()):
            merged.update(_parse_kv(given))
    return problems + _check_options(where, module, merged, known)


# ---------------------------------------------------------------------------------------------
# Walking files, plays and tasks
# ---------------------------------------------------------------------------------------------

def _task_module(task):
    """(module name, its value) of a task, or (None, None)."""
    for key, value in task.items():
        if key in TASK_KEYWORDS or key.startswith('with_'):
            continue
        return key, value
    action = task.get('action') or task.get('local_action')
    if isinstance(action, dict) and 'module' in action:
        return action['module'], {k: v for k, v in action.items() if k != 'module'}
    if isinstance(action, str) and action.strip():
        module, rest = (action.strip().split(None, 1) + [''])[:2]
        return module, rest
    return None, None


def iter_tasks(entries):
    """Every task (dict) of a list of tasks or plays, depth first through blocks and plays."""
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        yield entry
        for key in ('block', 'rescue', 'always', 'pre_tasks', 'tasks', 'post_tasks', 'handlers'):
            if isinstance(entry.get(key), list):
                yield from iter_tasks(entry[key])


def _task_label(task):
    if task.get('name'):
        return task['name']
    if 'hosts' in task:
        return '(play on %s)' % task['hosts']
    return '(block)' if 'block' in task else '(unnamed %s)' % (_task_module(task)[0],)


def check_argument_names(tasks, filename):
    """Problems of every call to a module of the collection or of ansible.builtin in ``tasks``
    (a list of tasks or plays, as YAML loads them)."""
    problems = []
    for task in iter_tasks(tasks):
        where = '%s: task "%s"' % (filename, _task_label(task))
        for module, options in (task.get('module_defaults') or {}).items() \
                if isinstance(task.get('module_defaults'), dict) else ():
            if not module.startswith('group/'):
                problems.extend(check_call('%s (module_defaults)' % where, module, options))
        if 'block' in task or 'hosts' in task or 'import_playbook' in task:
            continue
        module, args = _task_module(task)
        if module:
            problems.extend(check_call(where, module, args, task.get('args')))
    return problems


def check_file_arguments(path):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    rel = os.path.relpath(path, ROOT)
    problems = []
    data = yaml.safe_load(text)
    if WRAPPER in text and not any(WRAPPER in p for p in check_argument_names(data if isinstance(data, list) else [], rel)):
        # named elsewhere than as a task's module (a comment, module_defaults, a string)
        lines = [str(n) for n, line in enumerate(text.splitlines(), 1) if WRAPPER in line]
        problems.append('%s: %s must not appear (line %s): it is being removed' % (rel, WRAPPER, ', '.join(lines)))
    if isinstance(data, list):
        problems.extend(check_argument_names(data, rel))
    return problems


# ---------------------------------------------------------------------------------------------
# Role variables
# ---------------------------------------------------------------------------------------------

def _names_in_template(text):
    try:
        return meta.find_undeclared_variables(_ENV.parse(text))
    except jinja2.TemplateSyntaxError:
        # a careful fallback: the identifiers inside {{ }} and {% %}, less string literals,
        # attributes (.name) and filter or test names (| name, is name)
        inner = ' '.join(a + ' ' + b for a, b in re.findall(r'\{\{(.*?)\}\}|\{%(.*?)%\}', text, re.S))
        inner = re.sub(r'"[^"]*"|\'[^\']*\'', ' ', inner)
        inner = re.sub(r'(\.|\|\s*|\bis\s+(not\s+)?)[a-zA-Z_][a-zA-Z0-9_.]*', ' ', inner)
        return set(_NAME.findall(inner))


def _names_in_expression(value):
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, list):
        return set().union(*[_names_in_expression(v) for v in value]) if value else set()
    text = str(value)
    return _names_in_template(text if _templated(text) else '{{ %s }}' % text)


def _names_read(value, key=None, module=None):
    """Variable names a YAML value reads (keys of ``EXPRESSION_KEYS`` and assert's ``that``
    are expressions; every other string is a template)."""
    if key in EXPRESSION_KEYS or (key == 'that' and module in ('ansible.builtin.assert', 'assert')) \
            or (key == 'var' and module in ('ansible.builtin.debug', 'debug')):
        return _names_in_expression(value)
    if isinstance(value, dict):
        names = set()
        for k, v in value.items():
            names |= _names_read(v, k, module)
        return names
    if isinstance(value, list):
        names = set()
        for v in value:
            names |= _names_read(v, key, module)
        return names
    if _templated(value):
        return _names_in_template(value)
    return set()


def _task_reads(task):
    """Names a task reads (not those of the tasks of its block, which are tasks of their own)."""
    module, args = _task_module(task)
    names = set()
    for key, value in task.items():
        if key in ('block', 'rescue', 'always'):
            continue
        names |= _names_read(value, key, module if key == module else None)
    if module == WRAPPER and isinstance(args, dict) and isinstance(args.get('prefix'), str):
        # the wrapper reads <prefix><option> for each of its options
        names.update(args['prefix'] + o for o in args.get('options') or [] if isinstance(o, str))
    return names


def _task_sets(task):
    names = set()
    if isinstance(task.get('register'), str):
        names.add(task['register'])
    if isinstance(task.get('vars'), dict):
        names.update(task['vars'])
    loop_control = task.get('loop_control')
    if isinstance(loop_control, dict):
        names.update(v for k, v in loop_control.items() if k in ('loop_var', 'index_var') and isinstance(v, str))
    module, args = _task_module(task)
    if module in ('ansible.builtin.set_fact', 'set_fact') and isinstance(args, dict):
        names.update(k for k in args if k != 'cacheable')
    return names


def _load(path):
    with open(path, encoding='utf-8') as f:
        return yaml.safe_load(f)


def role_files(role):
    base = os.path.join(ROOT, 'roles', role)
    return sorted(glob.glob(os.path.join(base, 'tasks', '*.yml')) + glob.glob(os.path.join(base, 'handlers', '*.yml'))
                  + glob.glob(os.path.join(base, 'vars', '*.yml')))


def role_declared(role):
    """The options of every entry point of the role's meta/argument_specs.yml."""
    path = os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml')
    specs = (_load(path) or {}).get('argument_specs') or {} if os.path.exists(path) else {}
    names = set()
    for entry in specs.values():
        names.update((entry or {}).get('options') or {})
    return names


def role_sets(role):
    """The variables the role sets itself: set_fact, register, vars:, loop_var, vars/*.yml keys."""
    names = set()
    for path in role_files(role):
        data = _load(path)
        if os.path.basename(os.path.dirname(path)) == 'vars':
            names.update(data or {})
        else:
            for task in iter_tasks(data if isinstance(data, list) else []):
                names |= _task_sets(task)
    return names


def file_reads(path):
    """{variable name: [task names]} of what one task or vars file reads."""
    data = _load(path)
    reads = {}
    if os.path.basename(os.path.dirname(path)) == 'vars':
        for key, value in (data or {}).items():
            for name in _names_read(value):
                reads.setdefault(name, []).append('vars %s' % key)
    else:
        for task in iter_tasks(data if isinstance(data, list) else []):
            for name in _task_reads(task):
                reads.setdefault(name, []).append(_task_label(task))
    return reads


def check_role_variables(path, role, declared=None, sets=None):
    """Problems of the role variables (``<role>_...``) one of the role's files reads."""
    declared = role_declared(role) if declared is None else declared
    sets = role_sets(role) if sets is None else sets
    prefix = role + '_'
    rel = os.path.relpath(path, ROOT)
    problems = []
    for name, tasks in sorted(file_reads(path).items()):
        if name.startswith(prefix) and name not in declared and name not in sets:
            close = _closest(name, declared)
            problems.append('%s: task "%s" reads %s, which roles/%s/meta/argument_specs.yml does not declare%s' % (
                rel, tasks[0], name, role, ' (did you mean %s?)' % close if close else ''))
    return problems


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------

def _argument_files():
    patterns = ('roles/*/tasks/*.yml', 'roles/*/handlers/*.yml', 'playbooks/*.yml', 'playbooks/tasks/*.yml')
    return sorted(os.path.relpath(p, ROOT) for pattern in patterns for p in glob.glob(os.path.join(ROOT, pattern)))


def _variable_files():
    return sorted(os.path.relpath(p, ROOT) for role in sorted(os.listdir(os.path.join(ROOT, 'roles')))
                  for p in role_files(role))


@pytest.mark.parametrize('path', _argument_files())
def test_every_argument_is_an_option_of_the_module(path):
    problems = check_file_arguments(os.path.join(ROOT, path))
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('path', _variable_files())
def test_every_role_variable_read_is_declared(path):
    role = path.split(os.sep)[1]
    problems = check_role_variables(os.path.join(ROOT, path), role)
    assert not problems, '\n'.join(problems)


def test_the_files_are_found():
    assert 'roles/sglang_server/tasks/main.yml' in _argument_files()
    assert 'playbooks/deploy.yml' in _argument_files() and 'playbooks/tasks/remediate_host.yml' in _argument_files()
    assert 'roles/sglang_server/vars/main.yml' in _variable_files()


MISSPELLED = '''
- name: Outer
  block:
    - name: Wait for the server
      llmops.serving.wait_for_llm_health:
        urll: x
        timeout: 5
  rescue:
    - name: Copy it
      ansible.builtin.copy:
        src: a
        dset: b
    - name: Options as key=value, correct
      ansible.builtin.debug: msg=hello
    - name: Options as key=value
      ansible.builtin.file: path=/tmp/x state=absnt mdoe=0644
- name: An unknown module
  llmops.serving.wait_for_llm_helth:
    url: x
- name: Through the wrapper
  llmops.serving.role_module:
    module: llmops.serving.wait_for_llm_health
'''


def test_a_misspelled_option_fails_with_the_file_task_module_and_closest_option():
    problems = check_argument_names(yaml.safe_load(MISSPELLED), 'inline.yml')
    assert problems == [
        'inline.yml: task "Wait for the server": llmops.serving.wait_for_llm_health has no option urll '
        '(did you mean url?)',
        'inline.yml: task "Copy it": ansible.builtin.copy has no option dset (did you mean dest?)',
        'inline.yml: task "Options as key=value": ansible.builtin.file has no option mdoe (did you mean mode?)',
        'inline.yml: task "An unknown module": llmops.serving.wait_for_llm_helth is not a module of llmops.serving '
        '(did you mean llmops.serving.wait_for_llm_health?)',
        'inline.yml: task "Through the wrapper": llmops.serving.role_module must not be used (removed in 1.1.0): '
        'call the module it runs by its name, with its arguments',
    ]


def test_correct_calls_pass():
    tasks = yaml.safe_load('''
- name: Aliases, fragments and the args keyword count
  llmops.serving.wait_for_llm_health:
    url: "{{ u }}"
    api_key: "{{ k }}"
    validate_certs: false
  args:
    timeout: 5
- name: Free-form builtins
  ansible.builtin.command: echo a=b
- name: Variables as arguments
  ansible.builtin.set_fact:
    anything: 1
- name: Include a role
  ansible.builtin.include_role:
    name: x
    tasks_from: y
- name: Templates and a doc fragment of ansible-core
  ansible.builtin.template:
    src: a
    dest: b
    mode: "0644"
    owner: root
    validate: "x %s"
    backup: true
''')
    assert check_argument_names(tasks, 'inline.yml') == []


def test_module_defaults_are_checked():
    plays = yaml.safe_load('''
- hosts: all
  module_defaults:
    llmops.serving.wait_for_llm_health:
      tiemout: 5
    group/llmops.serving.llm_server:
      anything: 1
  tasks: []
''')
    assert check_argument_names(plays, 'p.yml') == [
        'p.yml: task "(play on all)" (module_defaults): llmops.serving.wait_for_llm_health has no option tiemout '
        '(did you mean timeout?)']


def test_the_action_keyword_is_read():
    tasks = yaml.safe_load('''
- name: String form
  action: ansible.builtin.file path=/x stat=absent
- name: Dict form
  local_action:
    module: llmops.serving.wait_for_llm_health
    url: x
    intreval: 1
''')
    assert check_argument_names(tasks, 'a.yml') == [
        'a.yml: task "String form": ansible.builtin.file has no option stat (did you mean state?)',
        'a.yml: task "Dict form": llmops.serving.wait_for_llm_health has no option intreval (did you mean interval?)']


def test_an_undeclared_role_variable_fails(tmp_path):
    tasks = tmp_path / 'main.yml'
    tasks.write_text('''
- name: Reads
  ansible.builtin.debug:
    msg: "{{ sglang_server_port }} {{ sglang_server_prot | default(1) }} {{ other_var }} {{ __sglang_server_x }}"
  when: sglang_server_enabled and sglang_server_facts_ok
  register: sglang_server_out
- name: Reads what it set
  ansible.builtin.debug:
    msg: "{{ sglang_server_out.stdout }}{% for sglang_server_i in [1] %}{{ sglang_server_i }}{% endfor %}"
  loop: "{{ sglang_server_list }}"
  loop_control:
    loop_var: sglang_server_item
''')
    problems = check_role_variables(str(tasks), 'sglang_server',
                                    declared={'sglang_server_port', 'sglang_server_enabled', 'sglang_server_list'},
                                    sets={'sglang_server_out', 'sglang_server_item'})
    rel = os.path.relpath(str(tasks), ROOT)
    assert problems == [
        '%s: task "Reads" reads sglang_server_facts_ok, which roles/sglang_server/meta/argument_specs.yml does not '
        'declare (did you mean sglang_server_list?)' % rel,
        '%s: task "Reads" reads sglang_server_prot, which roles/sglang_server/meta/argument_specs.yml does not '
        'declare (did you mean sglang_server_port?)' % rel,
    ]


def test_what_a_role_sets_is_found():
    task = yaml.safe_load('''
name: t
ansible.builtin.set_fact:
  r_a: 1
  cacheable: true
register: r_b
vars:
  r_c: 2
loop_control:
  loop_var: r_d
''')
    assert _task_sets(task) == {'r_a', 'r_b', 'r_c', 'r_d'}


if __name__ == '__main__':
    # python tests/unit/roles/test_task_arguments.py FILE...: the problems the checks find in FILE
    sys.path.insert(0, os.path.join(ROOT, 'tests'))
    importlib.import_module('conftest')  # makes the collection importable, as under pytest
    found = []
    for arg in sys.argv[1:]:
        found.extend(check_file_arguments(os.path.abspath(arg)))
        parts = os.path.relpath(os.path.abspath(arg), ROOT).split(os.sep)
        if parts[0] == 'roles' and len(parts) > 3:
            found.extend(check_role_variables(os.path.abspath(arg), parts[1]))
    print('\n'.join(found) or 'no problems')
    sys.exit(1 if found else 0)
