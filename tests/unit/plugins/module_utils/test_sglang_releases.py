# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_sglang_args against the real parser of every SGLang release 0.5.11 ... 0.5.23
(tests/releases/fixtures, built from the PyPI wheels by tests/releases/extract.py).

Every case asks the release's own option table (rebuilt as an argparse parser) and the
collection the same question and requires the same answer."""

from __future__ import annotations

import functools

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args as a
from ansible_collections.llmops.serving.plugins.module_utils import _wait as wait
from ansible_collections.llmops.serving.tests.releases import releases

VERSIONS = releases.versions()
SPEC = {'model_path': '/models/kimi', 'served_model_name': 'kimi', 'tp_size': 8, 'host': '0.0.0.0',
        'port': 30000, 'mem_fraction_static': 0.85, 'max_running_requests': 64, 'cuda_graph_max_bs': 16,
        'enable_metrics': True, 'trust_remote_code': True}
EAGLE3 = {'algorithm': 'EAGLE3', 'draft_model_path': '/models/drafter'}
MULTI_NODE = ['--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:5000']
# name -> (speculative, extra_args, expected num_steps/topk/draft tokens or None)
DEPLOYS = {
    'depth 16': (dict(EAGLE3, depth=16), [], (15, 1, 16)),
    'depth 10': (dict(EAGLE3, depth=10), [], (9, 1, 10)),
    'depth 5': (dict(EAGLE3, depth=5), [], (4, 1, 5)),
    # adaptive starts at depth 8 (steps 7, a candidate of every release) unless a depth is given
    'adaptive': (dict(EAGLE3, adaptive=True), [], (7, 1, 8)),
    'adaptive config': (dict(EAGLE3, depth=4, adaptive=True, adaptive_config='/etc/llmops/adaptive.json'), [],
                        (3, 1, 4)),
    'no speculation': ({}, [], None),
    'multi-node': (dict(EAGLE3, depth=5), MULTI_NODE, (4, 1, 5)),
    'extra args': (dict(EAGLE3, depth=5), {'chunked_prefill_size': 4096, 'disable_radix_cache': True}, (4, 1, 5)),
}


def dest(version, option):
    return releases.find(releases.load(version), option)['dest']


def real_accepts(version, argv):
    try:
        releases.parse(version, argv)
    except releases.ParseError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def help_options(version):
    return a.parse_help(releases.help_text(version), version=version)


def ours_accepts(version, argv):
    try:
        a.check_argv(argv, help_options(version), version=version)
    except a.LaunchArgsError:
        return False
    return True


@pytest.mark.parametrize('version', VERSIONS)
@pytest.mark.parametrize('deploy', sorted(DEPLOYS))
def test_deploy_argv_parses_as_intended(version, deploy):
    speculative, extra, shape = DEPLOYS[deploy]
    spec = dict(SPEC, speculative=speculative, extra_args=extra)
    argv = a.build_argv(spec, version=version)
    # the launcher shim adds the API key in memory; the real parser must take it too
    values = vars(releases.parse(version, argv + ['--api-key', 'k3y']))
    assert values[dest(version, '--model-path')] == '/models/kimi'
    assert values[dest(version, '--tp-size')] == 8
    assert values['port'] == 30000 and values['host'] == '0.0.0.0' and values['api_key'] == 'k3y'
    assert values['mem_fraction_static'] == 0.85 and values['max_running_requests'] == 64
    assert values['enable_metrics'] is True and values['trust_remote_code'] is True
    assert values[dest(version, a.cuda_graph_max_bs_flag(version))] == 16
    if shape is None:
        assert values['speculative_algorithm'] is None
    else:
        assert values['speculative_algorithm'] == 'EAGLE3'
        assert values['speculative_draft_model_path'] == '/models/drafter'
        assert (values['speculative_num_steps'], values['speculative_eagle_topk'],
                values['speculative_num_draft_tokens']) == shape
    if deploy.startswith('adaptive'):
        assert values['speculative_adaptive'] is True
        assert values['speculative_adaptive_config'] == speculative.get('adaptive_config')
        # 0.5.11 disables adaptive (falls back to static) unless the overlap scheduler is off
        assert values['disable_overlap_schedule'] is (
            'disable_overlap_schedule' in releases.load(version)['adaptive']['disabled_unless'])
    if deploy == 'multi-node':
        assert (values['nnodes'], values['node_rank'], values['dist_init_addr']) == (2, 1, '10.0.0.1:5000')
    if deploy == 'extra args':
        assert values['chunked_prefill_size'] == 4096 and values['disable_radix_cache'] is True
    # with the release's --help as the options, the same argv comes out and passes the check
    options = a.parse_help(releases.help_text(version), version=version)
    assert a.build_argv(spec, version=version, options=options) == argv


@pytest.mark.parametrize('version', VERSIONS)
def test_parse_help_reads_every_option_of_the_real_help(version):
    fixture = releases.load(version)
    options = a.parse_help(releases.help_text(version), version=version)
    assert set(options) == releases.option_strings(fixture)
    for entry in fixture['options']:
        for option in entry['options']:
            parsed = options[option]
            assert parsed['takes_value'] is not bool(entry.get('flag')), option
            if entry.get('choices') and not entry.get('help_hidden'):
                assert sorted(parsed['choices']) == sorted(entry['choices']), option
            if entry['nargs'] in ('?', '*', '+'):
                assert parsed.get('nargs') == entry['nargs'], option


@pytest.mark.parametrize('version', VERSIONS)
def test_tables_agree_with_the_release(version):
    fixture = releases.load(version)
    algorithm = releases.find(fixture, '--speculative-algorithm')
    assert a.algorithm_choices(version) == (tuple(algorithm['choices']) if 'choices' in algorithm else None)
    flag = releases.find(fixture, a.cuda_graph_max_bs_flag(version))
    assert flag is not None and not flag.get('deprecated')
    hidden = sorted(o for entry in fixture['options'] if entry.get('help_hidden') for o in entry['options'])
    assert sorted(a.hidden_options(version)) == hidden


def _slot_order(table):
    return [table[key] for key in sorted(table, key=int)]


@pytest.mark.parametrize('version', VERSIONS)
def test_adaptive_tables_agree_with_the_release(version):
    """The default candidates, where each batch-size slot starts for every depth, whether the
    release refuses a starting depth outside its candidates and whether it needs the overlap
    scheduler off: as the release's own adaptive_spec_params.py computed them."""
    facts = releases.load(version)['adaptive']
    candidates = a.adaptive_candidates(version)
    assert {str(slot): steps for slot, steps in candidates.items()} == facts['candidate_steps']
    union = sorted({step for steps in candidates.values() for step in steps})
    for steps, starts in facts['start_steps'].items():
        steps = int(steps)
        if facts['rejects_other_num_steps'] and steps not in union:
            with pytest.raises(a.LaunchArgsError, match='refuses to start .* --speculative-num-steps %d' % steps):
                a.adaptive_plan(version, steps)
            continue
        plan = a.adaptive_plan(version, steps)
        assert [slot['start_steps'] for slot in plan['slots']] == starts, steps
        added = facts['added_candidate_steps'].get(str(steps)) or [[]] * len(plan['slots'])
        assert [slot['candidate_steps'] for slot in plan['slots']] == [
            sorted(default + more) for default, more in zip(_slot_order(facts['candidate_steps']), added)], steps
    assert (a.parse_version(version) >= a.ADAPTIVE_REJECTS_OTHER_STEPS_SINCE) is facts['rejects_other_num_steps']
    assert (a.parse_version(version) <= a.ADAPTIVE_NEEDS_NO_OVERLAP_UNTIL) is (
        'disable_overlap_schedule' in facts['disabled_unless'])
    assert {'speculative_algorithm', 'speculative_eagle_topk'} <= set(facts['disabled_unless'])


