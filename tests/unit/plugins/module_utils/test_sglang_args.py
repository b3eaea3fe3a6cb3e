"""Tests of plugins/module_utils/_sglang_args.py: depth rule, version-aware flags,
argv building, --help checking and inert rendering."""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args as a

HELP_0_5_15 = """usage: sglang serve [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
                    [--speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
                        The tensor parallelism size.
  --host HOST           The host of the HTTP server.
  --port PORT           The port of the HTTP server.
  --enable-metrics      Enable log prometheus metrics.
  --cuda-graph-max-bs CUDA_GRAPH_MAX_BS
                        Deprecated alias of --cuda-graph-max-bs-decode.
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
                        Set the maximum batch size for decode cuda graph.
  --served-model-name SERVED_MODEL_NAME
                        Override the model name.
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
                        Speculative algorithm.
  --speculative-draft-model-path SPECULATIVE_DRAFT_MODEL_PATH
                        The path of the draft model weights.
  --speculative-num-steps SPECULATIVE_NUM_STEPS
  --speculative-eagle-topk SPECULATIVE_EAGLE_TOPK
  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS
"""


@pytest.mark.parametrize('depth, steps', [(16, 15), (10, 9), (5, 4), (2, 1)])
def test_depth_becomes_steps_topk_draft_tokens(depth, steps):
    assert a.speculative_settings(depth=depth) == {
        'depth': depth, 'num_steps': steps, 'eagle_topk': 1, 'num_draft_tokens': depth}


@pytest.mark.parametrize('kwargs, message', [
    ({'depth': 100}, 'speculative depth must be at most 32, got 100'),
    ({'depth': 33}, 'speculative depth must be at most 32, got 33'),
    ({'num_steps': 99}, 'speculative_num_steps must be at most 31, got 99'),
    ({'num_steps': 3, 'eagle_topk': 17, 'num_draft_tokens': 8}, 'speculative_eagle_topk must be at most 16, got 17'),
])
def test_depth_beyond_the_sane_range_is_refused(kwargs, message):
    """Issue 23, case 8: depth 100 became --speculative-num-steps 99."""
    with pytest.raises(a.LaunchArgsError, match=message):
        a.speculative_settings(**kwargs)
    assert a.speculative_settings(depth=32)['num_steps'] == 31


@pytest.mark.parametrize('kwargs, expected', [
    ({}, {'depth': None, 'num_steps': None, 'eagle_topk': None, 'num_draft_tokens': None}),
    ({'num_steps': 9}, {'depth': 10, 'num_steps': 9, 'eagle_topk': 1, 'num_draft_tokens': 10}),
    ({'num_steps': 4, 'eagle_topk': 1, 'num_draft_tokens': 5},
     {'depth': 5, 'num_steps': 4, 'eagle_topk': 1, 'num_draft_tokens': 5}),
    ({'num_steps': 5, 'eagle_topk': 4, 'num_draft_tokens': 8},
     {'depth': None, 'num_steps': 5, 'eagle_topk': 4, 'num_draft_tokens': 8}),
    ({'depth': 16, 'num_steps': 15, 'eagle_topk': 1, 'num_draft_tokens': 16},
     {'depth': 16, 'num_steps': 15, 'eagle_topk': 1, 'num_draft_tokens': 16}),
])
def test_explicit_values_accepted(kwargs, expected):
    assert a.speculative_settings(**kwargs) == expected


@pytest.mark.parametrize('kwargs, words', [
    ({'depth': 16, 'num_steps': 16}, ['depth 16', 'num_steps 15', 'contradicts']),
    ({'depth': 10, 'eagle_topk': 4}, ['eagle_topk 1', 'contradicts']),
    ({'eagle_topk': 1}, ['need speculative_num_steps']),
    ({'num_draft_tokens': 8}, ['need speculative_num_steps']),
    ({'num_steps': 4, 'eagle_topk': 1, 'num_draft_tokens': 8}, ['num_steps + 1 = 5', 'silently']),
    ({'num_steps': 3, 'eagle_topk': 2, 'num_draft_tokens': 8}, ['3 * 2 + 1 = 7']),
    ({'num_steps': 3, 'eagle_topk': 2}, ['needs speculative_num_draft_tokens']),
    ({'depth': 1}, ['at least 2']),
    ({'depth': 'ten'}, ['integer']),
    ({'depth': True}, ['integer']),
    ({'depth': 2.5}, ['integer']),
])
def test_inconsistent_values_rejected_with_explanation(kwargs, words):
    with pytest.raises(a.LaunchArgsError) as err:
        a.speculative_settings(**kwargs)
    for word in words:
        assert word in str(err.value)


