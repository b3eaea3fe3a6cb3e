# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``sglang_install`` role decides: the pins, the driver, what to install, who refuses it.

Private helper (not an API). Used on the controller by the action plugin ``sglang_install_plan`` and
on the host by the module ``venv_requirements`` (which runs ``PROBE`` with the virtualenv's python);
it stays importable by the host's python (no controller-only imports).
"""

from __future__ import annotations

import json
import re

# Run by the virtualenv's python: argv = [--import MODULE] REQUIREMENT...; prints
# {"packages": {requirement: installed version or null}, "missing": [...], "version": module.__version__}.
# "missing" lists the requirements not satisfied: name==V is met by V and, as pip does, by V+local (2.11.0+cu130).
PROBE = '''\
import importlib, importlib.metadata as md, json, sys
args, module = sys.argv[1:], None
if args[:1] == ['--import']:
    module, args = args[1], args[2:]
out = {'packages': {}, 'missing': []}
for req in args:
    name, _, want = req.partition('==')
    try:
        have = md.version(name.strip())
    except md.PackageNotFoundError:
        have = None
    out['packages'][req] = have
    if have is None or (have.lower() != want.strip().lower() and have.lower().split('+')[0] != want.strip().lower()):
        out['missing'].append(req)
if module:
    out['version'] = str(getattr(importlib.import_module(module), '__version__', ''))
print(json.dumps(out))
'''

PIN = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*==[^=<>!~*,; ]+$')


def unpinned_message(packages):
    """The refusal of the entries of ``sglang_install_packages`` that are not ``name==version``, else None."""
    unpinned = [package for package in packages if not PIN.match(package)]
    if not unpinned:
        return None
    return ('sglang_install_packages: %s not pinned: write each as name==version (e.g. torch==2.11.0), so that every '
            'host gets the same release and a rerun installs nothing' % ', '.join(unpinned))


def driver_message(gpus, engine, host, nvidia_smi_path):
    """The refusal of a host whose nvidia-smi does not work (``gpus``: llmops.serving.gpu_memory's result), else None."""
    if gpus.get('ready'):
        return None
    if gpus.get('error') == 'missing':
        problem = '%s (sglang_install_nvidia_smi_path) not found' % nvidia_smi_path
    else:
        problem = re.sub(r'[.]$', '', gpus.get('msg') or 'nvidia-smi failed')
    return ('%s needs a working NVIDIA driver on %s: %s. Install the driver, set sglang_install_nvidia_smi_path to its '
            'nvidia-smi, or set sglang_install_check_driver: false to skip this check on a CPU or test host.'
            % (engine, host, problem))


# The transfer engine a prefill/decode server's backend loads (SGLang imports it at start-up; none is a dependency
# of the sglang wheel), per CUDA major version of the host's torch. The ``nixl`` meta package (1.5.2) pins a wheel
# that is not published: the CUDA-specific package is installed instead.
TRANSFER_ENGINES = {
    'mooncake': {'12': 'mooncake-transfer-engine', '13': 'mooncake-transfer-engine-cuda13'},
    'nixl': {'12': 'nixl-cu12', '13': 'nixl-cu13'},
}
# The backends of each engine (null is SGLang's default, mooncake; fake loads none).
TRANSFER_ENGINE_OF = {None: 'mooncake', 'mooncake': 'mooncake', 'mooncake_tcp': 'mooncake', 'nixl': 'nixl'}


def _name(requirement):
    return re.split(r'[=<>!~ ;\[]', requirement, 1)[0].strip().lower().replace('_', '-')


def transfer_engine_requirements(mode, backend, cuda, versions):
    """The transfer engine pins a server of ``mode`` (sglang_server_disaggregation_mode: prefill, decode or None)
    with ``backend`` (its transfer backend, None for SGLang's default mooncake) needs: none without a mode or with
    ``fake``. ``cuda``: the CUDA major version of the host's torch (``'12'`` or ``'13'``); ``versions``: engine ->
    version (``mooncake``, ``nixl``)."""
    if not mode or backend == 'fake':
        return []
    engine = TRANSFER_ENGINE_OF.get(backend)
    if engine is None:
        raise ValueError('sglang_install_transfer_backend %s is no transfer backend this collection installs an '
                         'engine for (mooncake, mooncake_tcp, nixl, fake)' % backend)
    return ['%s==%s' % (TRANSFER_ENGINES[engine][str(cuda)], versions[engine])]


def requirements(package, version, packages, transfer_engines=()):
    """The pins to install: the engine's, then ``sglang_install_packages``, then the ``transfer_engines``
    (``transfer_engine_requirements``) that ``sglang_install_packages`` does not pin itself."""
    pinned = set(_name(item) for item in packages)
    return ['%s==%s' % (package, version)] + list(packages) + [
        item for item in transfer_engines if _name(item) not in pinned]


def wheelhouse_on_host(wheelhouse, on_host, dest):
    """The wheelhouse pip reads on the host ('' for the package index)."""
    if not wheelhouse:
        return ''
    return wheelhouse if on_host else dest


def pip_extra_args(wheelhouse, extra_args):
    """pip's extra arguments: the wheelhouse (a path on the host) and ``sglang_install_pip_extra_args``; None for none."""
    args = ('--no-index --find-links ' + wheelhouse) if wheelhouse else ''
    return ('%s %s' % (args, extra_args)).strip() or None


def refusal_message(venv, missing, host, venvs):
    """The refusal to pip into ``venv`` when a process runs it or a good configuration names it
    (``venvs``: llmops.serving.release_venvs' ``venvs``), else None."""
    found = next((item for item in venvs if item.get('path') == venv.rstrip('/')), {})
    users = []
    if found.get('in_use'):
        users.append('run by PID ' + ', '.join(str(pid) for pid in found['in_use']))
    if found.get('records'):
        users.append('named by the good configuration(s) ' + ', '.join(found['records']))
    if not users:
        return None
    return ("%s misses %s but on %s it is %s: installing would change a server's engine under it. Pin the release in "
            "another virtualenv (a new sglang_install_version or sglang_install_packages names a new one; or set "
            "sglang_install_venv), deploy the servers onto it, then install again; nothing was installed"
            % (venv, ', '.join(missing), host, ' and '.join(users)))


def would_install_message(missing, venv, had, wheelhouse):
    """What check mode says it would install (``wheelhouse``: the controller's, '' for the package index)."""
    return 'would install %s into %s (installed now: %s) from %s' % (
        ', '.join(missing), venv, json.dumps(had) if had else 'no virtualenv',
        ('the wheelhouse ' + wheelhouse) if wheelhouse else 'the package index')


def verify_message(engine, python, venv, probe):
    """Why the engine is not installed as pinned after the install (``probe``: PROBE's answer and its
    ``rc``, ``stderr``), else None."""
    if probe['rc'] != 0:
        lines = (probe.get('stderr') or '').splitlines() or ['']
        return 'import %s failed in %s: %s' % (engine, python, lines[-1])
    if probe['missing']:
        return 'after the install, %s not satisfied in %s (installed: %s)' % (
            ', '.join(probe['missing']), venv, json.dumps(probe['packages']))
    return None
