# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of llmops.serving.sglang_server: reads only its task's arguments (validated against the
module's ARGUMENT_SPEC; the hostvars only for the addresses of the group's hosts). ``state=planned`` refuses
what cannot work before the host is touched (module_utils/_server_plan.py), runs the host's launch check
(llmops.serving.sglang_launch_check), reads the state of the process (llmops.serving.server_process) or of
the unit (ansible.builtin.systemd_service), compares the launch files rendered from the role's templates with
the host's (llmops.serving.launch_files in check mode) and returns the plan with the decision
(module_utils/_server_role.py). ``state=present`` writes the launch files of the plan it is given;
``state=started``/``restarted`` also starts or restarts the server as the plan decided."""

from __future__ import annotations

import os
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader

from ansible_collections.llmops.serving.plugins.module_utils import _server_plan, _server_role, _sglang_args, _tls
from ansible_collections.llmops.serving.plugins.modules.sglang_server import ARGUMENT_SPEC

# The module's options that are not role options of the plan.
OWN_OPTIONS = ('state', 'plan', 'restart', 'shim', 'stop_timeout', 'restored', 'rollback_reason')
# The variables the templates render: the environment file's lines (templates/env.j2) and the unit's ExecStart
# (templates/sglang.service.j2), and the names of the environment variables the launcher shim reads
# (templates/llmops_launch.py.j2).
ENVIRONMENT = '__sglang_server_environment'
EXEC_START = '__sglang_server_exec_start'
API_KEY_FILE_ENV = 'LLMOPS_SERVER_API_KEY_FILE'
ADMIN_API_KEY_FILE_ENV = 'LLMOPS_SERVER_ADMIN_API_KEY_FILE'
USER_ENV = 'LLMOPS_SERVER_USER'
# Tries of the server user's creation, and the pause before try N (N times this, in seconds): see create_user.
USER_TRIES = 4
USER_RETRY_PAUSE = 0.5
# The role variable of each TLS option, for messages.
_TLS_VARIABLES = {'tls_cert': 'sglang_server_tls_cert', 'tls_key': 'sglang_server_tls_key', 'tls_ca_cert': 'sglang_server_tls_ca_cert'}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def module(self, name, args, task_vars, check_mode=None, diff=None):
        """Runs the module ``name`` on the host; ``check_mode`` and ``diff`` (where not None) override the task's."""
        saved = self._task.check_mode, self._task.diff
        try:
            if check_mode is not None:
                self._task.check_mode = check_mode
            if diff is not None:
                self._task.diff = diff
            return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        finally:
            self._task.check_mode, self._task.diff = saved

    def create_user(self, options, task_vars):
        """ansible.builtin.user for the server's user, tried up to USER_TRIES times. Two servers of one machine in one
        batch (two inventory hosts, one address: a prefill and a decode) both find the user missing and create it at
        once: one useradd wins, the other fails on the lock of /etc/passwd or on the user it did not find a moment
        before. Tried again, the module finds the user there and only checks it (idempotent), so a failure that a
        second try clears is no failure; the last try's stands."""
        args = {'name': options['sglang_server_user'], 'home': options['sglang_server_user_home'],
                'groups': options['sglang_server_user_groups'], 'system': True, 'create_home': True,
                'shell': '/usr/sbin/nologin', 'append': True}
        changed = False
        for attempt in range(USER_TRIES):
            if attempt:
                time.sleep(USER_RETRY_PAUSE * attempt)
            created = self.module('ansible.builtin.user', args, task_vars)
            changed = changed or bool(created.get('changed'))
            if not created.get('failed'):
                break
        return dict(created, changed=changed)

    def launch_files_args(self, options, plan, task_vars, compare):
        """The arguments of llmops.serving.launch_files: the plan's launch files rendered from the role's templates."""
        # Without an admin key the shim and the environment file are those of 1.0.0: upgrading restarts nothing.
        admin_key = options['sglang_server_admin_api_key'] or ''
        admin_env = ADMIN_API_KEY_FILE_ENV if admin_key else ''
        env = _server_role.environment(options['sglang_server_env'], options['sglang_server_gpus'],
                                       options['sglang_server_user'], plan, API_KEY_FILE_ENV, USER_ENV, admin_env)
        lookup = lookup_loader.get('ansible.builtin.template', loader=self._loader, templar=self._templar)
        try:
            exec_start = _sglang_args.systemd_exec(plan['command']) if plan.get('launcher') == 'systemd' else ''
            template_vars = {ENVIRONMENT: _sglang_args.render_env_file(env), EXEC_START: exec_start,
                             'sglang_server_plan': plan, '__sglang_server_api_key_file_env': API_KEY_FILE_ENV,
                             '__sglang_server_user_env': USER_ENV, '__sglang_server_admin_api_key_file_env': admin_env}
        except _sglang_args.LaunchArgsError as exc:
            raise AnsibleActionFail('%s: %s' % (task_vars['inventory_hostname'], exc))

        def render(src):
            return lookup.run([src], variables=task_vars, template_vars=template_vars)[0]

        user, api_key = options['sglang_server_user'], options['sglang_server_api_key'] or ''
        secrets = [{'path': plan['env_file'], 'mode': '0600', 'content': render(_server_role.ENV_TEMPLATE)}]
        if api_key:
            secrets.append({'path': plan['api_key_file'], 'mode': '0600', 'owner': user, 'content': api_key + '\n'})
        if admin_key:
            secrets.append({'path': plan['admin_api_key_file'], 'mode': '0600', 'owner': user,
                            'content': admin_key + '\n'})
        # TLS: the certificate and the CA readable by all, the key by the server's user alone (mode 0600).
        try:
            material = self.tls_material(options)
        except _tls.TLSError as exc:
            raise AnsibleActionFail(str(exc))
        for item in material:
            if item['secret']:
                secrets.append({'path': item['dest'], 'mode': '0600', 'owner': user, 'content': item['content']})
            else:
                secrets.append({'path': item['dest'], 'mode': '0644', 'content': item['content']})
        args = {'directories': [{'path': options['sglang_server_config_dir']},
                                {'path': os.path.dirname(options['sglang_server_log_path'])}],
                'files': [{'path': template['dest'], 'mode': template['mode'], 'content': render(template['src'])}
                          for template in plan['templates']],
                'secrets': secrets,
                'absent': ([] if api_key else [plan['api_key_file']]) + ([] if admin_key else [plan['admin_api_key_file']]),
                'users': [{'name': user, 'groups': options['sglang_server_user_groups'] or []}] if plan['switch_user'] else []}
        if compare:
            args['last_good'] = plan['last_good']
        return args

    def tls_material(self, options):
        """``[{option, dest, content, secret}]``: the TLS files of the server read from the controller (the paths of
        tls_cert, tls_key and tls_ca_cert), each with the path it has on the host. Raises _tls.TLSError naming the
        variable where a file cannot be read."""
        if not options.get('sglang_server_tls_cert'):
            return []
        files = _tls.server_tls_files(options['sglang_server_config_dir'], options['sglang_server_name'])
        material = []
        for option, flag_name, secret in (('tls_cert', 'ssl_certfile', False), ('tls_key', 'ssl_keyfile', True),
                                          ('tls_ca_cert', 'ssl_ca_certs', False)):
            src = options.get('sglang_server_' + option)
            if not src:
                continue
            try:
                with open(self._loader.path_dwim(src), encoding='utf-8') as handle:
                    content = handle.read()
            except (IOError, OSError, UnicodeDecodeError) as exc:
                raise _tls.TLSError('%s is %s, which cannot be read on the controller (%s)'
                                    % (_TLS_VARIABLES[option], src, getattr(exc, 'strerror', None) or type(exc).__name__))
            material.append({'option': option, 'dest': files[flag_name], 'content': content, 'secret': secret})
        return material

    def tls_problem(self, host, options):
        """Why the server's TLS material cannot serve (naming the host and the variable), else None."""
        try:
            material = dict((item['option'], item['content']) for item in self.tls_material(options))
            if not material:
                return None
            if 'tls_key' not in material:
                return '%s: sglang_server_tls_cert is set without sglang_server_tls_key' % host
            if not _tls.key_matches(material['tls_cert'], material['tls_key']):
                return '%s: sglang_server_tls_key is not the key of sglang_server_tls_cert' % host
            if 'tls_ca_cert' in material and not _tls.signed_by(material['tls_cert'], material['tls_ca_cert']):
                return '%s: sglang_server_tls_cert is not signed by the CA of sglang_server_tls_ca_cert' % host
        except _tls.TLSError as exc:
            return '%s: %s' % (host, exc)
        return None

    def plan(self, options, shim, task_vars, result):
        """The plan before the host's state is read (what llmops.serving.sglang_server_plan returned), or None
        where ``result`` says why it failed."""
        host = task_vars['inventory_hostname']
        hostvars = task_vars['hostvars']

        def address_of(member):
            return hostvars[member].get('ansible_host') or member

        try:
            layout = _server_plan.group_layout(host, options['sglang_server_group_hosts'], address_of,
                                               options['sglang_server_dist_init_port'])
            gpus = _server_plan.gpu_layout(host, options['sglang_server_tp_size'], layout['nnodes'],
                                           options['sglang_server_gpus'], options['sglang_server_env'])
            spec = _server_plan.launch_spec(options, layout)
            _sglang_args.build_argv(spec)  # the settings that do not depend on the installed release
        except _server_plan.PlanError as exc:
            result.update(failed=True, msg=str(exc))
            return None
        except _sglang_args.LaunchArgsError as exc:
            result.update(failed=True, msg='%s: %s; nothing was stopped or changed' % (host, exc))
            return None

        problem = self.tls_problem(host, options)
        if problem:
            result.update(failed=True, msg=problem + '; nothing was stopped or changed')
            return None

        check_args = {'python': options['sglang_server_python'], 'engine': spec['engine'],
                      'env': options['sglang_server_env'], 'paths': _server_plan.host_paths(options)}
        if options['sglang_server_help_cache_dir']:
            check_args['help_cache_dir'] = options['sglang_server_help_cache_dir']
        check = self.module('llmops.serving.sglang_launch_check', check_args, task_vars)
        if check.get('failed'):
            result.update(failed=True, msg=check.get('msg', 'llmops.serving.sglang_launch_check failed'))
            return None
        missing = check.get('missing_paths') or {}
        if missing:
            result.update(failed=True, missing_paths=missing, msg='; '.join(
                '%s is %s, which does not exist on %s; copy it there or fix the variable' % (name, path, host)
                for name, path in sorted(missing.items())) + ' (nothing was stopped or changed)')
            return None

        if options['sglang_server_admin_api_key']:
            problem = _sglang_args.admin_key_problem(spec['engine'], check['version'], check['cli']['options'])
            if problem:
                result.update(failed=True, msg='%s: %s; nothing was stopped or changed' % (host, problem))
                return None
        if spec.get('ssl_certfile') and spec['engine'] == 'sglang':
            problem = _tls.server_tls_problem(host, check['version'], check['cli']['options'],
                                              refresh=spec.get('enable_ssl_refresh'))
            if problem:
                result.update(failed=True, msg=problem + '; nothing was stopped or changed')
                return None
        try:
            argv = _sglang_args.build_argv(spec, version=check['version'], options=check['cli']['options'])
            command = _sglang_args.launch_command(options['sglang_server_python'], argv, engine=spec['engine'],
                                                  shim=shim)
            speculative = _sglang_args.running_speculative(spec['speculative'])
            disaggregation = _sglang_args.disaggregation_plan(spec)
        except _sglang_args.LaunchArgsError as exc:
            result.update(failed=True, msg='%s: %s' % (host, exc))
            return None
        service_mgr = (task_vars.get('ansible_facts') or {}).get('service_mgr') or check.get('service_mgr')
        plan = {'launcher': _server_plan.launcher(options['sglang_server_launcher'], service_mgr), 'version': check['version'],
                'command': command, 'speculative': speculative, 'disaggregation': disaggregation,
                'model_config': (check.get('configs') or {}).get('sglang_server_model_path') or {}}
        plan.update(gpus)
        plan.update(layout)
        plan.update(_server_role.role_plan(options, plan))
        plan.update(_server_role.health_settings(options))
        return plan

    def start(self, options, args, task_vars, result):
        """state=started/restarted: the server's user and launch files where the plan found them differ (not for a
        plan of restored files), then the start or restart the plan decided (or that state=restarted asks), and the
        server's PID."""
        plan = args['plan']
        restored = bool(plan.get('restored'))
        user = options['sglang_server_user']
        files_changed = False
        result.update(changed=False, changed_files=[])
        if not restored and (plan.get('files_changed') or plan.get('users_to_fix')):
            if plan.get('switch_user') and user in (plan.get('users_to_fix') or []):
                created = self.create_user(options, task_vars)
                if created.get('failed'):
                    result.update(failed=True, msg=created.get('msg', 'creating the user %s failed' % user))
                    return result
                result['changed'] = result['changed'] or bool(created.get('changed'))
            files = self.module('llmops.serving.launch_files', self.launch_files_args(options, plan, task_vars, False),
                                task_vars)
            if files.get('failed'):
                result.update(failed=True, msg=files.get('msg', 'llmops.serving.launch_files failed'))
                return result
            files_changed = bool(files.get('changed'))
            result.update(changed=result['changed'] or files_changed, changed_files=files.get('changed_files') or [])
            if 'diff' in files:
                result['diff'] = files['diff']
        start = _server_role.start(plan, args['state'] == 'restarted')
        result.update(started=bool(start), pid=plan.get('pid'), launcher=plan['launcher'],
                      process_pid=None, systemd_unit=None)
        if start:
            if plan['launcher'] == 'process':
                started = self.module('llmops.serving.server_process', {
                    'name': options['sglang_server_name'], 'state': start, 'command': [plan['script']],
                    'pidfile': plan['pidfile'], 'log_path': options['sglang_server_log_path'],
                    'stop_timeout': args['stop_timeout']}, task_vars)
                pid = started.get('pid')
            else:
                started = self.module('ansible.builtin.systemd_service', {
                    'name': plan['unit'], 'state': start, 'enabled': True, 'daemon_reload': files_changed or restored},
                    task_vars)
                if not started.get('failed'):
                    after = self.module('ansible.builtin.systemd_service', {'name': plan['unit']}, task_vars)
                    pid = (after.get('status') or {}).get('MainPID')
            if started.get('failed'):
                result.update(failed=True, msg=started.get('msg', 'starting the server failed'))
                return result
            result.update(changed=result['changed'] or bool(started.get('changed')), pid=pid)
        # What llmops.serving.wait_for_llm_health watches: the process of the process launcher, else the unit.
        if plan['launcher'] == 'process':
            result['process_pid'] = result['pid']
        else:
            result['systemd_unit'] = plan['unit']
        return result

    def stop(self, options, args, task_vars, result):
        """state=stopped: the process-launched server and every process of its session (unless the launcher is
        systemd), and the unit, stopped and disabled, where its file exists (unless the launcher is process)."""
        names = _server_role.names(*[options[name] for name in _server_role.NAME_OPTIONS])
        launcher = options['sglang_server_launcher']
        result.update(changed=False)
        if launcher != 'systemd':
            stopped = self.module('llmops.serving.server_process', {
                'name': options['sglang_server_name'], 'state': 'stopped', 'pidfile': names['pidfile'],
                'stop_timeout': args['stop_timeout']}, task_vars)
            if stopped.get('failed'):
                result.update(failed=True, msg=stopped.get('msg', 'stopping the server failed'))
                return result
            result['changed'] = bool(stopped.get('changed'))
        if launcher != 'process':
            unit_file = self.module('ansible.builtin.stat', {'path': names['unit_file']}, task_vars)
            if (unit_file.get('stat') or {}).get('exists'):
                stopped = self.module('ansible.builtin.systemd_service', {
                    'name': names['unit'], 'state': 'stopped', 'enabled': False}, task_vars)
                if stopped.get('failed'):
                    result.update(failed=True, msg=stopped.get('msg', 'stopping the unit failed'))
                    return result
                result['changed'] = result['changed'] or bool(stopped.get('changed'))
        return result

    def status(self, options, task_vars, result):
        """state=status: whether the server runs (its pidfile, else its unit where its file exists) and what it says
        of itself (llmops.serving.llm_server_info); changes nothing."""
        names = _server_role.names(*[options[name] for name in _server_role.NAME_OPTIONS])
        process_status = self.module('llmops.serving.server_process', {
            'name': options['sglang_server_name'], 'state': 'status', 'pidfile': names['pidfile']}, task_vars)
        unit_status = {}
        unit_file = self.module('ansible.builtin.stat', {'path': names['unit_file']}, task_vars)
        if (unit_file.get('stat') or {}).get('exists'):
            unit_status = self.module('ansible.builtin.systemd_service', {'name': names['unit']}, task_vars)
        # An empty API key sends none. A server with a certificate (tls_cert) answers https, verified with the CA the
        # role installed next to it (tls_ca_cert), else with the system's CAs.
        url, ca_path = names['url'], None
        if options.get('sglang_server_tls_cert'):
            url = 'https' + url[len('http'):]
            if options.get('sglang_server_tls_ca_cert'):
                ca_path = _tls.server_tls_files(options['sglang_server_config_dir'], options['sglang_server_name'])['ssl_ca_certs']
        info_args = {'url': url, 'api_key': options['sglang_server_api_key'], 'request_timeout': 10}
        if ca_path:
            info_args['ca_path'] = ca_path
        info = self.module('llmops.serving.llm_server_info', info_args, task_vars)
        for read in (process_status, unit_status, info):
            if read.get('failed'):
                result.update(failed=True, msg=read.get('msg', 'reading the state of the server failed'))
                return result
        result.update(changed=False, status=_server_role.status(process_status, unit_status, info))
        return result

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        options = _server_role.role_options(dict((name, value) for name, value in args.items() if name not in OWN_OPTIONS))
        try:
            if args['state'] == 'stopped':
                return self.stop(options, args, task_vars, result)
            if args['state'] == 'status':
                return self.status(options, task_vars, result)
            if args['state'] != 'planned':
                if not args['plan']:
                    result.update(failed=True, msg='state=%s needs the plan of a state=planned run (plan)' % args['state'])
                    return result
                if args['state'] == 'present':
                    result.update(self.module('llmops.serving.launch_files',
                                              self.launch_files_args(options, args['plan'], task_vars, False), task_vars))
                    return result
                return self.start(options, args, task_vars, result)

            if args['restored']:
                # The rollback's plan: the restored record's, restarted; nothing on the host is read.
                outcome = _server_role.rollback_outcome(args['restored'], args['rollback_reason'])
                result.update(changed=False, outcome=outcome, plan={})
                if outcome['state'] != 'rolled_back':
                    return result
                host = task_vars['inventory_hostname']
                try:
                    layout = _server_plan.group_layout(host, options['sglang_server_group_hosts'],
                                                       lambda member: task_vars['hostvars'][member].get('ansible_host') or member,
                                                       options['sglang_server_dist_init_port'])
                except _server_plan.PlanError as exc:
                    result.update(failed=True, msg=str(exc))
                    return result
                names = _server_role.names(*[options[name] for name in _server_role.NAME_OPTIONS])
                plan = _server_role.restored_plan(layout, names, args['restored'])
                plan.update(_server_role.health_settings(options))
                result.update(changed=False, plan=plan)
                return result
            shim = args['shim'] or _server_role.names(*[options[name] for name in _server_role.NAME_OPTIONS])['shim']
            plan = self.plan(options, shim, task_vars, result)
            if plan is None:
                return result
            process_status, unit_status = {}, {}
            if plan['launcher'] == 'process':
                process_status = self.module('llmops.serving.server_process', {
                    'name': options['sglang_server_name'], 'state': 'status', 'pidfile': plan['pidfile']}, task_vars)
                read = process_status
            else:
                unit_status = self.module('ansible.builtin.systemd_service', {'name': plan['unit']}, task_vars)
                read = unit_status
            if read.get('failed'):
                result.update(failed=True, msg=read.get('msg', 'reading the state of the server failed'))
                return result
            # The comparison is no change (it decides on the restart; state=present writes) and also asks whether
            # the last good record already holds these files, command and drafter.
            files = self.module('llmops.serving.launch_files', self.launch_files_args(options, plan, task_vars, True),
                                task_vars, check_mode=True, diff=False)
            if files.get('failed'):
                result.update(failed=True, msg=files.get('msg', 'llmops.serving.launch_files failed'))
                return result
            decided = _server_role.decision(plan, process_status, unit_status, files, bool(args['restart']))
            result.update(changed=False, plan=decided)
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # none with pipelining