SPEC = {'model_path': '/models/target', 'served_model_name': 'llama', 'tp_size': 8,
        'host': '127.0.0.1', 'port': 30000,
        'speculative': {'algorithm': 'EAGLE3', 'draft_model_path': '/models/eagle3', 'depth': 16}}


def test_sglang_argv_depth_16():
    argv = a.build_argv(SPEC, version='0.5.15.post1')
    assert argv == ['--model-path', '/models/target', '--served-model-name', 'llama', '--tp-size', '8',
                    '--host', '127.0.0.1', '--port', '30000',
                    '--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', '/models/eagle3',
                    '--speculative-num-steps', '15', '--speculative-eagle-topk', '1',
                    '--speculative-num-draft-tokens', '16']
    assert '--num-speculative-tokens' not in argv


def test_vllm_argv_speculative_config_from_same_depth():
    argv = a.build_argv(dict(SPEC, engine='vllm', mem_fraction_static=0.5, max_running_requests=32))
    assert argv[:2] == ['--model', '/models/target']
    assert '--tensor-parallel-size' in argv and '--max-num-seqs' in argv and '--gpu-memory-utilization' in argv
    config = json.loads(argv[argv.index('--speculative-config') + 1])
    assert config == {'method': 'eagle3', 'model': '/models/eagle3', 'num_speculative_tokens': 15}
    assert not any(arg.startswith('--speculative-num') for arg in argv)


@pytest.mark.parametrize('version, flag', [
    ('0.5.11', '--cuda-graph-max-bs'), ('0.5.13', '--cuda-graph-max-bs'),
    ('0.5.15.post1', '--cuda-graph-max-bs-decode'), ('0.5.23', '--cuda-graph-max-bs-decode'),
])
def test_cuda_graph_flag_per_version(version, flag):
    argv = a.build_argv({'model_path': 'm', 'cuda_graph_max_bs': 8}, version=version)
    assert argv[-2:] == [flag, '8']


def test_cuda_graph_flag_follows_help_when_known():
    options = {'--model-path': {'takes_value': True}, '--cuda-graph-max-bs': {'takes_value': True}}
    argv = a.build_argv({'model_path': 'm', 'cuda_graph_max_bs': 8}, version='0.5.15', options=options)
    assert argv[-2:] == ['--cuda-graph-max-bs', '8']


# Real 0.5.11 has fixed choices (DFLASH among them, upper case only); 0.5.12 on take any
# string (tests/releases/fixtures).
@pytest.mark.parametrize('version, algorithm, accepted', [
    ('0.5.11', 'DFLASH', True), ('0.5.11', 'eagle3', False), ('0.5.12', 'eagle3', True),
    ('0.5.17', 'DFLASH', True), ('0.5.23', 'DFLASH', True)])
def test_algorithm_choices_per_version(version, algorithm, accepted):
    spec = {'model_path': 'm', 'speculative': {'algorithm': algorithm, 'draft_model_path': 'd', 'depth': 5}}
    if accepted:
        assert algorithm in a.build_argv(spec, version=version)
    else:
        with pytest.raises(a.LaunchArgsError, match='EAGLE\\|EAGLE3'):
            a.build_argv(spec, version=version)


