# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server arguments of the simulated SGLang: defaults, SGLang's rules, /server_info (TEST DOUBLE)."""

from __future__ import annotations

import copy
import json
import os
import random

from sglang._flags import HERE

INT_KEYS = {
    'context_length', 'max_running_requests', 'max_queued_requests', 'max_total_tokens', 'prefill_max_requests',
    'speculative_num_steps', 'speculative_eagle_topk', 'speculative_num_draft_tokens', 'cuda_graph_max_bs_decode',
    'cuda_graph_max_bs_prefill', 'cuda_graph_max_bs', 'random_seed', 'nccl_port', 'dist_timeout', 'pp_max_micro_batch_size',
}
FLOAT_KEYS = {'mem_fraction_static'}
# Values that the recorded run set through flags; back to SGLang's defaults here.
RECORDED_RUN_VALUES = {
    'model_path': None, 'tokenizer_path': None, 'mem_fraction_static': None, 'max_running_requests': None,
    'served_model_name': None, 'random_seed': None, 'enable_metrics': False, 'attention_backend': None,
    'sampling_backend': None, 'cuda_graph_max_bs_decode': None, 'speculative_algorithm': None,
    'speculative_draft_model_path': None, 'speculative_draft_model_revision': None, 'speculative_num_steps': None,
    'speculative_eagle_topk': None, 'speculative_num_draft_tokens': None,
}
SPEC_ALGORITHMS = ('EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM', 'DFLASH')
DEFAULT_MEM_FRACTION = 0.88
DEFAULT_CONTEXT_LENGTH = 4096


class ServerArgsError(ValueError):
    pass


def template():
    with open(os.path.join(HERE, 'server_info-0.5.15.post1.json'), encoding='utf-8') as f:
        return json.load(f)


def _convert(key, value):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, list):
        return [_convert(key, v) for v in value]
    if key in INT_KEYS:
        return int(value)
    if key in FLOAT_KEYS:
        return float(value)
    return value


def read_model_config(model_path):
    try:
        with open(os.path.join(model_path, 'config.json'), encoding='utf-8') as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def resolve(namespace, log):
    """Apply SGLang's defaults and rules to the parsed flags; return the server-args dict (ordered like ServerArgs)."""
    info = template()
    args = {}
    for key, value in info.items():
        if key == 'status':
            break
        args[key] = RECORDED_RUN_VALUES.get(key, value)
    parsed = vars(namespace)
    for key, value in parsed.items():
        if value is None or value is False:
            continue
        if key in args or key == 'cuda_graph_max_bs':
            default = args.get(key)
            if isinstance(default, int) and not isinstance(default, bool) and not isinstance(value, list):
                value = int(value)
            elif isinstance(default, float) and not isinstance(value, list):
                value = float(value)
            else:
                value = _convert(key, value)
            args[key] = value
    if 'cuda_graph_max_bs' in args:  # <= 0.5.13 name
        args['cuda_graph_max_bs_decode'] = args.pop('cuda_graph_max_bs')
    args['tokenizer_path'] = args['tokenizer_path'] or args['model_path']
    args['served_model_name'] = args['served_model_name'] or args['model_path']
    if args['random_seed'] is None:
        args['random_seed'] = random.randint(0, 1 << 30)
    if args['mem_fraction_static'] is None:
        args['mem_fraction_static'] = DEFAULT_MEM_FRACTION
    if args['nnodes'] > 1 and not args['dist_init_addr']:
        raise ServerArgsError('--dist-init-addr must be set when --nnodes > 1')
    algo = args['speculative_algorithm']
    if algo is not None:
        if algo.upper() not in SPEC_ALGORITHMS:
            raise ServerArgsError('Unknown speculative algorithm: %s' % algo)
        args['speculative_algorithm'] = algo = algo.upper()
        if algo in ('EAGLE', 'EAGLE3') and not args['speculative_draft_model_path']:
            raise ServerArgsError('--speculative-draft-model-path is required for %s' % algo)
        if args['speculative_num_steps'] is None:
            if args['speculative_eagle_topk'] is not None or args['speculative_num_draft_tokens'] is not None:
                raise ServerArgsError('--speculative-eagle-topk and --speculative-num-draft-tokens must not be set '
                                      'when --speculative-num-steps is not set')
            archs = read_model_config(args['model_path']).get('architectures') or ['LlamaForCausalLM']
            if 'Llama' in archs[0]:
                steps, topk, draft = 5, 4, 8
            else:
                steps, topk, draft = 3, 1, 4
            args.update(speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=draft)
        if args['speculative_eagle_topk'] is None:
            args['speculative_eagle_topk'] = 1
        if args['speculative_num_draft_tokens'] is None:
            args['speculative_num_draft_tokens'] = args['speculative_num_steps'] + 1
        if args['speculative_eagle_topk'] == 1 and args['speculative_num_draft_tokens'] != args['speculative_num_steps'] + 1:
            log('speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1')
            args['speculative_num_draft_tokens'] = args['speculative_num_steps'] + 1
        if args.get('speculative_adaptive') and args['speculative_eagle_topk'] != 1:
            raise ServerArgsError('--speculative-adaptive requires --speculative-eagle-topk 1')
        if args['speculative_draft_model_revision'] is None:
            args['speculative_draft_model_revision'] = 'main'
        if parsed.get('max_running_requests') is None:
            args['max_running_requests'] = 48
            log('Max running requests is reset to 48 for speculative decoding. You can override this by explicitly '
                'setting --max-running-requests.')
    max_bs = args['cuda_graph_max_bs_decode'] or (8 if algo else 256)
    bs = [b for b in [1, 2, 3, 4, 5, 6, 7, 8] if b <= max_bs] if algo else [b for b in [1, 2, 4, 8] if b <= max_bs]
    bs += list(range(16, max_bs + 1, 8))
    args['cuda_graph_config'] = copy.deepcopy(args['cuda_graph_config'])
    args['cuda_graph_config']['decode'].update(max_bs=max_bs, bs=bs)
    return args


def _repr(value):
    if isinstance(value, dict) and 'decode' in value and 'prefill' in value:
        return 'CudaGraphConfig(%s)' % ', '.join(
            '%s=PhaseConfig(%s)' % (k, ', '.join('%s=%r' % kv for kv in v.items())) for k, v in value.items())
    return repr(value)


def server_args_repr(args):
    return 'ServerArgs(%s)' % ', '.join('%s=%s' % (k, _repr(v)) for k, v in args.items())


def server_info(args, version, context_length, max_total_num_tokens, engine=None, memory=None):
    """The body of /server_info: server args, status, limits, internal_states[0], version."""
    info = template()
    state_template = info['internal_states'][0]
    body = dict(args)
    body.update(status='ready', max_total_num_tokens=max_total_num_tokens, max_req_input_len=context_length - 6)
    state = dict(args)
    state.update(context_length=context_length, disable_chunked_prefix_cache=True,
                 pp_max_micro_batch_size=args['max_running_requests'] or 4096)
    for key, value in state_template.items():
        if key not in args:
            state[key] = value
    state['max_speculative_num_draft_tokens'] = args['speculative_num_draft_tokens']
    state['effective_max_running_requests_per_dp'] = args['max_running_requests'] or 4096
    if memory:
        state['memory_usage'] = memory
    if engine is not None:
        state['last_gen_throughput'] = engine.last_gen_throughput
        if engine.avg_spec_accept_length is not None:
            state['avg_spec_accept_length'] = engine.avg_spec_accept_length
    body.update(internal_states=[state], version=version, kv_events=None)
    return body
