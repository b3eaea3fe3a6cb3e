# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ground truth of one SGLang release, read from its wheel on PyPI.

    python tests/releases/extract.py 0.5.23            # downloads the wheel with pip
    python tests/releases/extract.py 0.5.23 --wheel sglang-0.5.23-...whl
    python tests/releases/extract.py 0.5.23 --stdout   # print instead of writing
    for v in 0.5.11 0.5.12.post1 ...; do python tests/releases/extract.py $v; done   # all fixtures

Builds the release's REAL argparse parser on a CPU: the wheel's ``sglang/`` sources are
unpacked into a temporary directory and ``sglang.srt.server_args.prepare_server_args``
runs with every third-party import (torch, triton, transformers, ...) replaced by stub
modules; ``parse_args`` is intercepted so the parser that SGLang itself constructed is
captured. SGLang modules that fail to run under the stubs become stubs too (reported in
``stubbed_sglang_modules``); ``server_args.py`` itself must run.

Writes ``fixtures/sglang-<version>.json`` (every option: option strings, dest, action,
nargs, choices, value type, default when plain data, deprecation, whether help is
hidden; the parser's prog and allow_abbrev; the drafter-loading facts of the version's
``llama_eagle3.py`` and ``kimi_k25_eagle3.py``) and ``fixtures/sglang-<version>.help.gz``
(``--help`` at COLUMNS=80, gzip without a timestamp), and the adaptive speculative
facts: what the release's real ``adaptive_spec_params.py`` (run under the stubs) makes of
its default configuration for each starting ``--speculative-num-steps``. The wheel is
not kept.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gzip
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import typing
import zipfile
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, 'fixtures')
FORMAT = 1
HELP_COLUMNS = 80
STUB_VERSION = '2.9.1'  # what ``torch.__version__`` and the like say under the stubs
# sglang.srt.plugins installed with every release (a dependency of sglang since 0.5.11):
# smg-grpc-servicer adds --servicer-impl and --metrics-port/--metrics-host to the parser.
# 0.14.1 is what pip installed with 0.5.15.post1 on the H200 (tests/fixtures/.../wheels-*.txt).
PLUGINS = ('smg-grpc-servicer==0.14.1',)
# Choices that SGLang keeps in a set (--sampling-backend) print in hash order, which
# changes from run to run; this seed prints them in the order of the H200 recording of
# 0.5.15.post1 (tests/fixtures/sglang-0.5.15.post1-h200/failures/unknown-flag.log).
HASH_SEED = '12'


# A stand-in for anything from a stubbed package, with a stable repr (help texts that
# interpolate a stubbed default must not change between runs) and no docstring (help
# texts that append a stubbed function's __doc__ must not get this one).
class Stub(mock.MagicMock):
    __doc__ = None

    def __repr__(self):
        return '<stub %s>' % (self._extract_mock_name(),)

    def __str__(self):
        return repr(self)


class _StubMeta(type):
    """Names from stubbed packages are classes of this metaclass, so that they work as
    base classes and inside type hints (``Optional[torch.dtype]``, ``List[LoRARef]``) as
    well as values: attributes are stubs again; calling one gives a ``Stub`` instance."""

    def __getattr__(cls, attr):
        return _stub_attribute(cls, cls.__qualname__, attr)

    def __call__(cls, *args, **kwargs):
        if cls.__dict__.get('_stub'):
            return Stub(name=cls.__qualname__)
        return super().__call__(*args, **kwargs)  # a real class derived from a stub

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __repr__(cls):
        return '<stub %s>' % cls.__qualname__


def _stub_attribute(owner, prefix, attr):
    """A stub class for ``owner.attr``, kept on ``owner`` (dunder names stay missing)."""
    if attr.startswith('__') and attr.endswith('__'):
        raise AttributeError(attr)
    value = stub_class('%s.%s' % (prefix, attr))
    setattr(owner, attr, value)
    return value


def stub_class(qualname):
    return _StubMeta(qualname.rpartition('.')[2], (), {'_stub': True, '__qualname__': qualname,
                                                       '__doc__': None})