@pytest.mark.parametrize('spec, message', [
    ({}, 'model_path is required'),
    ({'model_path': 'm', 'engine': 'trt'}, 'engine must be one of'),
    ({'model_path': 'm', 'api_key': 'x'}, 'does not belong in the argv'),
    ({'model_path': 'm', 'speculative': {'depth': 5}}, 'no speculative algorithm'),
    ({'model_path': 'm', 'speculative': {'algorithm': 'EAGLE3', 'depth': 5}}, 'needs a drafter'),
    ({'model_path': 'm', 'mem_fraction_static': 1.5}, 'between 0 and 1'),
    ({'model_path': 'm', 'port': 'http'}, 'port must be an integer'),
    ({'model_path': 'm', 'extra_args': ['--num-speculative-tokens', '16']}, 'SGLang has no such flag'),
    ({'model_path': 'm', 'extra_args': 'x'}, 'extra_args must be'),
])
def test_bad_specs_rejected(spec, message):
    with pytest.raises(a.LaunchArgsError, match=message):
        a.build_argv(spec)


@pytest.mark.parametrize('extra, flag', [
    (['--api-key', 'hunter2'], '--api-key'), (['--api-key=hunter2'], '--api-key'), (['--api-k', 'hunter2'], '--api-key'),
    (['--api_key', 'hunter2'], '--api-key'), ({'api_key': 'hunter2'}, '--api-key'),
    (['--admin-api-key', 'hunter2'], '--admin-api-key'), ({'ssl-keyfile-password': 'hunter2'}, '--ssl-keyfile-password'),
])
def test_secrets_in_extra_args_are_refused_naming_the_variable(extra, flag):
    with pytest.raises(a.LaunchArgsError) as refused:
        a.build_argv({'model_path': 'm', 'extra_args': extra})
    assert 'extra_args holds %s, a secret' % flag in str(refused.value) and 'hunter2' not in str(refused.value)
    if flag == '--api-key':
        assert 'set sglang_server_api_key instead' in str(refused.value)


def test_extra_args_that_only_look_like_secret_flags_pass():
    extra = ['--ssl-keyfile', '/etc/k.pem', '--attention-backend', 'triton']
    assert a.build_argv({'model_path': 'm', 'extra_args': extra})[2:] == extra


@pytest.mark.parametrize('extra, expected', [
    (['--attention-backend', 'triton', '--enable-metrics'], ['--attention-backend', 'triton', '--enable-metrics']),
    ({'attention_backend': 'triton', 'enable-metrics': True, 'x': False, '--cuda-graph-bs': [1, 2],
      'disable_radix_cache': None},
     ['--attention-backend', 'triton', '--enable-metrics', '--cuda-graph-bs', '1', '--cuda-graph-bs', '2']),
    ({'mem-frac': 0.25}, ['--mem-frac', '0.25']),
])
def test_extra_args(extra, expected):
    assert a.build_argv({'model_path': 'm', 'extra_args': extra})[2:] == expected


def test_parse_help_options_and_choices():
    options = a.parse_help(HELP_0_5_15)
    assert options['--model-path'] == {'takes_value': True, 'choices': None}
    assert options['--model'] == {'takes_value': True, 'choices': None}
    assert options['--enable-metrics'] == {'takes_value': False, 'choices': None}
    assert options['-h'] == {'takes_value': False, 'choices': None}
    assert options['--speculative-algorithm']['choices'] == ['EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM']
    assert '--tensor-parallel-size' in options and '--speculative-num-draft-tokens' in options


def test_parse_help_of_a_real_argparse_parser():
    code = ('import argparse; p = argparse.ArgumentParser(prog="sglang serve"); '
            'p.add_argument("--model-path", "--model"); p.add_argument("--enable-metrics", action="store_true");'
            'p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3"], help="x" * 200);'
            'p.add_argument("--a-very-long-option-name-that-wraps", type=int, help="y"); p.print_help()')
    text = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    options = a.parse_help(text)
    assert set(options) == {'-h', '--help', '--model-path', '--model', '--enable-metrics',
                            '--speculative-algorithm', '--a-very-long-option-name-that-wraps'}
    assert options['--speculative-algorithm']['choices'] == ['EAGLE', 'EAGLE3']


