"""as_filter: the wrapped code's errors become AnsibleFilterError, named or as the code says them."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.plugin_utils._filters import as_filter


def port_of(url):
    """The port of a URL."""
    return int(url.rsplit(':', 1)[1])


def test_a_value_passes_through_and_the_function_keeps_its_name():
    wrapped = as_filter(port_of)
    assert wrapped('http://h:30000') == 30000
    assert (wrapped.__name__, wrapped.__doc__) == ('port_of', 'The port of a URL.')


def test_a_listed_error_is_a_filter_error_prefixed_with_the_name():
    with pytest.raises(AnsibleFilterError, match="^port_of: invalid literal for int"):
        as_filter(port_of)('http://h:x')


def test_unprefixed_where_the_message_is_the_user_s():
    with pytest.raises(AnsibleFilterError, match="^invalid literal for int"):
        as_filter(port_of, ValueError, named=False)('http://h:x')


def test_errors_not_listed_are_left_alone():
    with pytest.raises(ValueError):
        as_filter(port_of, (TypeError,))('http://h:x')
