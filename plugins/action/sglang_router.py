# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_router: validates the task's arguments against the module's spec, refuses
workers the router cannot have (none; servers of other hosts bound to a loopback address, module_utils/_router.py)
before the host is touched, then runs the module on the router's host. It reads the task's arguments, and of the
hosts it names (this one and those of O(workers)) only their connection: servers and router that both run on the
controller (connection local) share its loopback address."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.llmops.serving.plugins.module_utils import _router, _tls
from ansible_collections.llmops.serving.plugins.modules.sglang_router import ARGUMENT_SPEC


# The role variable of each TLS option, for messages.
TLS_VARIABLES = {'tls_cert': 'sglang_router_tls_cert', 'tls_key': 'sglang_router_tls_key', 'ca_cert': 'sglang_router_tls_ca_cert',
                 'client_cert': 'sglang_router_client_cert', 'client_key': 'sglang_router_client_key'}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def tls_content(self, args):
        """``{name: PEM}`` of the router's TLS files, read on the controller from the paths of the task's options
        (O(tls_cert) ...); a ValueError names the variable of a file that cannot be read or that does not fit."""
        content = {}
        for name, variable in TLS_VARIABLES.items():
            if not args.get(name):
                continue
            try:
                with open(self._loader.path_dwim(args[name]), encoding='utf-8') as handle:
                    content[name] = handle.read()
            except (IOError, OSError, UnicodeDecodeError) as exc:
                raise ValueError('%s is %s, which cannot be read on the controller (%s)'
                                 % (variable, args[name], getattr(exc, 'strerror', None) or type(exc).__name__))
        for cert, key in (('tls_cert', 'tls_key'), ('client_cert', 'client_key')):
            if bool(content.get(cert)) != bool(content.get(key)):
                raise ValueError('%s and %s go together: set both or neither' % (TLS_VARIABLES[cert], TLS_VARIABLES[key]))
            if content.get(cert) and not _tls.key_matches(content[cert], content[key]):
                raise ValueError('%s is not the key of %s' % (TLS_VARIABLES[key], TLS_VARIABLES[cert]))
        return content

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        host, workers = task_vars['inventory_hostname'], args['workers'] or {}
        hostvars = task_vars.get('hostvars') or {}
        local = task_vars.get('ansible_connection') == 'local'
        local_hosts = [name for name in workers if local and (hostvars.get(name) or {}).get('ansible_connection') == 'local']
        problem = _router.worker_problem(host, args['worker_group'] or 'sglang_servers', workers, local_hosts)
        if problem:
            result.update(failed=True, msg=problem)
            return result
        module_args = dict(self._task.args)
        module_args.pop('tls_content', None)
        try:
            content = self.tls_content(args)
            if content:
                module_args['tls_content'] = content
        except ValueError as exc:
            result.update(failed=True, msg='%s: %s; nothing was stopped or changed' % (host, exc))
            return result
        try:
            result.update(self._execute_module(module_name=self._task.action, module_args=module_args,
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