class _StubModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []
        self.__file__ = '<stub %s>' % name
        self.__version__ = STUB_VERSION

    def __getattr__(self, attr):
        return _stub_attribute(self, self.__name__, attr)


class _Struct:
    """``msgspec.Struct`` as a dataclass: SGLang >= 0.5.20 declares its option metadata
    (``Arg``) and ``ServerArgs`` fields as Structs, so a stub would lose them."""

    def __init_subclass__(cls, frozen=False, kw_only=False, **_options):
        super().__init_subclass__()
        for name in cls.__dict__.get('__annotations__', {}):
            setattr(cls, name, _mutable_default(cls.__dict__.get(name, dataclasses.MISSING)))
        try:
            dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(cls)
        except TypeError:  # msgspec orders required fields first itself
            dataclasses.dataclass(frozen=frozen, kw_only=True)(cls)


def _mutable_default(value):
    """msgspec copies mutable defaults itself; dataclasses want a factory."""
    if isinstance(value, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: copy.copy(value))  # pylint: disable=invalid-field-call
    return value


def _defstruct(name, fields, *, bases=None, namespace=None, **_options):
    specs = []
    for field in fields:
        if isinstance(field, str):
            specs.append((field, typing.Any))
        elif len(field) == 3:
            specs.append((field[0], field[1], _mutable_default(field[2])))
        else:
            specs.append(tuple(field))
    return dataclasses.make_dataclass(name, specs, bases=tuple(bases or ()), namespace=namespace,
                                      kw_only=True)


def _msgspec_field(default=dataclasses.MISSING, default_factory=dataclasses.MISSING, name=None):
    del name
    return dataclasses.field(default=default, default_factory=default_factory)  # pylint: disable=invalid-field-call


class _MsgspecLoader(importlib.abc.Loader):
    """A small pure-Python ``msgspec`` (Struct, field, NODEFAULT, structs)."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ == 'msgspec':
            module.__path__ = []
            module.Struct = _Struct
            module.field = _msgspec_field
            module.defstruct = _defstruct
            module.NODEFAULT = dataclasses.MISSING
            module.UNSET = dataclasses.MISSING
            module.structs = importlib.import_module('msgspec.structs')
        elif module.__name__ == 'msgspec.structs':
            module.fields = dataclasses.fields
            module.replace = dataclasses.replace
            module.asdict = dataclasses.asdict
        else:
            raise ImportError(module.__name__)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


class _ForgivingLoader(importlib.machinery.SourceFileLoader):
    """Runs an SGLang module; where the stubs break it, what ran is kept and every
    missing name becomes a stub (PEP 562 ``__getattr__``)."""

    failed = {}

    def exec_module(self, module):
        try:
            super().exec_module(module)
        except Exception as exc:  # pylint: disable=broad-except
            if module.__name__ == 'sglang.srt.server_args':
                raise
            self.failed[module.__name__] = '%s: %s' % (type(exc).__name__, exc)

            def missing(attr, _name=module.__name__):
                if attr.startswith('__') and attr.endswith('__'):
                    raise AttributeError(attr)
                return stub_class('%s.%s' % (_name, attr))
            module.__getattr__ = missing


class _Finder(importlib.abc.MetaPathFinder):
    """SGLang from the unpacked wheel; the standard library as is; everything else a stub."""

    def __init__(self, root, real=('sglang',)):
        self.root = root
        self.real = set(real)
        self.stubbed = set()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition('.')[0]
        if top in self.real:
            return self._sglang_spec(fullname)
        if top in sys.stdlib_module_names or top in ('_distutils_hack',):
            return None
        if fullname in ('msgspec', 'msgspec.structs'):
            return importlib.machinery.ModuleSpec(fullname, _MsgspecLoader(), is_package=fullname == 'msgspec')
        self.stubbed.add(top)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)

    def _sglang_spec(self, fullname):
        base = os.path.join(self.root, *fullname.split('.'))
        if os.path.isdir(base):
            init = os.path.join(base, '__init__.py')
            if fullname == 'sglang' or not os.path.exists(init):
                # sglang/__init__.py pulls in the whole frontend: a bare package instead
                spec = importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
                spec.submodule_search_locations = [base]
                return spec
            return importlib.util.spec_from_file_location(
                fullname, init, loader=_ForgivingLoader(fullname, init), submodule_search_locations=[base])
        if os.path.exists(base + '.py'):
            return importlib.util.spec_from_file_location(fullname, base + '.py',
                                                          loader=_ForgivingLoader(fullname, base + '.py'))
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


class _Captured(Exception):
    def __init__(self, parser):
        super().__init__('parser captured')
        self.parser = parser


def capture_parser(root, plugin_packages=()):
    """(the ArgumentParser that the release's ``prepare_server_args`` builds after its
    launcher loaded the ``sglang.srt.plugins`` entry points, the option strings that
    ``ServerArgs.add_cli_args`` adds without plugins, the finder)."""
    finder = _Finder(root, ('sglang',) + tuple(plugin_packages))
    sys.meta_path.insert(0, finder)
    sys.path.insert(0, root)  # importlib.metadata finds the plugins' entry points there
    os.environ['COLUMNS'] = str(HELP_COLUMNS)
    original = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        raise _Captured(self)
    argparse.ArgumentParser.parse_args = intercept
    try:
        server_args = importlib.import_module('sglang.srt.server_args')
        bare = argparse.ArgumentParser()
        server_args.ServerArgs.add_cli_args(bare)
        own = {option for action in bare._actions for option in action.option_strings}  # pylint: disable=protected-access
        importlib.import_module('sglang.srt.plugins').load_plugins()
        try:
            server_args.prepare_server_args(['--help'])
        except _Captured as captured:
            return captured.parser, own, finder
        raise RuntimeError('prepare_server_args returned without parsing')
    finally:
        argparse.ArgumentParser.parse_args = original


def _plain(value):
    """``value`` when it is JSON data (no stubs), else None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return None


