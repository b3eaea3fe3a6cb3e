# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Launch command of an inference server: the one place for

* which flags each SGLang version accepts (``--cuda-graph-max-bs`` and the choices of
  ``--speculative-algorithm`` differ between versions),
* the speculative depth rule (depth D with top-k 1 is ``--speculative-num-steps D-1
  --speculative-eagle-topk 1 --speculative-num-draft-tokens D``; vLLM gets the same
  depth as ``--speculative-config``),
* building the argv from a structured launch spec, checking it against the installed
  server's own ``--help``, and rendering it inert for a shell, a systemd unit or an
  environment file.

No Ansible imports: used by the ``launch`` filters, the ``sglang_launch_check`` and
``server_process`` modules and the unit tests alike.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex

from ansible_collections.llmops.serving.plugins.module_utils._version import ENGINES, parse_version

# ``python -m <module>`` that serves the OpenAI-compatible API, per engine.
SERVER_MODULES = {
    'sglang': 'sglang.launch_server',
    'vllm': 'vllm.entrypoints.openai.api_server',
}

# The version rules below are checked against the real parser of every release from
# 0.5.11 to 0.5.23 (tests/releases/fixtures, built from the PyPI wheels); versions
# before 0.5.11 are not checked.
OLDEST_CHECKED = (0, 5, 11)