def test_adaptive_label_says_what_sglang_runs():
    # the issue-14 case: depth 16 with adaptive is not "adaptive from depth 16"
    assert a.adaptive_plan('0.5.11', 15)['label'] == 'adaptive (batch 1+ depth 2/4/8 from 8)'
    assert a.adaptive_plan('0.5.12.post1', 15)['label'] == 'adaptive (batch 1+ depth 2/4/8/16 from 16)'
    assert a.adaptive_plan('0.5.13.post1', 15)['label'] == (
        'adaptive (batch 1-7 depth 2/4/8 from 4; batch 8-31 depth 2/4 from 4; batch 32+ depth 2)')
    assert a.adaptive_plan('0.5.15.post1', 7)['label'] == (
        'adaptive (batch 1-7 depth 2/4/8 from 8; batch 8-31 depth off/2/4 from 2; batch 32-63 depth off/2 from 2; '
        'batch 64+ depth off)')
    assert a.adaptive_plan('0.5.23', 7)['slots'][0] == {'batch_size': 1, 'candidate_steps': [1, 3, 5, 7],
                                                        'start_steps': 7}
    for version in ('0.5.14', '0.5.15.post1', '0.5.23'):
        with pytest.raises(a.LaunchArgsError, match=r'candidate steps 0, 1, 3, .*7, i\.e\. speculative depth 2, 4, '):
            a.adaptive_plan(version, 15)
    assert a.adaptive_plan(None, 7) == {'slots': None,
                                        'label': 'adaptive from depth 8 (candidates: depend on the SGLang version)'}
    assert a.adaptive_plan('0.5.23', 9, config='/etc/a.json')['label'] == (
        'adaptive from depth 10 (candidates: as /etc/a.json sets them)')