def _type_name(kind):
    if kind is None:
        return None
    if kind in (int, float, str):
        return kind.__name__
    return getattr(kind, '__name__', type(kind).__name__)


def describe_action(action, own):
    entry = {
        'options': list(action.option_strings),
        'dest': action.dest,
        'action': type(action).__name__,
        'nargs': action.nargs,
    }
    if action.choices is not None:
        choices = [str(c) for c in action.choices]
        entry['choices'] = choices
        if not choices:
            entry['choices_unknown'] = True  # built from a stubbed module
    if action.nargs == 0:
        entry['flag'] = True
        if action.const is not None and _plain(action.const) is not None:
            entry['const'] = action.const
    else:
        entry['type'] = _type_name(action.type)
    default = _plain(action.default)
    if default is not None:
        entry['default'] = default
    if action.required:
        entry['required'] = True
    if not set(action.option_strings) & own and action.option_strings != ['-h', '--help']:
        entry['plugin'] = True  # added by a plugin of PLUGINS, not by SGLang
    if action.help == argparse.SUPPRESS:
        entry['help_hidden'] = True
    text = '%s %s' % (type(action).__name__, action.help if isinstance(action.help, str) else '')
    if 'Deprecated' in type(action).__name__ or re.search(r'\bdeprecated\b', text, re.I):
        entry['deprecated'] = True
        if getattr(action, 'new_flag', None):
            entry['replacement'] = action.new_flag
    return entry