@pytest.mark.parametrize('argv, message', [
    (['--model-path', 'm', '--num-speculative-tokens', '16'], 'unrecognized flag --num-speculative-tokens'),
    (['--model-path', 'm', '--cuda-graph-max-bs-decod3', '8'], 'did you mean --cuda-graph-max-bs-decode'),
    (['--model-path', 'm', '--cuda-graph-max', '8'], 'ambiguous option: --cuda-graph-max could match'),
    (['--model-path', 'm', '--speculative-algorithm', 'MEDUSA'], "invalid value 'MEDUSA'"),
    (['--model-path', 'm', '--speculative-algorithm=MEDUSA'], "invalid value 'MEDUSA'"),
    (['--model-path'], 'needs a value'),
])
def test_check_argv_names_the_bad_flag(argv, message):
    with pytest.raises(a.LaunchArgsError, match=message):
        a.check_argv(argv, a.parse_help(HELP_0_5_15), version='0.5.15.post1')


def test_check_argv_values_that_look_like_flags():
    # as argparse: a negative number is a value, a "--word" is an option (so the flag before
    # it lacks its value), a unique prefix is the option it abbreviates
    options = a.parse_help(HELP_0_5_15)
    assert a.check_argv(['--served-model-name', 'x', '--enable-metrics', '--port', '-1'], options)
    assert a.check_argv(['--model-path', 'm', '--cuda-graph-max-bs-dec', '8'], options)
    with pytest.raises(a.LaunchArgsError, match='--served-model-name needs a value'):
        a.check_argv(['--served-model-name', '--not-a-flag'], options)


def test_build_argv_checks_against_help():
    with pytest.raises(a.LaunchArgsError, match='unrecognized flag --attention-backend'):
        a.build_argv(dict(SPEC, extra_args=['--attention-backend', 'triton']), version='0.5.15.post1',
                     options=a.parse_help(HELP_0_5_15))
    assert a.build_argv(SPEC, version='0.5.15.post1', options=a.parse_help(HELP_0_5_15))


NASTY = ['a b', "it's", 'say "hi"', 'x; rm -rf /', '$(touch /tmp/pwned)', '`id`', '$HOME', '%n', 'back\\slash',
         '', '*', '--flag=1 2']


@pytest.mark.parametrize('value', NASTY)
def test_shell_join_keeps_one_literal_argument(value):
    argv = ['printf', '%s\\0', value, 'end']
    out = subprocess.run(['sh', '-c', a.shell_join(argv)], capture_output=True, check=True).stdout
    assert out.split(b'\0') == [value.encode(), b'end', b'']
    assert shlex.split(a.shell_join(argv)) == argv


def test_shell_join_one_flag_per_line_runs_the_same_argv():
    """The launch script's form: a diff of two commands shows one changed flag per line."""
    argv = ['printf', '%s\\0', '--port', '30000', '--served-model-name', NASTY[3], '--flag=1 2', '-x', 'end']
    text = a.shell_join(argv, flag_per_line=True)
    expected = ["printf '%s\\0' \\", '    --port 30000 \\', "    --served-model-name 'x; rm -rf /' \\",
                "    '--flag=1 2' -x end"]
    assert text.split('\n') == expected
    out = subprocess.run(['sh', '-c', text], capture_output=True, check=True).stdout
    assert out.split(b'\0')[:-1] == [arg.encode() for arg in argv[2:]]
    assert a.shell_join(argv[:1], flag_per_line=True) == 'printf' and a.shell_join([], flag_per_line=True) == ''


@pytest.mark.parametrize('value', NASTY)
def test_systemd_quote_escapes(value):
    quoted = a.systemd_quote(value)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert _systemd_unquote(quoted) == value


def _systemd_unquote(word):
    # systemd's reading of one double-quoted ExecStart= word: \\ and \" are escapes,
    # $$ and %% stand for $ and %; a lone $ or % would be expanded.
    out, i, inner = [], 0, word[1:-1]
    while i < len(inner):
        pair = inner[i:i + 2]
        if pair in ('\\\\', '\\"', '$$', '%%'):
            out.append(pair[1])
            i += 2
        else:
            assert inner[i] not in '$%"\\', 'unescaped %r in %r' % (inner[i], word)
            out.append(inner[i])
            i += 1
    return ''.join(out)