@pytest.mark.parametrize('speculative, message', [
    (dict(EAGLE3, depth=16, adaptive=True), 'refuses to start with --speculative-adaptive'),
    (dict(EAGLE3, adaptive=True, adaptive_config='/a.json'), 'needs a starting depth'),
    (dict(EAGLE3, depth=8, adaptive_config='/a.json'), 'adaptive is off'),
    (dict(EAGLE3, num_steps=3, eagle_topk=2, num_draft_tokens=6, adaptive=True), 'only with top-k 1'),
    (dict(EAGLE3, algorithm='NGRAM', depth=4, adaptive=True), 'only with EAGLE/EAGLE3'),
    (dict(EAGLE3, depth=8, adaptive='sometimes'), 'must be true or false'),
    ({'adaptive': True}, 'no speculative algorithm'),
])
def test_adaptive_spec_refused_where_sglang_would_not_run_it(speculative, message):
    with pytest.raises(a.LaunchArgsError, match=message):
        a.build_argv(dict(SPEC, speculative=speculative), version='0.5.15.post1')


def test_adaptive_argv_without_version_is_a_preview():
    argv = a.build_argv(dict(SPEC, speculative=dict(EAGLE3, adaptive='true')), version='0.5.23')
    assert argv[-7:] == ['--speculative-num-steps', '7', '--speculative-eagle-topk', '1',
                         '--speculative-num-draft-tokens', '8', '--speculative-adaptive']
    assert a.build_argv(dict(SPEC, speculative=dict(EAGLE3, adaptive=True)), version='0.5.11')[-2:] == [
        '--speculative-adaptive', '--disable-overlap-schedule']
    preview = a.build_argv(dict(SPEC, speculative=dict(EAGLE3, adaptive=True)))
    with pytest.raises(a.LaunchArgsError, match='built without the server version'):
        a.launch_command('/usr/bin/python3', preview)
    with pytest.raises(a.LaunchArgsError, match='vLLM has no such mode'):
        a.build_argv(dict(SPEC, engine='vllm', cuda_graph_max_bs=None, speculative=dict(EAGLE3, adaptive=True)))


# argv tails after "--model-path m": each is accepted or rejected by each release's parser,
# and _sglang_args must say the same (the issue-14 cases first)
ARGV_CASES = [
    ['--encoder-only'],
    ['--encoder-only', '--bogus-flag'],
    ['--forward-pass-metrics-worker-id', 'w0'],
    ['--disable-'], ['--cuda-graph-'], ['--grpc-mode.'], ['--grpc-mode'],
    ['--cuda-graph-max-bs', '8'], ['--cuda-graph-bs', '8'], ['--cuda-graph-max-bs-decode', '8'],
    ['--speculative-algorithm', 'DFLASH'], ['--speculative-algorithm', 'eagle3'],
    ['--speculative-adaptive'], ['--speculative-draft-window-size', '4'],
    ['--tensor-parallel-size', '8'], ['--model', 'x'], ['--data-parallel-size', '2'],
    ['--speculative-draft-model', 'd'], ['--nccl-init-addr', 'h:1'],
    ['--tp', '8'], ['--served-model-name', '--enable-metrics'], ['--port', '-1'],
    ['--attention-backend', 'fa3'], ['--attention-backend', 'nonsense'],
    ['--lora-target-modules'], ['--lora-target-modules', 'q_proj', 'k_proj'],
    ['stray'], ['--enable-metrics=yes'], ['--num-speculative-tokens', '16'],
]