# Facts about a drafter loader: (name, regular expression on its load_weights source)
LOADER_FACTS = (
    ('skips_d2t_t2d', r'"t2d" in name'),
    ('midlayer_to_layers0', r'"midlayer\.?"\s*[:,]\s*"layers\.0'),
    ('layers0_to_midlayer', r'layers\\?\.0\\?\.",\s*"midlayer\.'),
    ('tries_model_prefix', r'f"model\.\{name\}"'),
    ('fc_norm_names', r'fc_norm'),
    ('aux_norm_legacy_names', r'aux_norm_(low|mid|high)'),
    ('input_norm', r'input_norm'),
    ('warns_unexpected', r'logger\.warning'),
)
CONFIG_FACTS = (
    ('config_fc_norm', r'config,\s*"fc_norm"|\.fc_norm\b|"fc_norm"'),
    ('config_use_aux_norm', r'use_aux_norm'),
    ('config_norm_before_fc', r'norm_before_fc'),
    ('num_hidden_layers_loop', r'range\(\s*(self\.)?(config\.)?num_hidden_layers|for\s+\w+\s+in\s+range\(config\.num_hidden_layers'),
    ('layers_modulelist', r'self\.layers\s*=\s*nn\.ModuleList'),
    ('midlayer_attribute', r'self\.midlayer\s*='),
)


def _function_source(source, name):
    match = re.search(r'^( *)def %s\(.*?(?=^\1(?:def |class |@)|^\S|\Z)' % re.escape(name), source, re.S | re.M)
    return match.group(0) if match else ''


def loader_facts(root):
    """What each drafter module of the release does with tensor names (source facts)."""
    facts = {}
    for module in ('llama_eagle3', 'kimi_k25_eagle3'):
        path = os.path.join(root, 'sglang', 'srt', 'models', module + '.py')
        if not os.path.exists(path):
            continue
        with open(path, encoding='utf-8') as handle:
            source = handle.read()
        load = _function_source(source, 'load_weights')
        entry = {name: bool(re.search(pattern, load)) for name, pattern in LOADER_FACTS}
        entry.update({name: bool(re.search(pattern, source)) for name, pattern in CONFIG_FACTS})
        entry['entry_classes'] = re.findall(r'^EntryClass\s*=\s*\[?([^\]\n]*)', source, re.M)
        entry['entry_classes'] = [c.strip() for c in ','.join(entry['entry_classes']).split(',') if c.strip()]
        entry['norm_attributes'] = sorted(set(re.findall(r'self\.((?:fc|input|aux|hidden)_?norm\w*)\s*=', source)))
        entry['load_weights'] = load.rstrip().splitlines()
        facts[module] = entry
    return facts


ROUTE = r'@app\.(?:get|post|put|delete|patch|api_route)\(\s*"(/[^"]*)"'


def http_facts(root):
    """The HTTP endpoints of the release (source facts): the paths its server routes
    (``entrypoints/http_server.py``; ``ready`` when ``/ready`` is one), those whose handler
    logs or answers that it is deprecated, the paths that node ranks >= 1 serve (their
    ``launch_dummy_health_check_server``) and the path prefixes that the API key never guards
    (``utils/auth.py``)."""
    def read(*parts):
        with open(os.path.join(root, 'sglang', 'srt', *parts), encoding='utf-8') as handle:
            return handle.read()
    server = read('entrypoints', 'http_server.py')
    routes = sorted(set(re.findall(ROUTE, server)))
    dummy = _function_source(read('utils', 'common.py'), 'launch_dummy_health_check_server')
    auth = read('utils', 'auth.py')
    return {
        'routes': routes,
        'ready': '/ready' in routes,
        'deprecated_routes': sorted(set(path for paths in re.findall(r"Endpoint ((?:'/[^']*'(?: or )?)+) is deprecated", server)
                                        for path in re.findall(r"'(/[^']*)'", paths))),
        'rank_routes': sorted(set(re.findall(ROUTE, dummy))),
        'auth_free_prefixes': sorted(set(re.findall(r'path\.startswith\("(/[^"]*)"\)', auth))),
    }


# Starting --speculative-num-steps recorded for adaptive mode: every depth the collection
# accepts (2..32, plugins/module_utils/_sglang_args.py MAX_DEPTH) minus one.
ADAPTIVE_START_STEPS = range(1, 32)