def test_systemd_exec_requires_absolute_path_and_single_lines():
    assert a.systemd_exec(['/usr/bin/python3', '-m', 'x']) == '"/usr/bin/python3" "-m" "x"'
    with pytest.raises(a.LaunchArgsError, match='absolute path'):
        a.systemd_exec(['python3'])
    with pytest.raises(a.LaunchArgsError, match='line break'):
        a.systemd_exec(['/bin/x', 'a\nb'])


@pytest.mark.parametrize('env', [
    {}, {'NCCL_DEBUG': 'WARN', 'CUDA_VISIBLE_DEVICES': '0,1,2,3'},
    {'K': 'a "quoted" $value `cmd` \\ back', 'EMPTY': '', 'NUM': 8},
])
def test_env_file_round_trip(env, tmp_path):
    text = a.render_env_file(env)
    assert a.parse_env_file(text) == {k: str(v) for k, v in env.items()}
    # A shell reading the same file gets the same values (systemd's quoting is a subset).
    path = tmp_path / 'env'
    path.write_text(text)
    for name, value in env.items():
        out = subprocess.run(['sh', '-c', '. "$1"; printf %%s "$%s"' % name, 'sh', str(path)],
                             capture_output=True, check=True).stdout.decode()
        assert out == str(value)


@pytest.mark.parametrize('env', [{'1BAD': 'x'}, {'A-B': 'x'}, {'A': 'x\x00'}, {'A': 'two\nlines'}])
def test_env_file_rejects_bad_entries(env):
    with pytest.raises(a.LaunchArgsError):
        a.render_env_file(env)


def test_launch_command_with_and_without_shim():
    assert a.launch_command('/py', ['--x'], engine='vllm') == ['/py', '-m', 'vllm.entrypoints.openai.api_server', '--x']
    assert a.launch_command('/py', ['--x'], shim='/s.py') == ['/py', '/s.py', 'sglang.launch_server', '--x']


@pytest.mark.parametrize('text, expected', [
    ('0.5.15.post1', (0, 5, 15)), ('v0.5.23', (0, 5, 23)), ('1', (1, 0, 0)), ('0', (0, 0, 0)), (None, None)])
def test_parse_version(text, expected):
    assert a.parse_version(text) == expected


def test_unreadable_version_is_an_error_not_another_versions_rules():
    # one parse_version (module_utils/_version.py) for every module: 'dev' used to read as
    # "no version" here and as an error in _eagle3
    with pytest.raises(a.LaunchArgsError, match="'dev' is not a version"):
        a.build_argv({'model_path': 'm', 'cuda_graph_max_bs': 8}, version='dev')


VLLM_STYLE_HELP = """usage: api_server.py [-h] [--headless] [--model MODEL]
                     [--served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]]
                     [--enable-log-requests | --no-enable-log-requests]
                     [--runner {auto,draft,generate,pooling}]
                     [--speculative-config SPECULATIVE_CONFIG]
                     [model_tag]

vLLM OpenAI-Compatible RESTful API server.

Config Groups:
  ModelConfig             Configuration for the model.
"""


def test_parse_help_reads_the_usage_when_options_are_not_listed():
    options = a.parse_help(VLLM_STYLE_HELP)
    assert options['--model'] == {'takes_value': True, 'choices': None}
    assert options['--served-model-name']['takes_value'] is True
    assert options['--no-enable-log-requests'] == {'takes_value': False, 'choices': None}
    assert options['--runner']['choices'] == ['auto', 'draft', 'generate', 'pooling']
    assert 'ModelConfig' not in options and '--headless' in options
    argv = a.build_argv({'engine': 'vllm', 'model_path': '/m', 'served_model_name': 'x',
                         'speculative': {'algorithm': 'EAGLE3', 'draft_model_path': '/d', 'depth': 4}})
    assert a.check_argv(argv, options, engine='vllm')
    with pytest.raises(a.LaunchArgsError, match='unrecognized flag --tensor-parallel-size'):
        a.check_argv(argv + ['--tensor-parallel-size', '2'], options, engine='vllm')