@pytest.mark.parametrize('version', VERSIONS)
def test_check_argv_answers_as_the_real_parser(version):
    disagreements = []
    for tail in ARGV_CASES:
        argv = ['--model-path', 'm'] + tail
        real, ours = real_accepts(version, argv), ours_accepts(version, argv)
        if real != ours:
            disagreements.append((tail, 'real parser accepts' if real else 'real parser rejects'))
    assert not disagreements


def test_the_issue_cases_differ_between_releases():
    # the cases above are not vacuous: the releases disagree among themselves
    assert real_accepts('0.5.19', ['--model-path', 'm', '--cuda-graph-max-bs', '8'])
    assert not real_accepts('0.5.23', ['--model-path', 'm', '--cuda-graph-max-bs', '8'])
    assert not real_accepts('0.5.11', ['--model-path', 'm', '--speculative-algorithm', 'eagle3'])
    assert real_accepts('0.5.11', ['--model-path', 'm', '--speculative-algorithm', 'DFLASH'])
    assert not real_accepts('0.5.23', ['--model-path', 'm', '--encoder-only', '--bogus-flag'])
    assert real_accepts('0.5.23', ['--model-path', 'm', '--forward-pass-metrics-worker-id', 'w0'])


def test_without_a_version_the_argv_is_a_preview_that_never_reaches_a_host():
    argv = a.build_argv(SPEC)
    placeholder = [arg for arg in argv if arg.startswith(a.VERSION_DEPENDENT)]
    assert placeholder and '--cuda-graph-max-bs' not in argv and '--cuda-graph-max-bs-decode' not in argv
    with pytest.raises(a.LaunchArgsError, match='built without the server version'):
        a.launch_command('/venv/bin/python', argv)
    for version in VERSIONS:  # the placeholder is no option of any release
        assert not real_accepts(version, ['--model-path', 'm'] + placeholder)
    # the version-independent part of the preview is what every release gets
    argv_0_5_23 = a.build_argv(SPEC, version='0.5.23')
    assert [arg for arg in argv if arg not in placeholder] == [
        arg for arg in argv_0_5_23 if arg not in ('--cuda-graph-max-bs-decode',)]


def test_ready_exists_from_0_5_20_free_of_the_api_key_and_not_on_node_ranks():
    # what wait_for_llm_health's readiness default rests on (_wait.READY_PATH): /ready from
    # 0.5.20 on; before, the API key guards every path but /health and /metrics (a keyless
    # /ready is 401, not 404); ranks >= 1 serve /health but no /ready (404)
    for version in VERSIONS:
        http = releases.load(version)['http']
        assert http['ready'] == (releases.version_key(version) >= (0, 5, 20)), version
        assert ('/ready' in http['routes']) == http['ready'] == ('/ready' in http['auth_free_prefixes'])
        assert {'/health', '/metrics'} <= set(http['auth_free_prefixes'])
        assert wait.HEALTH_PATH in http['rank_routes'] and wait.READY_PATH not in http['rank_routes']
        # /server_info exists everywhere; /get_server_info is deprecated in every release
        assert '/server_info' in http['routes'] and '/get_server_info' in http['deprecated_routes']


def test_readme_support_matrix_is_the_one_generated_from_the_fixtures():
    from ansible_collections.llmops.serving.tests.releases import support_matrix
    with open(support_matrix.README, encoding='utf-8') as handle:
        written = support_matrix.readme_block(handle.read())
    # stale: python tests/releases/support_matrix.py --write
    assert written == support_matrix.block()
    newest, oldest = support_matrix.rows()[0], support_matrix.rows()[-1]
    assert newest[0] == VERSIONS[-1] and oldest[0] == VERSIONS[0] == '0.5.11'
    ready = support_matrix.HEADER.index('/ready')
    assert [row[0] for row in support_matrix.rows() if row[ready] == 'yes'] == ['0.5.23', '0.5.22', '0.5.21', '0.5.20']
    mla = support_matrix.HEADER.index('Kimi-K2.5 MLA drafter (real loader)')
    assert [row[0] for row in support_matrix.rows() if row[mla].startswith('refused')] == ['0.5.11']