# --speculative-algorithm has fixed argparse choices in 0.5.11; from 0.5.12 on it takes
# any string (checked by the server itself). The installed server's --help, when known,
# overrides this table.
FIXED_ALGORITHM_CHOICES_UNTIL = (0, 5, 11)
SPECULATIVE_ALGORITHM_CHOICES = ('DFLASH', 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')

# --cuda-graph-max-bs: a flag of its own up to 0.5.13; from 0.5.14 to 0.5.19 a deprecated
# alias of --cuda-graph-max-bs-decode; gone from 0.5.20, where argparse rejects it as an
# ambiguous prefix of --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill
# (--cuda-graph-bs likewise). From 0.5.14 on the decode flag is emitted.
CUDA_GRAPH_DECODE_FLAG_SINCE = (0, 5, 14)

# --speculative-adaptive (every checked release; tests/releases/fixtures 'adaptive', from the
# releases' own adaptive_spec_params.py): SGLang picks the steps of each verify pass at run
# time among candidate steps, per batch-size slot (a slot serves the batch sizes from its
# key up to the next slot's; steps 0 is no drafting). The default candidates per release
# range (first release, {slot: candidate steps}):
ADAPTIVE_DEFAULT_CANDIDATES = (
    ((0, 5, 11), {1: (1, 3, 7)}),
    ((0, 5, 13), {1: (1, 3, 7), 8: (1, 3), 32: (1,)}),
    ((0, 5, 14), {1: (1, 3, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}),
    ((0, 5, 20), {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}),
)
# Where a slot starts: 0.5.11 at the candidate nearest --speculative-num-steps (the larger
# on a tie); 0.5.12 at num_steps, which it adds to the candidates; from 0.5.13 at num_steps
# when it is a candidate of the slot, else at the slot's middle candidate. From 0.5.14 a
# num_steps outside every slot's candidates is a start-up error ("--speculative-num-steps=15
# is not in the adaptive config candidate_steps").
ADAPTIVE_START_NEAREST_UNTIL = (0, 5, 11)
ADAPTIVE_START_ADDED_UNTIL = (0, 5, 12)
ADAPTIVE_REJECTS_OTHER_STEPS_SINCE = (0, 5, 14)
# 0.5.11 runs adaptive only with --disable-overlap-schedule: otherwise it warns
# "speculative_adaptive disabled" and serves the static depth. The argv adds the flag.
ADAPTIVE_NEEDS_NO_OVERLAP_UNTIL = (0, 5, 11)
# Adaptive runs only for these algorithms and with top-k 1 (else SGLang falls back to static).
ADAPTIVE_ALGORITHMS = ('EAGLE', 'EAGLE3')

# Prefill/decode disaggregation (tests/releases/fixtures, the parsers of 0.5.11 ... 0.5.23):
# --disaggregation-mode {null,prefill,decode}, --disaggregation-transfer-backend (default mooncake),
# --disaggregation-bootstrap-port (default 8998; the prefill listens on it), --disaggregation-ib-device in every
# checked release. The backends this collection deploys, each with the first checked release that has it:
# mooncake_tcp is mooncake with MC_FORCE_TCP=1, which the release itself sets (os.environ.setdefault, in its
# arg_groups/pd_disaggregation_hook.py, 0.5.13.post1 and 0.5.15.post1 read), so the launch files do not add it.
# fake moves no KV and is decode-only (the release asserts "Prefill server does not support 'fake'").
DISAGGREGATION_MODES = ('prefill', 'decode')
DISAGGREGATION_BACKENDS_SINCE = (
    ((0, 5, 11), ('mooncake', 'nixl', 'fake')),
    ((0, 5, 13), ('mooncake_tcp',)),
)
DEFAULT_TRANSFER_BACKEND = 'mooncake'
DEFAULT_BOOTSTRAP_PORT = 8998
# --disaggregation-enable-kv-checksum: from 0.5.21.
KV_CHECKSUM_SINCE = (0, 5, 21)

# Options registered with help=SUPPRESS: real but absent from --help, per version range
# (first, last or None for "still there").
HIDDEN_OPTIONS = {
    '--forward-pass-metrics-worker-id': ((0, 5, 12), None),
    '--forward-pass-metrics-ipc-name': ((0, 5, 12), None),
    '--speculative-dflash-draft-window-size': ((0, 5, 13), (0, 5, 19)),
}

# Flags whose value is a secret, which on a command line is readable by every user
# (/proc/<pid>/cmdline, ps, the unit file): refused in extra_args. Each with the shortest
# abbreviation argparse resolves to it (SGLang 0.5.11-0.5.23, tests/releases/fixtures;
# --ssl-keyfile alone is another flag) and what to do instead.
SECRET_FLAGS = {
    '--api-key': ('--ap', 'set sglang_server_api_key instead: it reaches the server through the '
                          'launcher, never a command line'),
    '--admin-api-key': ('--ad', 'the role does not pass an admin key'),
    '--ssl-keyfile-password': ('--ssl-keyfile-', 'use a key file without a password'),
}

# An argv item that stands for a flag whose spelling depends on the server version; an
# argv holding one is a preview and never becomes a command (launch_command refuses it).
VERSION_DEPENDENT = '<version-dependent: '


class LaunchArgsError(ValueError):
    """A launch spec that cannot become a valid command line; the message says why."""


def _version(version):
    try:
        return parse_version(version)
    except ValueError as exc:
        raise LaunchArgsError(str(exc))


def algorithm_choices(version):
    """The choices argparse enforces for --speculative-algorithm, or None (free string,
    or a version older than the checked ones)."""
    parsed = _version(version)
    if parsed is not None and OLDEST_CHECKED <= parsed <= FIXED_ALGORITHM_CHOICES_UNTIL:
        return SPECULATIVE_ALGORITHM_CHOICES
    return None


def cuda_graph_max_bs_flag(version, flags=None):
    """The flag that sets the largest decode CUDA-graph batch size for this server.

    Without ``version`` and ``flags`` no flag is right for every version: the result is
    a ``VERSION_DEPENDENT`` placeholder."""
    if flags:
        for flag in ('--cuda-graph-max-bs-decode', '--cuda-graph-max-bs'):
            if flag in flags:
                return flag
    parsed = _version(version)
    if parsed is None:
        return (VERSION_DEPENDENT + '--cuda-graph-max-bs up to SGLang 0.5.13, --cuda-graph-max-bs-decode '
                'from 0.5.14>')
    if parsed >= CUDA_GRAPH_DECODE_FLAG_SINCE:
        return '--cuda-graph-max-bs-decode'
    return '--cuda-graph-max-bs'


def hidden_options(version, engine='sglang'):
    """The options of ``version`` that exist without appearing in its --help."""
    parsed = _version(version)
    if engine != 'sglang' or parsed is None:
        return ()
    return tuple(flag for flag, (first, last) in sorted(HIDDEN_OPTIONS.items())
                 if first <= parsed and (last is None or parsed <= last))


def adaptive_candidates(version):
    """``{slot batch size: candidate steps}`` of ``--speculative-adaptive`` with SGLang's
    default configuration, or None for an unknown or unchecked version."""
    parsed = _version(version)
    if parsed is None or parsed < OLDEST_CHECKED:
        return None
    table = [candidates for first, candidates in ADAPTIVE_DEFAULT_CANDIDATES if first <= parsed][-1]
    return {slot: list(steps) for slot, steps in table.items()}


def adaptive_start(version, candidates, num_steps):
    """(candidate steps, start steps) of a slot with the default ``candidates`` for
    ``--speculative-num-steps num_steps``."""
    parsed = _version(version)
    if parsed <= ADAPTIVE_START_NEAREST_UNTIL:
        return candidates, min(candidates, key=lambda step: (abs(step - num_steps), -step))
    if parsed <= ADAPTIVE_START_ADDED_UNTIL:
        return sorted(set(candidates) | {num_steps}), num_steps
    return candidates, num_steps if num_steps in candidates else candidates[len(candidates) // 2]


def _depths(steps):
    return '/'.join('off' if step == 0 else str(step + 1) for step in steps)


def adaptive_plan(version, num_steps, config=None):
    """What ``--speculative-adaptive`` with ``--speculative-num-steps num_steps`` really runs
    on SGLang ``version``: ``{'slots': [{'batch_size', 'candidate_steps', 'start_steps'}],
    'label'}`` (the label in depths: steps + 1, "off" for steps 0). With an own adaptive
    ``config`` file, or an unknown version, the candidates are not known here: ``slots`` is
    None and the label says so. Raises LaunchArgsError where that version refuses to start.
    """
    candidates = None if config else adaptive_candidates(version)
    if candidates is None:
        return {'slots': None, 'label': 'adaptive from depth %d (candidates: %s)' % (
            num_steps + 1, 'as %s sets them' % config if config else 'depend on the SGLang version')}
    union = sorted({step for steps in candidates.values() for step in steps})
    if _version(version) >= ADAPTIVE_REJECTS_OTHER_STEPS_SINCE and num_steps not in union:
        raise LaunchArgsError(
            'SGLang %s refuses to start with --speculative-adaptive and --speculative-num-steps %d: the starting '
            'steps must be one of its adaptive candidate steps %s, i.e. speculative depth %s'
            % (version, num_steps, ', '.join(map(str, union)),
               ', '.join(str(step + 1) for step in union if step > 0)))
    slots = [dict(zip(('batch_size', 'candidate_steps', 'start_steps'),
                      (slot,) + adaptive_start(version, candidates[slot], num_steps))) for slot in sorted(candidates)]
    parts = []
    for index, slot in enumerate(slots):
        upper = slots[index + 1]['batch_size'] - 1 if index + 1 < len(slots) else None
        sizes = ('batch %d+' % slot['batch_size'] if upper is None else
                 'batch %d' % upper if upper == slot['batch_size'] else 'batch %d-%d' % (slot['batch_size'], upper))
        parts.append('%s depth %s from %s' % (sizes, _depths(slot['candidate_steps']), _depths([slot['start_steps']]))
                     if len(slot['candidate_steps']) > 1 else '%s depth %s' % (sizes, _depths(slot['candidate_steps'])))
    return {'slots': slots, 'label': 'adaptive (%s)' % '; '.join(parts)}


# Upper bounds of the speculative shape: EAGLE-3 drafters chain one draft step per token, and
# acceptance decays with every step (about 5 of 6 tokens at depth 6 on the H200 recording), so
# beyond 32 steps a verify pass only grows; a typo (depth 100) is refused, not launched.
MAX_DEPTH = 32
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256


def _positive_int(name, value, minimum=1, maximum=None):
    if value is None:
        return None
    if isinstance(value, bool):
        raise LaunchArgsError('%s must be an integer, got %r' % (name, value))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise LaunchArgsError('%s must be an integer, got %r' % (name, value))
    if number != value and str(number) != str(value).strip():
        raise LaunchArgsError('%s must be an integer, got %r' % (name, value))
    if number < minimum:
        raise LaunchArgsError('%s must be at least %d, got %d' % (name, minimum, number))
    if maximum is not None and number > maximum:
        raise LaunchArgsError('%s must be at most %d, got %d' % (name, maximum, number))
    return number


def speculative_settings(depth=None, num_steps=None, eagle_topk=None, num_draft_tokens=None):
    """Resolve the speculative shape from a depth or from explicit SGLang values.

    Returns ``{'depth', 'num_steps', 'eagle_topk', 'num_draft_tokens'}``; all ``None``
    when nothing is set (the server picks its defaults). ``depth`` is the number of
    tokens one verify step can accept at most (= num_draft_tokens with top-k 1).
    Raises LaunchArgsError with an explanation for inconsistent values.
    """
    depth = _positive_int('speculative depth', depth, minimum=2, maximum=MAX_DEPTH)
    num_steps = _positive_int('speculative_num_steps', num_steps, maximum=MAX_DEPTH - 1)
    eagle_topk = _positive_int('speculative_eagle_topk', eagle_topk, maximum=MAX_TOPK)
    num_draft_tokens = _positive_int('speculative_num_draft_tokens', num_draft_tokens, minimum=2,
                                     maximum=MAX_DRAFT_TOKENS)

    if depth is not None:
        expected = {'num_steps': depth - 1, 'eagle_topk': 1, 'num_draft_tokens': depth}
        given = {'num_steps': num_steps, 'eagle_topk': eagle_topk, 'num_draft_tokens': num_draft_tokens}
        for key, value in given.items():
            if value is not None and value != expected[key]:
                raise LaunchArgsError(
                    'speculative depth %d means num_steps %d, eagle_topk 1 and num_draft_tokens %d; '
                    'speculative_%s %d contradicts it: set either the depth or the explicit values, not both'
                    % (depth, depth - 1, depth, key, value))
        return dict(expected, depth=depth)

    if num_steps is None:
        if eagle_topk is not None or num_draft_tokens is not None:
            raise LaunchArgsError(
                'speculative_eagle_topk and speculative_num_draft_tokens need speculative_num_steps too '
                '(SGLang rejects them alone); set a speculative depth, or all three values')
        return {'depth': None, 'num_steps': None, 'eagle_topk': None, 'num_draft_tokens': None}

    if eagle_topk is None:
        eagle_topk = 1
    if eagle_topk == 1:
        if num_draft_tokens is None:
            num_draft_tokens = num_steps + 1
        if num_draft_tokens != num_steps + 1:
            raise LaunchArgsError(
                'with speculative_eagle_topk 1, num_draft_tokens must be num_steps + 1 = %d, got %d '
                '(SGLang would silently override it); for depth %d set speculative depth %d'
                % (num_steps + 1, num_draft_tokens, num_draft_tokens, num_draft_tokens))
        return {'depth': num_draft_tokens, 'num_steps': num_steps, 'eagle_topk': 1,
                'num_draft_tokens': num_draft_tokens}

    if num_draft_tokens is None:
        raise LaunchArgsError(
            'speculative_eagle_topk %d > 1 needs speculative_num_draft_tokens (at most num_steps * topk + 1 = %d)'
            % (eagle_topk, num_steps * eagle_topk + 1))
    if num_draft_tokens > num_steps * eagle_topk + 1:
        raise LaunchArgsError(
            'speculative_num_draft_tokens %d exceeds num_steps * eagle_topk + 1 = %d * %d + 1 = %d: '
            'the draft tree cannot hold that many tokens'
            % (num_draft_tokens, num_steps, eagle_topk, num_steps * eagle_topk + 1))
    return {'depth': None, 'num_steps': num_steps, 'eagle_topk': eagle_topk,
            'num_draft_tokens': num_draft_tokens}


def vllm_speculative_config(algorithm, draft_model_path, settings):
    """vLLM's ``--speculative-config`` JSON for the same depth.

    vLLM counts proposed tokens (its acceptance length is at most proposals + 1), SGLang
    counts draft tokens including the verified root, so depth D is D - 1 proposals.
    """
    if settings.get('eagle_topk') not in (None, 1):
        raise LaunchArgsError('vLLM drafts a chain (top-k 1); speculative_eagle_topk %s is SGLang-only'
                              % settings['eagle_topk'])
    config = {'method': str(algorithm).lower(), 'model': draft_model_path}
    if settings.get('num_draft_tokens') is not None:
        config['num_speculative_tokens'] = settings['num_draft_tokens'] - 1
    return json.dumps(config, sort_keys=True, separators=(',', ':'))


def _flag_value(value):
    if isinstance(value, bool):
        raise LaunchArgsError('internal: booleans are switches, not values')
    if isinstance(value, float):
        return repr(value)
    return str(value)


def extra_args_list(extra_args):
    """``extra_args`` as argv items: a list is taken as is (one item per argument), a
    dict maps flags to a value, ``true`` (a switch), ``false``/``null`` (left out) or a
    list (the flag repeated)."""
    if not extra_args:
        return []
    if isinstance(extra_args, (list, tuple)):
        return [str(item) for item in extra_args]
    if not isinstance(extra_args, dict):
        raise LaunchArgsError('extra_args must be a list of arguments or a dict of flag: value, got %s'
                              % type(extra_args).__name__)
    argv = []
    for flag, value in extra_args.items():
        flag = str(flag)
        if not flag.startswith('-'):
            flag = '--' + flag.replace('_', '-')
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv.extend([flag, _flag_value(item)])
        else:
            argv.extend([flag, _flag_value(value)])
    return argv


def _refuse_secrets(argv):
    """Raise LaunchArgsError (naming the flag, never its value) for a secret flag in
    ``argv``, spelled out, abbreviated, with ``=value`` or with underscores."""
    for arg in argv:
        name = arg.split('=', 1)[0].replace('_', '-')
        for flag, (shortest, instead) in SECRET_FLAGS.items():
            if name.startswith(shortest) and flag.startswith(name):
                raise LaunchArgsError('extra_args holds %s, a secret that would be readable on the '
                                      'command line by every user: %s' % (flag, instead))


def build_argv(spec, version=None, options=None):
    """The server's arguments (after ``python -m <module>``) for a launch ``spec``.

    ``spec`` keys: engine (sglang|vllm), model_path (required), served_model_name,
    tp_size (all GPUs of a multi-node group), nnodes, node_rank, dist_init_addr,
    dist_timeout, host, port, mem_fraction_static, max_running_requests, cuda_graph_max_bs,
    enable_metrics, trust_remote_code, speculative (algorithm, draft_model_path, depth
    or num_steps/eagle_topk/num_draft_tokens; adaptive and adaptive_config for SGLang's
    ``--speculative-adaptive``, the depth then being where it starts), nccl_port, the prefill/decode
    settings (disaggregation_mode, disaggregation_transfer_backend, disaggregation_bootstrap_port,
    disaggregation_ib_device, disaggregation_kv_checksum: ``disaggregation_args``) and extra_args. ``version`` and
    ``options`` (the installed server's ``parse_help``) select version-dependent flags;
    with ``options`` the result is checked against them. Without either, a flag whose
    spelling depends on the version becomes a ``VERSION_DEPENDENT`` placeholder: the
    result is a preview that ``launch_command`` refuses. The API key is never part of
    the argv: the sglang_server role's launcher shim adds it in memory.
    """
    spec = dict(spec or {})
    engine = _check_spec(spec)
    sglang = engine == 'sglang'
    argv = _server_args(spec, sglang)
    argv += _multinode_args(spec, sglang)
    argv += _cuda_graph_args(spec, sglang, version, options)
    if spec.get('trust_remote_code'):
        argv.append('--trust-remote-code')
    if spec.get('enable_metrics') and sglang:
        argv.append('--enable-metrics')
    argv += _speculative_args(spec.get('speculative') or {}, sglang, version, options)
    argv += disaggregation_args(spec, sglang, version, options)
    extra = extra_args_list(spec.get('extra_args'))
    _refuse_secrets(extra)
    argv += extra
    if '--num-speculative-tokens' in argv and sglang:
        raise LaunchArgsError('--num-speculative-tokens is a vLLM flag; SGLang has no such flag: '
                              'set a speculative depth instead')
    if options:
        check_argv(argv, options, version=version, engine=engine)
    return argv


def _check_spec(spec):
    """The engine of ``spec``, after the checks that do not depend on it."""
    engine = spec.get('engine') or 'sglang'
    if engine not in ENGINES:
        raise LaunchArgsError('engine must be one of %s, got %r' % (', '.join(ENGINES), engine))
    if not spec.get('model_path'):
        raise LaunchArgsError('model_path is required')
    if 'api_key' in spec:
        raise LaunchArgsError('api_key does not belong in the argv: it reaches the server through the '
                              'environment file and the launcher shim, never a visible command line')
    return engine


def _pairs(*pairs):
    """``[flag, value, ...]`` for the pairs whose value is set."""
    argv = []
    for flag, value in pairs:
        if value is not None and value != '':
            argv.extend([flag, _flag_value(value)])
    return argv


def _fraction(name, value):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise LaunchArgsError('%s must be a number, got %r' % (name, value))
    if not 0 < value < 1:
        raise LaunchArgsError('%s must be between 0 and 1, got %s' % (name, value))
    return value


def _server_args(spec, sglang):
    """Model, name, parallelism, address and memory flags (each engine's spelling)."""
    return _pairs(
        ('--model-path' if sglang else '--model', spec['model_path']),
        ('--served-model-name', spec.get('served_model_name')),
        ('--tp-size' if sglang else '--tensor-parallel-size', _positive_int('tp_size', spec.get('tp_size'))),
        ('--host', spec.get('host')),
        ('--port', _positive_int('port', spec.get('port'))),
        ('--mem-fraction-static' if sglang else '--gpu-memory-utilization',
         _fraction('mem_fraction_static', spec.get('mem_fraction_static'))),
        ('--max-running-requests' if sglang else '--max-num-seqs',
         _positive_int('max_running_requests', spec.get('max_running_requests'))),
    )


def _multinode_args(spec, sglang):
    """``--nnodes --node-rank --dist-init-addr`` for one node of a group of ``nnodes`` > 1 hosts
    (nothing for one host), and ``--dist-timeout`` when set."""
    nnodes = _positive_int('nnodes', spec.get('nnodes')) or 1
    timeout = _positive_int('dist_timeout', spec.get('dist_timeout'))
    if nnodes == 1:
        return _pairs(('--dist-timeout', timeout)) if sglang else []
    if not sglang:
        raise LaunchArgsError('nnodes %d: a multi-node group is an SGLang setting (vLLM spans hosts through Ray)'
                              % nnodes)
    rank = spec.get('node_rank')
    rank = 0 if rank is None else _positive_int('node_rank', rank, minimum=0)
    if rank >= nnodes:
        raise LaunchArgsError('node_rank %d is outside a group of %d hosts (0 to %d)' % (rank, nnodes, nnodes - 1))
    addr = str(spec.get('dist_init_addr') or '')
    host, sep, port = addr.rpartition(':')
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchArgsError('dist_init_addr must be <rank 0 host>:<port> for a group of %d hosts, got %r'
                              % (nnodes, addr))
    tp_size = _positive_int('tp_size', spec.get('tp_size'))
    if tp_size is None or tp_size % nnodes:
        raise LaunchArgsError('tp_size counts the GPUs of the whole group: %s is not a multiple of nnodes %d'
                              % (tp_size, nnodes))
    return _pairs(('--nnodes', nnodes), ('--node-rank', rank), ('--dist-init-addr', addr),
                  ('--dist-timeout', timeout))


def _cuda_graph_args(spec, sglang, version, options):
    if spec.get('cuda_graph_max_bs') is None:
        return []
    if not sglang:
        raise LaunchArgsError('cuda_graph_max_bs is an SGLang setting; pass vLLM options in extra_args')
    return _pairs((cuda_graph_max_bs_flag(version, options),
                   _positive_int('cuda_graph_max_bs', spec['cuda_graph_max_bs'])))


def _speculative_args(spec_dec, sglang, version, options):
    algorithm = spec_dec.get('algorithm')
    if not algorithm:
        if any(spec_dec.get(key) not in (None, False) for key in ('depth', 'num_steps', 'eagle_topk', 'num_draft_tokens',
                                                                  'adaptive')):
            raise LaunchArgsError('speculative depth/steps are set but no speculative algorithm (e.g. EAGLE3)')
        return []
    draft = spec_dec.get('draft_model_path')
    if not draft and str(algorithm).upper() not in ('NGRAM', 'NEXTN'):
        raise LaunchArgsError('speculative algorithm %s needs a drafter: set speculative draft_model_path'
                              % algorithm)
    settings = speculative_settings(spec_dec.get('depth'), spec_dec.get('num_steps'),
                                    spec_dec.get('eagle_topk'), spec_dec.get('num_draft_tokens'))
    if not sglang:
        if spec_dec.get('adaptive') not in (None, False) or spec_dec.get('adaptive_config'):
            raise LaunchArgsError('speculative adaptive is SGLang\'s --speculative-adaptive; vLLM has no such mode')
        return _pairs(('--speculative-config', vllm_speculative_config(algorithm, draft, settings)))
    choices = algorithm_choices(version) if options is None else None
    if choices is not None and algorithm not in choices:
        raise LaunchArgsError('SGLang %s accepts --speculative-algorithm %s, not %r'
                              % (version, '|'.join(choices), algorithm))
    adaptive = _switch('speculative adaptive', spec_dec.get('adaptive'))
    adaptive_config = spec_dec.get('adaptive_config') or None
    if adaptive:
        settings = _adaptive_settings(algorithm, settings, version, adaptive_config)
    elif adaptive_config:
        raise LaunchArgsError('speculative adaptive_config %s is set but adaptive is off' % adaptive_config)
    return _pairs(('--speculative-algorithm', algorithm),
                  ('--speculative-draft-model-path', draft),
                  ('--speculative-num-steps', settings['num_steps']),
                  ('--speculative-eagle-topk', settings['eagle_topk']),
                  ('--speculative-num-draft-tokens', settings['num_draft_tokens'])) + (
        _adaptive_args(version, adaptive_config) if adaptive else [])


def _since(table, name):
    return next((first for first, names in table if name in names), None)


def transfer_backends(version):
    """The transfer backends of ``version`` this collection deploys (``DISAGGREGATION_BACKENDS_SINCE``); every
    one for an unknown version."""
    parsed = _version(version)
    return [name for first, names in DISAGGREGATION_BACKENDS_SINCE for name in names
            if parsed is None or parsed < OLDEST_CHECKED or parsed >= first]


def disaggregation_settings(spec):
    """``{mode, transfer_backend, bootstrap_port, ib_device, kv_checksum}`` of a launch ``spec``: mode None (no
    disaggregation), prefill or decode; the backend null is the release's default (mooncake); the bootstrap port
    null is 8998. Raises LaunchArgsError naming the role variable for a setting no release takes."""
    mode = spec.get('disaggregation_mode') or None
    if mode in ('null', 'none'):
        mode = None
    if mode is not None and mode not in DISAGGREGATION_MODES:
        raise LaunchArgsError('sglang_server_disaggregation_mode must be prefill, decode or null, got %r' % (mode,))
    backend = spec.get('disaggregation_transfer_backend') or None
    known = [name for _first, names in DISAGGREGATION_BACKENDS_SINCE for name in names]
    if backend is not None and backend not in known:
        raise LaunchArgsError('sglang_server_disaggregation_transfer_backend must be one of %s (or null: %s), got %r'
                              % (', '.join(known), DEFAULT_TRANSFER_BACKEND, backend))
    port = spec.get('disaggregation_bootstrap_port')
    port = DEFAULT_BOOTSTRAP_PORT if port is None else _positive_int(
        'sglang_server_disaggregation_bootstrap_port', port, maximum=65535)
    return {'mode': mode, 'transfer_backend': backend or DEFAULT_TRANSFER_BACKEND, 'bootstrap_port': port,
            'ib_device': spec.get('disaggregation_ib_device') or None,
            'kv_checksum': _switch('sglang_server_disaggregation_kv_checksum', spec.get('disaggregation_kv_checksum'))}


def disaggregation_plan(spec):
    """What a plan shows of a server's part in prefill/decode disaggregation: ``{mode, transfer_backend,
    bootstrap_port}``, the backend and the port None where they do not apply (no mode; a decode's port)."""
    settings = disaggregation_settings(spec)
    mode = settings['mode']
    return {'mode': mode, 'transfer_backend': settings['transfer_backend'] if mode else None,
            'bootstrap_port': settings['bootstrap_port'] if mode == 'prefill' else None}


def disaggregation_args(spec, sglang=True, version=None, options=None):
    """``--nccl-port`` where set, and the prefill/decode flags of ``spec`` for SGLang ``version``: nothing without
    a disaggregation mode; ``--disaggregation-bootstrap-port`` on a prefill only (the decode learns its prefill's
    from the router). Raises LaunchArgsError naming the variable and the release for a backend or flag the
    release lacks (``version``; the installed server's ``options`` where known), ``fake`` on a prefill, and
    settings of a mode on a server without one."""
    argv = _pairs(('--nccl-port', _positive_int('sglang_server_nccl_port', spec.get('nccl_port'), maximum=65535)))
    settings = disaggregation_settings(spec)
    mode, backend = settings['mode'], settings['transfer_backend']
    if mode is None:
        given = [name for name in ('transfer_backend', 'ib_device') if spec.get('disaggregation_' + name)]
        given += ['kv_checksum'] if settings['kv_checksum'] else []
        if given:
            raise LaunchArgsError('%s %s set but sglang_server_disaggregation_mode is null: set it to prefill or '
                                  'decode, or unset %s' % (', '.join('sglang_server_disaggregation_' + name for name in given),
                                                           'is' if len(given) == 1 else 'are',
                                                           'it' if len(given) == 1 else 'them'))
        return argv
    if not sglang:
        raise LaunchArgsError('sglang_server_disaggregation_mode %s is an SGLang setting; vLLM has no such flag' % mode)
    if backend == 'fake' and mode == 'prefill':
        raise LaunchArgsError('sglang_server_disaggregation_transfer_backend fake is for a decode server only (it moves '
                              'no KV; SGLang asserts "Prefill server does not support \'fake\'"): a prefill needs '
                              'mooncake, mooncake_tcp or nixl')
    if backend == 'mooncake_tcp' and settings['ib_device']:
        raise LaunchArgsError('sglang_server_disaggregation_ib_device %s is set with the transfer backend mooncake_tcp, '
                              'whose TCP transport SGLang runs without an InfiniBand device (it drops the setting): '
                              'unset it, or use mooncake' % settings['ib_device'])
    parsed = _version(version)
    if parsed is not None and parsed >= OLDEST_CHECKED and backend not in transfer_backends(version):
        raise LaunchArgsError('sglang_server_disaggregation_transfer_backend %s needs SGLang %s or newer (this is %s)'
                              % (backend, _since_label(_since(DISAGGREGATION_BACKENDS_SINCE, backend)), version))
    choices = (options.get('--disaggregation-transfer-backend') or {}).get('choices') if options else None
    if choices and backend not in choices:
        raise LaunchArgsError('sglang_server_disaggregation_transfer_backend %s: the installed SGLang %s accepts %s'
                              % (backend, version, ', '.join(choices)))
    if settings['kv_checksum']:
        lacks = ('--disaggregation-enable-kv-checksum' not in options if options else
                 parsed is not None and OLDEST_CHECKED <= parsed < KV_CHECKSUM_SINCE)
        if lacks:
            raise LaunchArgsError('sglang_server_disaggregation_kv_checksum needs SGLang %s or newer '
                                  '(--disaggregation-enable-kv-checksum; this is %s)'
                                  % (_since_label(KV_CHECKSUM_SINCE), version))
    argv += ['--disaggregation-mode', mode]
    if spec.get('disaggregation_transfer_backend'):
        argv += ['--disaggregation-transfer-backend', backend]
    if mode == 'prefill':
        argv += ['--disaggregation-bootstrap-port', str(settings['bootstrap_port'])]
    argv += _pairs(('--disaggregation-ib-device', settings['ib_device']))
    if settings['kv_checksum']:
        argv.append('--disaggregation-enable-kv-checksum')
    return argv


def _switch(name, value):
    """A boolean setting (also the strings true/false/yes/no/1/0 a template may give)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower()
    if text in ('true', 'yes', 'on', '1'):
        return True
    if text in ('false', 'no', 'off', '0', ''):
        return False
    raise LaunchArgsError('%s must be true or false, got %r' % (name, value))


# Where adaptive starts when no depth is given: steps 7 (depth 8), the largest batch-1
# candidate of every checked release's default configuration.
ADAPTIVE_DEFAULT_START_STEPS = 7


def running_speculative(spec_dec):
    """The speculative shape the launch argv runs for ``spec_dec`` (the role's speculative settings):
    ``{'depth', 'num_steps', 'eagle_topk', 'num_draft_tokens', 'adaptive'}``. ``depth`` is the draft
    tokens verified per step (where an adaptive server starts); all None (and ``adaptive`` False) when
    speculative decoding is off. The one derivation the summary, status, monitoring and the sweep show."""
    spec_dec = spec_dec or {}
    settings = speculative_settings(spec_dec.get('depth'), spec_dec.get('num_steps'),
                                    spec_dec.get('eagle_topk'), spec_dec.get('num_draft_tokens'))
    adaptive = bool(spec_dec.get('algorithm')) and _switch('speculative adaptive', spec_dec.get('adaptive'))
    if adaptive and settings['num_steps'] is None and not spec_dec.get('adaptive_config'):
        settings = speculative_settings(depth=ADAPTIVE_DEFAULT_START_STEPS + 1)
    return dict(settings, adaptive=adaptive)


def _adaptive_settings(algorithm, settings, version, config):
    """The speculative shape for --speculative-adaptive: top-k 1 and a starting depth the
    version starts with (``adaptive_plan`` raises where it refuses to start)."""
    if str(algorithm).upper() not in ADAPTIVE_ALGORITHMS:
        raise LaunchArgsError('SGLang runs --speculative-adaptive only with %s; with %s it warns "speculative_adaptive '
                              'disabled" and serves the static depth' % ('/'.join(ADAPTIVE_ALGORITHMS), algorithm))
    if settings['eagle_topk'] not in (None, 1):
        raise LaunchArgsError('SGLang runs --speculative-adaptive only with top-k 1; with speculative_eagle_topk %d '
                              'it warns "speculative_adaptive disabled" and serves the static shape'
                              % settings['eagle_topk'])
    if settings['num_steps'] is None:
        if config:
            raise LaunchArgsError('speculative adaptive with adaptive_config %s needs a starting depth: one of the '
                                  'candidate steps in that file + 1' % config)
        settings = speculative_settings(depth=ADAPTIVE_DEFAULT_START_STEPS + 1)
    adaptive_plan(version, settings['num_steps'], config)
    return settings


def _adaptive_args(version, config):
    argv = ['--speculative-adaptive'] + _pairs(('--speculative-adaptive-config', config))
    parsed = _version(version)
    if parsed is None:
        argv.append(VERSION_DEPENDENT + '--disable-overlap-schedule on SGLang 0.5.11, which runs adaptive only '
                    'without the overlap scheduler>')
    elif OLDEST_CHECKED <= parsed <= ADAPTIVE_NEEDS_NO_OVERLAP_UNTIL:
        argv.append('--disable-overlap-schedule')
    return argv


# An option line of argparse's help: exactly two spaces (argparse indents every option
# by two; wrapped descriptions, which may start with "--flag" or end in "--disable-"
# where textwrap broke a word at a hyphen, are indented by far more), then the option
# strings ("-h, --help", "--model-path MODEL_PATH, --model MODEL_PATH", "--x {a,b}"),
# then two spaces or the end of the line before the description.
_OPTION_LINE = re.compile(r'^ {2}(-[^ ].*?)(?: {2,}|$)')
_OPTION = re.compile(r'^(--?[A-Za-z0-9][\w.-]*)(?:[ =](.*))?$')
_USAGE_OPTION = re.compile(r'(?<![\w-])(-{1,2}[A-Za-z0-9][\w.-]*)(?:[ =](\{[^}]*\}|[A-Z][A-Z0-9_]*))?')


def _value_shape(value):
    """(nargs, choices) from what follows an option string in the help: ``None`` (a
    switch), ``X`` (one value), ``[X]`` (?), ``[X ...]`` (*), ``X [X ...]`` (+),
    ``{a,b}`` choices."""
    if value is None:
        return 0, None
    value = value.strip()
    nargs = None
    if value.startswith('[') and value.endswith('...]'):
        nargs, value = '*', value[1:].split(' ')[0]
    elif value.startswith('['):
        nargs, value = '?', value[1:-1]
    elif value.endswith('...]'):
        nargs, value = '+', value.split(' ')[0]
    elif ' ' in value:
        nargs, value = len(value.split(' ')), value.split(' ')[0]
    choices = value[1:-1].split(',') if value.startswith('{') else None
    return nargs, choices


def parse_help(text, version=None, engine='sglang'):
    """The options of an argparse ``--help`` text.

    Returns ``{option: {'takes_value': bool, 'choices': [..] or None}}`` for every option
    string (aliases included), plus ``'nargs'`` (``'?'``, ``'*'``, ``'+'`` or a count)
    where an option takes other than one value. Both the usage (which
    lists every option: vLLM's ``--help`` prints only the usage and its config group
    names) and the options section are read; ``version`` adds the SGLang options that
    exist without help (``HIDDEN_OPTIONS``).
    """
    options = {}
    usage, in_usage = [], False
    for line in (text or '').splitlines():
        if line.startswith('usage:'):
            in_usage = True
        elif in_usage and not line.startswith(' '):
            in_usage = False
        if in_usage:
            usage.append(line)
            continue
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        for part in match.group(1).split(', '):
            option = _OPTION.match(part.strip())
            if option:
                _add_option(options, option.group(1), *_value_shape(option.group(2)))
    for flag, value in _USAGE_OPTION.findall(' '.join(usage)):
        if flag not in options:
            _add_option(options, flag, *_value_shape(value or None))
    for flag in hidden_options(version, engine):
        options.setdefault(flag, {'takes_value': True, 'choices': None})
    return options


def _add_option(options, flag, nargs, choices):
    options[flag] = {'takes_value': nargs != 0, 'choices': choices}
    if nargs not in (0, None):
        options[flag]['nargs'] = nargs


_NEGATIVE_NUMBER = re.compile(r'^-\d+$|^-\d*\.\d+$')


def _lookup(arg, options, where):
    """(flag, inline value or None) of an option argument, as argparse resolves it:
    exact, then ``--flag=value``, then a unique prefix; None for a value."""
    if not arg.startswith('-') or arg == '-' or _NEGATIVE_NUMBER.match(arg):
        return None
    if arg in options:
        return arg, None
    flag, has_inline, inline = arg.partition('=')
    if has_inline and flag in options:
        return flag, inline
    if arg.startswith('--'):
        matches = sorted(o for o in options if o.startswith(flag))
        if len(matches) > 1:
            raise LaunchArgsError('ambiguous option: %s could match %s: %s rejects it (exit 2)'
                                  % (flag, ', '.join(matches), where))
        if matches:
            return matches[0], inline if has_inline else None
    if ' ' in arg:
        return None
    hint = difflib.get_close_matches(flag, sorted(options), n=1)
    raise LaunchArgsError('unrecognized flag %s: %s does not accept it (not in its --help)%s'
                          % (flag, where, '; did you mean %s?' % hint[0] if hint else ''))


def check_argv(argv, options, version=None, engine='sglang'):
    """Raise LaunchArgsError naming the first argument of ``argv`` that the server whose
    ``options`` (from ``parse_help``) are given would reject, as its argparse parser does:
    an unknown flag, an ambiguous abbreviation (a unique one is what argparse accepts),
    a missing value, a value outside the option's choices, a stray value."""
    where = '%s %s' % (engine, version) if version else 'the installed %s' % engine
    argv = [str(arg) for arg in argv]
    index = 0
    while index < len(argv):
        found = _lookup(argv[index], options, where)
        if found is None:
            raise LaunchArgsError('unrecognized argument %r: %s takes no positional arguments (a value '
                                  'without its flag?)' % (argv[index], where))
        flag, inline = found
        index += 1
        option = options[flag]
        nargs = option.get('nargs') if option.get('takes_value') else 0
        if inline is not None:
            if nargs == 0:
                raise LaunchArgsError('flag %s takes no value, got %r' % (flag, inline))
            values = [inline]
        else:
            values = []
            while index < len(argv) and _lookup_value(argv[index], options) and _wants_more(nargs, values):
                values.append(argv[index])
                index += 1
            if not _enough(nargs, values):
                raise LaunchArgsError('flag %s needs a value' % flag)
        choices = option.get('choices')
        for value in values:
            if choices and value not in choices:
                raise LaunchArgsError('invalid value %r for %s: %s accepts %s'
                                      % (value, flag, where, ', '.join(choices)))
    return True


def _lookup_value(arg, options):
    """Whether argparse would take ``arg`` as a value rather than an option."""
    del options
    return not arg.startswith('-') or arg == '-' or bool(_NEGATIVE_NUMBER.match(arg)) or (
        ' ' in arg and not arg.startswith('--'))


def _wants_more(nargs, values):
    if nargs in (None, '?'):
        return not values
    if isinstance(nargs, int):
        return len(values) < nargs
    return True  # '*' and '+'


def _enough(nargs, values):
    if nargs is None or nargs == '+':
        return len(values) >= 1
    if isinstance(nargs, int):
        return len(values) == nargs
    return True


def shell_join(argv, flag_per_line=False):
    """One shell-safe string: every item stays one literal argument, whatever it holds.
    With ``flag_per_line``, every ``--flag`` after the first item starts a continuation line
    (`` \\`` then four spaces), so a diff of two commands shows which flags changed."""
    quoted = [shlex.quote(str(arg)) for arg in argv]
    if not flag_per_line:
        return ' '.join(quoted)
    text = quoted[0] if quoted else ''
    for arg, shown in zip(argv[1:], quoted[1:]):
        text += (' \\\n    ' if str(arg).startswith('--') else ' ') + shown
    return text


def systemd_quote(arg):
    """One argv item for a systemd ExecStart= line: double-quoted, with ``\\`` and
    ``"`` escaped, ``$`` and ``%`` doubled (no variable or specifier expansion)."""
    arg = str(arg)
    if '\n' in arg or '\r' in arg or '\x00' in arg:
        raise LaunchArgsError('argument %r holds a line break or NUL, which a unit file cannot carry' % arg)
    escaped = arg.replace('\\', '\\\\').replace('"', '\\"').replace('$', '$$').replace('%', '%%')
    return '"%s"' % escaped


def systemd_exec(argv):
    """An ExecStart= command line from ``argv`` (the first item must be an absolute path)."""
    argv = [str(arg) for arg in argv]
    if not argv or not argv[0].startswith('/'):
        raise LaunchArgsError('a systemd command must start with an absolute path, got %r'
                              % (argv[0] if argv else None))
    return ' '.join(systemd_quote(arg) for arg in argv)


_ENV_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def render_env_file(env):
    """``KEY="value"`` lines that systemd's EnvironmentFile=, a POSIX shell and
    ``parse_env_file`` all read back to exactly ``env`` (sorted by name)."""
    lines = []
    for name in sorted(env or {}):
        if not _ENV_NAME.match(str(name)):
            raise LaunchArgsError('environment variable name %r is not valid' % (name,))
        value = env[name]
        value = '' if value is None else str(value)
        if '\x00' in value or '\n' in value or '\r' in value:
            raise LaunchArgsError('environment variable %s holds a line break or NUL byte' % name)
        escaped = value.replace('\\', '\\\\').replace('"', '\\"').replace('$', '\\$').replace('`', '\\`')
        lines.append('%s="%s"\n' % (name, escaped))
    return ''.join(lines)


_ESCAPES = {'\\': '\\', '"': '"', '$': '$', '`': '`'}


def parse_env_file(text):
    """The dict ``render_env_file`` wrote (comments and blank lines ignored)."""
    env = {}
    for number, line in enumerate((text or '').splitlines(), 1):
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        name, sep, raw = line.partition('=')
        name = name.strip()
        if not sep or not _ENV_NAME.match(name):
            raise LaunchArgsError('line %d of the environment file is not NAME=value' % number)
        raw = raw.strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            out = []
            chars = iter(raw[1:-1])
            for char in chars:
                if char == '\\':
                    nxt = next(chars, '')
                    out.append(_ESCAPES.get(nxt, '\\' + nxt))
                else:
                    out.append(char)
            env[name] = ''.join(out)
        else:
            env[name] = raw
    return env


def launch_command(python, argv, engine='sglang', shim=None):
    """The full command: ``python [shim] -m-module argv``. With a shim (the launcher that
    moves the API key from the environment into the server's argv) the module name is
    the shim's first argument; without one it is ``python -m module``."""
    unknown = [str(arg) for arg in argv if str(arg).startswith(VERSION_DEPENDENT)]
    if unknown:
        raise LaunchArgsError('the launch argv was built without the server version, so %s is not known: '
                              'build it with the version and options sglang_launch_check reports'
                              % unknown[0])
    module = SERVER_MODULES[engine]
    head = [python, shim, module] if shim else [python, '-m', module]
    return head + list(argv)


# How each release loads weights (tests/releases/fixtures/sglang-<version>.json, the real argparse
# table of every release 0.5.11 ... 0.5.23; tied to every fixture by tests/unit/plugins/module_utils/
# test_sglang_weight_loading.py). --load-format choices, each with the first checked release that has it:
LOAD_FORMATS_SINCE = (
    ((0, 5, 11), ('auto', 'pt', 'safetensors', 'npcache', 'dummy', 'sharded_state', 'gguf', 'bitsandbytes',
                  'mistral', 'layered', 'flash_rl', 'remote', 'remote_instance', 'fastsafetensors', 'private',
                  'runai_streamer')),
    ((0, 5, 17), ('presharded',)),
    ((0, 5, 19), ('expert_pack',)),
    ((0, 5, 22), ('instanttensor',)),
)
# Weight-loading flags with the first checked release that has them (0.5.12.post1 is the first recorded
# 0.5.12). --weight-cache-mode takes {off, daemon, client} (default off) from 0.5.17.
WEIGHT_LOADING_FLAGS_SINCE = (
    ((0, 5, 11), ('--weight-loader-disable-mmap', '--weight-loader-prefetch-checkpoints',
                  '--weight-loader-prefetch-num-threads', '--model-loader-extra-config')),
    ((0, 5, 12), ('--weight-loader-drop-cache-after-load',)),
    ((0, 5, 17), ('--weight-cache-mode', '--weight-cache-socket', '--weight-cache-timeout')),
)
WEIGHT_CACHE_MODES = ('off', 'daemon', 'client')


def _since_label(since):
    return '.'.join(str(part) for part in since)


def weight_loading(version):
    """What this release offers to load weights: ``{load_formats, flags, weight_cache_modes}`` (lists;
    ``weight_cache_modes`` empty where there is no ``--weight-cache-mode``). None for a version older
    than the checked ones or unknown."""
    parsed = _version(version)
    if parsed is None or parsed < OLDEST_CHECKED:
        return None
    formats = [name for since, names in LOAD_FORMATS_SINCE if parsed >= since for name in names]
    flags = [flag for since, names in WEIGHT_LOADING_FLAGS_SINCE if parsed >= since for flag in names]
    return {
        'load_formats': formats,
        'flags': flags,
        'weight_cache_modes': list(WEIGHT_CACHE_MODES) if '--weight-cache-mode' in flags else [],
    }


def weight_loading_problems(version, load_format=None, flags=()):
    """Why ``--load-format load_format`` and ``flags`` would not work on this release, one message each
    naming the first release that has it (empty: fine, or a version this table does not know)."""
    offered = weight_loading(version)
    if offered is None:
        return []
    problems = []
    if load_format and load_format not in offered['load_formats']:
        since = [s for s, names in LOAD_FORMATS_SINCE if load_format in names]
        problems.append('--load-format %s needs SGLang %s or newer (this is %s)' % (
            load_format, _since_label(since[0]), version) if since
            else '--load-format %s is no choice of any checked SGLang release' % load_format)
    for flag in flags:
        if flag not in offered['flags']:
            since = [s for s, names in WEIGHT_LOADING_FLAGS_SINCE if flag in names]
            problems.append('%s needs SGLang %s or newer (this is %s)' % (flag, _since_label(since[0]), version)
                            if since else '%s is not a weight-loading flag this collection knows' % flag)
    return problems
