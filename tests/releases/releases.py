# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The recorded SGLang releases (``fixtures/``, written by ``extract.py``): their option
tables, their ``--help`` texts and an argparse parser rebuilt from each option table.

The rebuilt parser accepts and rejects exactly what the release's parser does (same
option strings, nargs, choices, value types of int/float, required options and
``allow_abbrev``); its usage and help are the release's own recorded text. Used by the
unit tests (ground truth for ``_sglang_args``) and by the simulator (``tests/sim/sglang``).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import re

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
VALUE_TYPES = {'int': int, 'float': float}


def version_key(version):
    """'0.5.15.post1' -> (0, 5, 15, 1): the order of releases."""
    return tuple(int(part) for part in re.findall(r'\d+', version))


def versions():
    """Every recorded release, oldest first."""
    names = [name[len('sglang-'):-len('.json')] for name in os.listdir(FIXTURES)
             if name.startswith('sglang-') and name.endswith('.json')]
    return sorted(names, key=version_key)


@functools.lru_cache(maxsize=None)
def _load_text(version):
    with open(os.path.join(FIXTURES, 'sglang-%s.json' % version), encoding='utf-8') as handle:
        return handle.read()


def load(version):
    """The fixture of ``version`` (a fresh copy: callers may change it)."""
    return json.loads(_load_text(version))


@functools.lru_cache(maxsize=None)
def help_text(version):
    with gzip.open(os.path.join(FIXTURES, 'sglang-%s.help.gz' % version), 'rt', encoding='utf-8') as handle:
        return handle.read()


def usage_text(version):
    """The usage paragraph of the release's ``--help`` (what argparse prints on an error)."""
    text = help_text(version)
    return text[:text.index('\n\n') + 1]


def option_strings(fixture):
    """Every option string of the release (aliases and hidden ones included)."""
    return {option for entry in fixture['options'] for option in entry['options']}


def find(fixture, option):
    """The fixture entry that owns ``option``, or None."""
    for entry in fixture['options']:
        if option in entry['options']:
            return entry
    return None


class _Switch(argparse.Action):
    """A zero-argument option: store_true, store_const, BooleanOptionalAction's --no-."""

    def __init__(self, option_strings, dest, const=True, default=None, required=False, help=None):
        super().__init__(option_strings, dest, nargs=0, const=const, default=default, required=required,
                         help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        negated = self.const is True and option_string.startswith('--no-') and \
            option_string[5:] in {o[2:] for o in self.option_strings}
        setattr(namespace, self.dest, False if negated else self.const)


class RecordedParser(argparse.ArgumentParser):
    """Prints the release's recorded usage and help instead of its own rendering."""

    recorded_help = ''

    def format_usage(self):
        return self.recorded_help[:self.recorded_help.index('\n\n') + 1]

    def format_help(self):
        return self.recorded_help


def build_parser(version, parser_class=RecordedParser, defaults=True):
    """An ArgumentParser with the option table of ``version``; ``defaults`` False leaves
    every value None unless given (for a caller that applies defaults itself)."""
    fixture = load(version)
    parser = parser_class(prog=fixture['prog'], allow_abbrev=fixture['allow_abbrev'], add_help=True)
    parser.recorded_help = help_text(version)
    for entry in fixture['options']:
        if entry['action'] == '_HelpAction':
            continue
        kwargs = {'dest': entry['dest'], 'required': entry.get('required', False)}
        if 'default' in entry and defaults:
            kwargs['default'] = entry['default']
        if entry.get('flag'):
            kwargs['const'] = entry.get('const', True)
            parser.add_argument(*entry['options'], action=_Switch, **kwargs)
            continue
        value_type = VALUE_TYPES.get(entry.get('type'), str)
        kwargs.update(nargs=entry['nargs'], type=value_type)
        if entry.get('choices') and not entry.get('choices_unknown'):
            kwargs['choices'] = [value_type(choice) for choice in entry['choices']]
        parser.add_argument(*entry['options'], **kwargs)
    return parser


class ParseError(Exception):
    """argparse's error message, raised instead of exiting."""


class _RaisingParser(RecordedParser):
    def error(self, message):
        raise ParseError(message)


@functools.lru_cache(maxsize=None)
def _raising_parser(version):
    return build_parser(version, _RaisingParser)


def parse(version, argv):
    """The namespace the release's parser makes of ``argv``; ParseError with argparse's
    message where the release rejects it."""
    return _raising_parser(version).parse_args(list(argv))
