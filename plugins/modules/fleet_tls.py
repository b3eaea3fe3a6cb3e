#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
---
module: fleet_tls
short_description: A fleet CA and a certificate per host, for TLS between clients, the router and the servers
version_added: 1.1.0
description:
  - Keeps a private CA (C(ca.crt), C(ca.key)) and, for each host of O(hosts), a certificate and key
    (C(<host>.crt), C(<host>.key)) signed by it in the directory O(path). Run it on the controller
    (C(delegate_to=localhost), C(run_once=true)); the CA's key never leaves it; the sglang_server and
    sglang_router roles install each host's certificate and key from there (C(sglang_server_tls_cert) ...).
  - Made with the Python library C(cryptography), which every ansible-core installation has (ansible-core depends on
    it); community.crypto is not needed.
  - Keys are ECDSA P-256, written mode 0600; no key content is ever returned or shown in a diff.
  - A host certificate is made again where it is missing, not signed by the CA, not of its key, lacks a name of
    O(hosts), or has less than O(renew_days) left; the others are kept (idempotent).
author:
  - llmops.serving contributors (@llmops)
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  path:
    description: Directory of the CA and the certificates (created mode 0700).
    type: path
    required: true
  hosts:
    description:
      - Host name -> the names its certificate must carry (addresses and DNS names its clients connect to). The
        host name itself, C(127.0.0.1) and C(localhost) (the health checks on the host connect there) are always
        added.
    type: dict
    required: true
  ca_common_name:
    description: Common name of a new CA.
    type: str
    default: llmops.serving fleet CA
  valid_days:
    description: Days a new host certificate is valid.
    type: int
    default: 825
  ca_valid_days:
    description: Days a new CA is valid.
    type: int
    default: 3650
  renew_days:
    description: A host certificate with fewer days left is made again.
    type: int
    default: 30
notes:
  - Rotating the CA (delete C(ca.crt) and C(ca.key)) makes every host certificate again.
seealso:
  - module: llmops.serving.sglang_server
  - module: llmops.serving.sglang_router
'''

EXAMPLES = r'''
- name: Make the fleet CA and a certificate for every server and router
  llmops.serving.fleet_tls:
    path: "{{ playbook_dir }}/../tls"
    hosts:
      gpu-01: [10.0.0.11, gpu-01.example.com]
      gpu-02: [10.0.0.12]
      router-1: [10.0.0.5]
  delegate_to: localhost
  run_once: true
'''

RETURN = r'''
ca_cert:
  description: Path of the CA's certificate (C(llmops_tls_ca_cert)).
  returned: always
  type: str
  sample: /srv/ansible/tls/ca.crt
certificates:
  description: Host -> the paths of its certificate and key, and the names the certificate carries.
  returned: always
  type: dict
  sample: {"gpu-01": {"cert": "/srv/ansible/tls/gpu-01.crt", "key": "/srv/ansible/tls/gpu-01.key",
                      "names": ["gpu-01", "10.0.0.11", "127.0.0.1", "localhost"]}}
made:
  description: Host -> why its certificate was (or in check mode would be) made again; the CA under C(ca).
  returned: always
  type: dict
  sample: {"gpu-02": "missing"}
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import _tls

ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    hosts=dict(type='dict', required=True),
    ca_common_name=dict(type='str', default=_tls.DEFAULT_CA_NAME),
    valid_days=dict(type='int', default=_tls.DEFAULT_DAYS),
    ca_valid_days=dict(type='int', default=_tls.DEFAULT_CA_DAYS),
    renew_days=dict(type='int', default=30),
)
ALWAYS_NAMES = ('127.0.0.1', 'localhost')


def read(path):
    try:
        with open(path, encoding='ascii') as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def write(module, path, content, mode):
    """Writes ``content`` to ``path`` with ``mode`` from its creation (a key is never readable by others)."""
    tmp = path + '.tmp'
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, 'w') as handle:
            handle.write(content)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
        os.chmod(path, mode)
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot write %s: %s' % (path, exc))


def host_names(host, names):
    if isinstance(names, str):
        names = [names]
    return [str(host)] + [str(n) for n in (names or []) if n] + list(ALWAYS_NAMES)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params, check = module.params, module.check_mode
    path = params['path']
    made = {}
    if not os.path.isdir(path) and not check:
        os.makedirs(path, 0o700)
    ca_cert_path, ca_key_path = os.path.join(path, 'ca.crt'), os.path.join(path, 'ca.key')
    ca_cert, ca_key = read(ca_cert_path), read(ca_key_path)
    try:
        if not ca_cert or not ca_key:
            made['ca'] = 'missing'
            ca_cert, ca_key = _tls.make_ca(params['ca_common_name'], params['ca_valid_days'])
            if not check:
                write(module, ca_key_path, ca_key, 0o600)
                write(module, ca_cert_path, ca_cert, 0o644)
        certificates = {}
        for host, names in sorted((params['hosts'] or {}).items()):
            names = host_names(host, names)
            cert_path, key_path = os.path.join(path, '%s.crt' % host), os.path.join(path, '%s.key' % host)
            cert, key = read(cert_path), read(key_path)
            reason = 'missing' if not cert or not key else _tls.renewal_reason(
                cert, key, ca_cert, names, params['renew_days'])
            if reason:
                made[host] = reason
                if not check:
                    cert, key = _tls.make_host_cert(ca_cert, ca_key, host, names, params['valid_days'])
                    write(module, key_path, key, 0o600)
                    write(module, cert_path, cert, 0o644)
            elif not check and (os.stat(key_path).st_mode & 0o077):
                os.chmod(key_path, 0o600)
                made[host] = 'key mode'
            certificates[host] = {'cert': cert_path, 'key': key_path, 'names': list(dict.fromkeys(names))}
    except _tls.TLSError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=bool(made), ca_cert=ca_cert_path, certificates=certificates, made=made)


if __name__ == '__main__':
    main()
