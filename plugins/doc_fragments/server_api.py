# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment(object):

    # Options of every module that talks to an SGLang or vLLM server over HTTP.
    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the server, for example V(http://127.0.0.1:30000).
      - With multi-node SGLang, use node rank 0 (other ranks answer 200 on /health always).
    type: str
    required: true
  api_key:
    description:
      - API key of the server (C(--api-key)), sent as a C(Authorization) header with the
        C(Bearer) scheme. SGLang does not check it on /health and /metrics, but every other
        endpoint needs it.
      - Never printed.
    type: str
attributes:
  action_group:
    description: Use C(group/llmops.serving.llm_server) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - llmops.serving.llm_server
"""

    # HTTP options of the modules that make their requests with Ansible's open_url
    # (argument spec: SERVER_ARGUMENT_SPEC in plugins/module_utils/_server_api.py).
    HTTP = r"""
options:
  headers:
    description:
      - Extra HTTP headers for every request. Values of C(Authorization), C(X-API-Key),
        C(Api-Key) and C(Proxy-Authorization) headers are hidden from output like O(api_key).
    type: dict
    default: {}
  validate_certs:
    description: Validate TLS certificates for C(https://) URLs.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's (or router's) certificate, for C(https://) URLs (the fleet CA,
        C(llmops_tls_ca_cert)); unset, the system's CAs.
    type: path
    version_added: 1.1.0
  use_proxy:
    description: Use proxies from the environment (C(https_proxy), C(no_proxy)...).
    type: bool
    default: true
  request_timeout:
    description: Seconds one HTTP request may take before it counts as a timeout.
    type: float
    default: 5.0
"""