def adaptive_facts(root):
    """What ``--speculative-adaptive`` really runs with the default configuration, from the
    release's own ``AdaptiveSpeculativeParams`` (real code, run under the stubs):
    ``candidate_steps`` per batch-size slot (the smallest batch size a slot serves; one
    slot ``1`` when the release has no per-batch-size routing), the steps each slot starts
    at for every starting num_steps of ``ADAPTIVE_START_STEPS`` (``start_steps``, in slot
    order) and the steps a start adds to a slot's candidates (``added_candidate_steps``,
    only the starts that add any), and two source facts: the conditions under which the release disables adaptive
    with a warning (``disabled_unless``: the server arguments its
    ``adaptive_unsupported_reason`` reads) and whether a starting num_steps outside the
    candidates is a start-up error (``rejects_other_num_steps``)."""
    module = importlib.import_module('sglang.srt.speculative.adaptive_spec_params')
    params = {steps: module.AdaptiveSpeculativeParams(initial_steps=steps) for steps in ADAPTIVE_START_STEPS}
    first = params[ADAPTIVE_START_STEPS[0]]
    slots = getattr(first, '_slots', None)

    def slot_list(adaptive):  # pylint: disable=protected-access
        return [adaptive] if slots is None else [adaptive._slots[bs] for bs in sorted(adaptive._slots)]
    keys = ['1'] if slots is None else [str(bs) for bs in sorted(slots)]
    candidates = {key: list(slot.candidate_steps) for key, slot in zip(keys, slot_list(first))}
    starts = {str(steps): [slot.current_steps for slot in slot_list(p)] for steps, p in params.items()}
    added = {str(steps): [sorted(set(slot.candidate_steps) - set(candidates[key]))
                          for key, slot in zip(keys, slot_list(p))] for steps, p in params.items()}
    added = {steps: lists for steps, lists in added.items() if any(lists)}
    with open(module.__file__, encoding='utf-8') as handle:
        reason = _function_source(handle.read(), 'adaptive_unsupported_reason')
    rejects = False
    for folder, _dirs, names in os.walk(os.path.join(root, 'sglang', 'srt')):
        for name in names:
            if name.endswith('.py'):
                with open(os.path.join(folder, name), encoding='utf-8') as handle:
                    rejects = rejects or 'is not in the adaptive config candidate_steps' in handle.read()
    return {
        'candidate_steps': candidates,
        'start_steps': starts,
        'added_candidate_steps': added,
        'disabled_unless': sorted(set(re.findall(r'\b(?:server_args|cfg)\.(\w+)', reason))
                                  | set(re.findall(r'resolved_view\(server_args\)\.(\w+)', reason))
                                  | set(re.findall(r'(\w+)\(resolved_view\(server_args\)\)', reason))),
        'rejects_other_num_steps': rejects,
    }


def unpack(wheel, root, top='sglang/'):
    """The Python sources (and the dist-info, for entry points) of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(top) and member.endswith('.py') or '.dist-info/' in member and top != 'sglang/':
                archive.extract(member, root)


def download(requirement, directory):
    os.makedirs(directory)
    subprocess.run([sys.executable, '-m', 'pip', 'download', requirement, '--no-deps',
                    '--only-binary', ':all:', '--python-version', '3.11', '-d', directory, '-q'],
                   check=True)
    wheels = [name for name in os.listdir(directory) if name.endswith('.whl')]
    if len(wheels) != 1:
        raise RuntimeError('expected one wheel in %s, found %s' % (directory, wheels))
    return os.path.join(directory, wheels[0])


def extract(version, wheel=None, plugins=PLUGINS):
    """(fixture dict, --help text) of one release, with the ``sglang.srt.plugins`` of
    ``plugins`` (requirements) installed beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            wheel = download('sglang==%s' % version, os.path.join(tmp, 'wheel'))
        root = os.path.join(tmp, 'src')
        unpack(wheel, root)
        packages = []
        for number, requirement in enumerate(plugins):
            plugin = download(requirement, os.path.join(tmp, 'plugin%d' % number))
            package = os.path.basename(plugin).split('-')[0]
            unpack(plugin, root, package + '/')
            packages.append(package)
        parser, own, finder = capture_parser(root, packages)
        help_text = parser.format_help()
        fixture = {
            'format': FORMAT,
            'version': version,
            'wheel': os.path.basename(wheel),
            'prog': parser.prog,
            'allow_abbrev': parser.allow_abbrev,
            'plugins': list(plugins),
            'options': [describe_action(a, own) for a in parser._actions],  # pylint: disable=protected-access
            'loader': loader_facts(root),
            'http': http_facts(root),
            # what the parser needed stubbed (before the adaptive module pulls in more)
            'stubbed_packages': sorted(finder.stubbed),
            'stubbed_sglang_modules': sorted(_ForgivingLoader.failed),
        }
        fixture['adaptive'] = adaptive_facts(root)
    return fixture, help_text


