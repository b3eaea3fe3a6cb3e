# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the collection's filter plugins share: the errors of the pure code they wrap become
AnsibleFilterError, so that a task fails with the message instead of a traceback."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def as_filter(function, errors=(TypeError, ValueError), named=True):
    """``function`` as a filter: ``errors`` raised by it become AnsibleFilterError, their message prefixed with the
    function's name where ``named`` (the pure code's own messages, meant for the user, go unprefixed)."""
    def filter_function(*positional, **keywords):
        try:
            return function(*positional, **keywords)
        except errors as exc:
            raise AnsibleFilterError('%s: %s' % (function.__name__, exc) if named else str(exc))
    filter_function.__name__ = function.__name__
    filter_function.__doc__ = function.__doc__
    return filter_function
