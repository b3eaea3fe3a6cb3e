# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller's side of long work that shows its progress (module_utils/_progress.py): an action
plugin of the module's own name runs the module once; where the module answers that its work goes on in
the background (``progress_job``), the action calls it again every ``progress_interval`` seconds (the
module waits on the host) and prints one line per host, until the module returns the work's result.
Modelled on ansible.windows.win_updates (a module called repeatedly, progress through Display)."""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.serving.plugins.module_utils._null_unset import without_nulls
from ansible_collections.llmops.serving.plugins.module_utils._progress import PARAMETER, progress_line

display = Display()

DEFAULT_INTERVAL = 10.0


class ProgressAction(ActionBase):
    """Subclasses set MODULE (the module's full name) and ARGUMENT_SPEC (the module's)."""

    TRANSFERS_FILES = False
    _requires_connection = True
    _supports_async = True
    MODULE = None
    ARGUMENT_SPEC = None
    WHAT = 'the work'  # as a timeout names it

    def host_label(self, task_vars):
        host = task_vars.get('inventory_hostname', '?')
        if self._task.delegate_to and self._task.delegate_to != host:
            host = '%s -> %s' % (host, self._task.delegate_to)
        return host

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ProgressAction, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        self._task.args = without_nulls(self._task.args)  # null is unset, as the module takes it
        args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)[1]
        module_args = dict(self._task.args)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        if self._task.async_val:
            # one job, as async runs a module; no progress
            result.update(self._execute_module(module_name=self.MODULE, module_args=module_args, task_vars=task_vars,
                                               wrap_async=wrap_async))
            return result
        interval = args.get('progress_interval')
        interval = DEFAULT_INTERVAL if interval is None else interval
        timeout = args.get('timeout')
        host = self.host_label(task_vars)
        try:
            if args.get('job'):
                # wait for the work an earlier task started with wait=false
                module_result = {'progress_job': args['job']}
            else:
                module_args[PARAMETER] = {'interval': interval} if interval > 0 else {}
                if args.get('wait') is False:
                    module_args[PARAMETER]['detach'] = True
                module_result = self._execute_module(module_name=self.MODULE, module_args=module_args,
                                                     task_vars=task_vars)
                if args.get('wait') is False and module_result.get('progress_job'):
                    module_result['job'] = module_result['progress_job']
                    module_result.pop('progress', None)
                    module_result.pop('progress_job')
            start = time.monotonic()
            overhead = 0.0  # of one module run (the connection, the interpreter): a line every interval in all
            while module_result.get('progress_job') and not module_result.get('failed'):
                job = module_result['progress_job']
                wait = max(interval - overhead, min(interval, 0.2)) if interval > 0 else 1.0
                if timeout is not None:
                    wait = max(min(wait, timeout - (time.monotonic() - start)), 0.0)
                module_args[PARAMETER] = {'status_file': job, 'wait': wait}
                started = time.monotonic()
                module_result = self._execute_module(module_name=self.MODULE, module_args=module_args,
                                                     task_vars=task_vars)
                overhead = max(time.monotonic() - started - wait, 0.0)
                if module_result.get('progress_job') and timeout is not None and time.monotonic() - start >= timeout:
                    module_args[PARAMETER] = {'status_file': job, 'cancel': '%s was not done after %g s (timeout); '
                                              'stopped' % (self.WHAT, timeout)}
                    module_result = self._execute_module(module_name=self.MODULE, module_args=module_args,
                                                         task_vars=task_vars)
                    break
                if module_result.get('progress_job') and module_result.get('progress') and interval > 0:
                    display.display(progress_line(host, module_result['progress']))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        module_result.pop('progress_job', None)
        module_result.pop('progress', None)
        result.update(module_result)
        return result
