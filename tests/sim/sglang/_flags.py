# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command-line flags of the simulated SGLang versions (TEST DOUBLE).

The flag list of 0.5.15.post1 is read from ``usage-0.5.15.post1.txt``: the usage text that the
real server printed (recorded in tests/fixtures/.../failures/unknown-flag.log). The parser is
rebuilt from it in the same order, so argparse prints the same usage and errors. Other
versions are 0.5.15.post1 plus the differences listed in ``VERSION_NOTES``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

PROG = 'sglang serve'
HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_ALGORITHMS_0_5_11 = ['EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM']
DEPRECATION_WARNING = ("\x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
                       "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m")
VERSION_NOTES = {
    '<=0.5.13': '--cuda-graph-max-bs is a normal flag (no --cuda-graph-max-bs-decode); --speculative-algorithm has fixed '
                'choices %s; no --speculative-adaptive / --speculative-adaptive-config' % ','.join(SPEC_ALGORITHMS_0_5_11),
    '0.5.15-0.5.17': 'as recorded: --cuda-graph-max-bs is a deprecated alias of --cuda-graph-max-bs-decode',
    '>=0.5.23': '--cuda-graph-max-bs is not registered (argparse: ambiguous prefix)',
}


def version_tuple(version):
    """'0.5.15.post1' -> (0, 5, 15)."""
    return tuple(int(x) for x in re.findall(r'\d+', version.split('.post')[0].split('rc')[0])[:3])


def _usage_groups(text):
    """Split the usage text into its top-level items ('[--x X]', '--model-path MODEL_PATH')."""
    body = ' '.join(text.split())
    body = body[len('usage: %s ' % PROG):]
    items, depth, current = [], 0, ''
    for ch in body:
        if ch == '[':
            depth += 1
        elif ch == ']':
            depth -= 1
        if ch == ' ' and depth == 0:
            if current[:1] in ('-', '['):
                items.append(current)
            elif current:  # the metavar of a required option
                items[-1] += ' ' + current
            current = ''
            continue
        current += ch
    if current:
        items.append(current)
    return items


def recorded_options():
    """Options of 0.5.15.post1 in order: dicts with flag, metavar, choices, nargs, required."""
    with open(os.path.join(HERE, 'usage-0.5.15.post1.txt'), encoding='utf-8') as f:
        items = _usage_groups(f.read())
    options = []
    for item in items:
        required = not item.startswith('[')
        if not required:
            item = item[1:-1]
        flag, dummy, rest = item.partition(' ')
        if flag == '-h':
            continue
        opt = {'flag': flag, 'metavar': None, 'choices': None, 'nargs': None, 'required': required}
        if rest.startswith('| --no-'):
            opt['boolean_optional'] = True
        elif rest:
            first = rest.split(' ')[0]
            if rest.startswith('[') and rest.endswith(' ...]'):
                opt['nargs'] = '*'
                first = rest[1:].split(' ')[0]
            elif rest.endswith(' ...]'):
                opt['nargs'] = '+'
            if first.startswith('{'):
                opt['choices'] = first[1:-1].split(',')
            else:
                opt['metavar'] = first
        options.append(opt)
    return options


class _DeprecatedAlias(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(DEPRECATION_WARNING, file=sys.stderr, flush=True)
        setattr(namespace, self.dest, values)


def options_for(version):
    """The option list of ``version`` (see VERSION_NOTES)."""
    v = version_tuple(version)
    options = []
    for opt in recorded_options():
        opt = dict(opt)
        flag = opt['flag']
        if v <= (0, 5, 13):
            if flag == '--cuda-graph-max-bs-decode':
                opt.update(flag='--cuda-graph-max-bs', metavar='CUDA_GRAPH_MAX_BS')
            elif flag == '--cuda-graph-max-bs' or flag.startswith('--speculative-adaptive'):
                continue
            elif flag == '--speculative-algorithm':
                opt.update(metavar=None, choices=SPEC_ALGORITHMS_0_5_11)
        elif v >= (0, 5, 23) and flag == '--cuda-graph-max-bs':
            continue
        options.append(opt)
    return options


def _dest(opt):
    if opt['metavar'] and opt['metavar'] != opt['flag'][2:].replace('-', '_').upper():
        return opt['metavar'].lower()
    return opt['flag'][2:].replace('-', '_')


def build_parser(version, types=None):
    """The argparse parser of ``version``; ``types`` maps a dest to int or float, as SGLang declares them."""
    parser = argparse.ArgumentParser(prog=PROG)
    for opt in options_for(version):
        kwargs = {'dest': _dest(opt)}
        if types and kwargs['dest'] in types and not opt['choices']:
            kwargs['type'] = types[kwargs['dest']]
        if opt.get('boolean_optional'):
            kwargs['action'] = argparse.BooleanOptionalAction
        elif opt['metavar'] is None and opt['choices'] is None:
            kwargs['action'] = 'store_true'
        else:
            if opt['choices']:
                kwargs['choices'] = opt['choices']
            if opt['nargs']:
                kwargs['nargs'] = opt['nargs']
            if opt['required']:
                kwargs['required'] = True
            if opt['flag'] == '--cuda-graph-max-bs' and kwargs['dest'] == 'cuda_graph_max_bs_decode':
                kwargs['action'] = _DeprecatedAlias
        parser.add_argument(opt['flag'], **kwargs)
    return parser
