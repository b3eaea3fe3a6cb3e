"""An action plugin of the collection, made without a play: its task's arguments, a connection that needs no host,
and a stand-in for the module runs it makes."""

from __future__ import annotations

from types import SimpleNamespace


class Task:
    async_val = 0
    check_mode = False
    diff = False

    def __init__(self, action, args):
        self.action = action
        self.args = args


def make_action(cls, action, args, execute):
    """An instance of the action plugin class ``cls`` for a task of ``action`` with ``args``; ``execute(module_name,
    module_args, task_vars)`` answers its module runs."""
    plugin = cls.__new__(cls)
    plugin._task = Task(action, args)
    plugin._supports_check_mode = True
    plugin._supports_async = False
    plugin._connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir='/tmp/remote'))
    plugin._remove_tmp_path = lambda path: None
    plugin._execute_module = execute
    return plugin