def dump(fixture):
    """Stable, diffable JSON: one line per option and per loader source line."""
    def compact(value):
        return json.dumps(value, sort_keys=True, separators=(',', ':'))
    lines = ['{']
    keys = sorted(fixture)
    for number, key in enumerate(keys):
        value = fixture[key]
        if key == 'options':
            body = '[\n' + ',\n'.join('  ' + compact(item) for item in value) + '\n ]'
        elif key == 'adaptive':  # one line per fact, per starting num_steps
            body = '{\n' + ',\n'.join(
                '  %s: %s' % (json.dumps(k), _per_line(value[k]) if k in PER_STEPS else compact(value[k]))
                for k in sorted(value)) + '\n }'
        elif key in ('loader', 'http'):
            body = json.dumps(value, sort_keys=True, indent=1).replace('\n', '\n ')
        else:
            body = compact(value)
        lines.append(' %s: %s%s' % (json.dumps(key), body, ',' if number < len(keys) - 1 else ''))
    lines.append('}')
    return '\n'.join(lines) + '\n'


PER_STEPS = ('start_steps', 'added_candidate_steps')


def _per_line(mapping):
    if not mapping:
        return '{}'
    return '{\n' + ',\n'.join('   %s: %s' % (json.dumps(name), json.dumps(item, separators=(',', ':')))
                              for name, item in mapping.items()) + '\n  }'


def gzip_text(text):
    buffer = io.BytesIO()
    with gzip.GzipFile(filename='', mode='wb', fileobj=buffer, mtime=0, compresslevel=9) as handle:
        handle.write(text.encode('utf-8'))
    return buffer.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('version')
    parser.add_argument('--wheel', help='use this wheel instead of downloading one')
    parser.add_argument('--out', default=FIXTURES, help='directory for the fixture files')
    parser.add_argument('--stdout', action='store_true', help='print the fixture JSON instead of writing')
    parser.add_argument('--plugin', action='append', dest='plugins',
                        help='requirement of an sglang.srt.plugins package to install beside it '
                             '(default: %s)' % ', '.join(PLUGINS))
    args = parser.parse_args(argv)
    # every release runs in a fresh interpreter: stubs and sglang modules must not mix
    if os.environ.get('_SGLANG_EXTRACT_CHILD') != '1':
        env = dict(os.environ, _SGLANG_EXTRACT_CHILD='1', PYTHONHASHSEED=HASH_SEED)
        return subprocess.run([sys.executable, os.path.abspath(__file__)] + list(argv or sys.argv[1:]),
                              env=env, check=False).returncode
    fixture, help_text = extract(args.version, args.wheel, tuple(args.plugins or PLUGINS))
    if args.stdout:
        sys.stdout.write(dump(fixture))
        return 0
    os.makedirs(args.out, exist_ok=True)
    text = dump(fixture)
    with open(os.path.join(args.out, 'sglang-%s.json' % args.version), 'w', encoding='utf-8') as handle:
        handle.write(text)
    with open(os.path.join(args.out, 'sglang-%s.help.gz' % args.version), 'wb') as handle:
        handle.write(gzip_text(help_text))
    print('sglang %s: %d options, %d stubbed sglang modules' % (
        args.version, len(fixture['options']), len(fixture['stubbed_sglang_modules'])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
