# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command-line flags of the simulated SGLang versions (TEST DOUBLE).

The parser is the real option table of the release (tests/releases/fixtures, read from
its PyPI wheel by tests/releases/extract.py, with the smg-grpc-servicer plugin options
that pip installs beside it): the same option strings, nargs, choices, int/float values
and abbreviation rules, and the release's own recorded usage and --help text. A version
without a fixture of its own uses the recorded release of its line (0.5.12 -> 0.5.12.post1),
else the newest older one.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_RELEASES_FILE = os.path.join(HERE, '..', '..', 'releases', 'releases.py')
_spec = importlib.util.spec_from_file_location('llmops_sglang_releases', _RELEASES_FILE)
releases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(releases)

# The release whose /server_info the simulator reports (server_info-0.5.15.post1.json): its
# dest names are the ones _args.resolve reads, whatever an older release called them.
DEST_RELEASE = '0.5.15.post1'
WARNING_COLOUR = '\x1b[1;33m%s\x1b[0m'


def version_tuple(version):
    """'0.5.15.post1' -> (0, 5, 15)."""
    return tuple(int(x) for x in re.findall(r'\d+', version.split('.post')[0].split('rc')[0])[:3])


def fixture_version(version):
    """The recorded release whose parser stands for ``version``."""
    recorded = releases.versions()
    if version in recorded:
        return version
    line = version_tuple(version)
    same_line = [v for v in recorded if version_tuple(v) == line]
    older = [v for v in recorded if version_tuple(v) <= line]
    return (same_line or older or recorded[:1])[-1]


def deprecation_message(entry, option_string):
    """What the release's deprecated-option action logs (sglang/srt/server_args.py)."""
    if entry['action'] == 'DeprecatedAction':
        return "The command line argument '%s' is deprecated and will be removed in future versions." % option_string
    replacement = " Use '%s' instead." % entry['replacement'] if entry.get('replacement') else ''
    return "'%s' is deprecated and will be removed in a future release.%s" % (option_string, replacement)


class _Parser(releases.RecordedParser):
    """Warns on deprecated options as the release does, and stores under DEST_RELEASE's names."""

    deprecated = {}
    dests = {}

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        for arg in args:
            entry = self.deprecated.get(arg.split('=', 1)[0])
            if entry:
                print(WARNING_COLOUR % deprecation_message(entry, arg.split('=', 1)[0]), file=sys.stderr, flush=True)
        namespace, extras = super().parse_known_args(args, namespace)
        for old, new in self.dests.items():
            if hasattr(namespace, old):
                setattr(namespace, new, getattr(namespace, old))
                delattr(namespace, old)
        return namespace, extras


def build_parser(version):
    """The argparse parser of ``version`` (see the module docstring)."""
    recorded = fixture_version(version)
    parser = releases.build_parser(recorded, _Parser, defaults=False)  # _args.resolve applies them
    fixture = releases.load(recorded)
    reference = releases.load(DEST_RELEASE)
    parser.deprecated = {option: entry for entry in fixture['options'] if entry['action'].startswith('Deprecated')
                         for option in entry['options']}
    parser.dests = {}
    for entry in fixture['options']:
        same = releases.find(reference, entry['options'][0])
        if same and same['dest'] != entry['dest'] and not entry.get('deprecated'):
            parser.dests[entry['dest']] = same['dest']
    return parser