# Multi-node groups (issue 19): tp_size counts the GPUs of every host of the group.
GROUP = dict(SPEC, tp_size=16, nnodes=2, node_rank=1, dist_init_addr='10.0.0.1:5000')


def test_multinode_argv_per_host():
    argv = a.build_argv(GROUP, version='0.5.15.post1')
    assert argv[argv.index('--tp-size') + 1] == '16'
    assert argv[argv.index('--port') + 2:argv.index('--port') + 8] == [
        '--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:5000']
    assert '--dist-timeout' not in argv
    timed = a.build_argv(dict(GROUP, node_rank=0, dist_timeout=900), version='0.5.15.post1')
    assert timed[timed.index('--node-rank') + 1] == '0' and timed[timed.index('--dist-timeout') + 1] == '900'


def test_one_host_argv_has_no_multinode_flags():
    assert a.build_argv(dict(SPEC, nnodes=1, node_rank=0, dist_init_addr=''), version='0.5.15.post1') == \
        a.build_argv(SPEC, version='0.5.15.post1')


@pytest.mark.parametrize('change, message', [
    ({'node_rank': 2}, 'node_rank 2 is outside a group of 2 hosts'),
    ({'node_rank': -1}, 'node_rank must be at least 0'),
    ({'dist_init_addr': ''}, 'dist_init_addr must be <rank 0 host>:<port>'),
    ({'dist_init_addr': '10.0.0.1'}, 'dist_init_addr must be <rank 0 host>:<port>'),
    ({'tp_size': 9}, 'tp_size counts the GPUs of the whole group: 9 is not a multiple of nnodes 2'),
    ({'nnodes': 0}, 'nnodes must be at least 1'),
    ({'engine': 'vllm'}, 'a multi-node group is an SGLang setting'),
])
def test_bad_multinode_specs_rejected(change, message):
    with pytest.raises(a.LaunchArgsError, match=message):
        a.build_argv(dict(GROUP, **change))


@pytest.mark.parametrize('version', ['0.5.11', '0.5.15.post1', '0.5.23'])
def test_multinode_argv_parses_in_the_real_releases(version):
    from ansible_collections.llmops.serving.tests.releases import releases
    spec = dict(GROUP, dist_timeout=1200)
    argv = a.build_argv(spec, version=version,
                        options=a.parse_help(releases.help_text(version), version=version))
    values = vars(releases.parse(version, argv))
    assert (values['nnodes'], values['node_rank'], values['dist_init_addr'], values['dist_timeout']) == \
        (2, 1, '10.0.0.1:5000', 1200)
    assert values[releases.find(releases.load(version), '--tp-size')['dest']] == 16


def test_admin_key_problem_names_the_variable_and_what_lacks_the_flag():
    assert a.admin_key_problem('sglang', '0.5.15.post1', {'--admin-api-key': {}, '--api-key': {}}) is None
    assert a.admin_key_problem('sglang', '0.5.15.post1', None) is None
    problem = a.admin_key_problem('sglang', '0.5.10', {'--api-key': {}})
    assert problem == ('sglang_server_admin_api_key is set, but SGLang 0.5.10 has no --admin-api-key; upgrade SGLang '
                       'or unset sglang_server_admin_api_key for this host')
    assert 'vllm has no admin key' in a.admin_key_problem('vllm', '0.11.0', {'--api-key': {}})


@pytest.mark.parametrize('fixture', sorted(glob.glob(os.path.join(
    os.path.dirname(__file__), '..', '..', '..', 'releases', 'fixtures', 'sglang-*.json'))))
def test_every_recorded_release_has_the_admin_key_flag(fixture):
    """The releases' own parsers (tests/releases/fixtures): --admin-api-key in each, so the plan refuses it
    only on a release outside them (read from the installed server's --help)."""
    with open(fixture) as handle:
        flags = [flag for option in json.load(handle)['options'] for flag in option['options']]
    assert a.ADMIN_KEY_FLAG in flags
