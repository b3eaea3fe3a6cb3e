"""The bind address -> URL rule (plugins/module_utils/_endpoints.py) and its filters
(plugins/filter/endpoints.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.endpoints import FilterModule
from ansible_collections.llmops.serving.plugins.module_utils import _endpoints

FILTERS = FilterModule().filters()


@pytest.mark.parametrize('bind, port, path, expected', [
    ('0.0.0.0', 30000, '', 'http://127.0.0.1:30000'),
    ('::', 8000, '/metrics', 'http://127.0.0.1:8000/metrics'),
    ('', '30001', '', 'http://127.0.0.1:30001'),
    ('10.0.0.5', 30000, '', 'http://10.0.0.5:30000'),
    ('127.0.0.1', 29000, '/metrics', 'http://127.0.0.1:29000/metrics'),
    ('::1', 30000, '', 'http://[::1]:30000'),
    ('fd00::5', 30000, '/health', 'http://[fd00::5]:30000/health'),
    ('gpu-a.example', 30000, '', 'http://gpu-a.example:30000'),
])
def test_local_url(bind, port, path, expected):
    assert _endpoints.local_url(bind, port, path) == expected
    assert FILTERS['local_url'](bind, port, path) == expected


def test_server_endpoint_defaults_to_the_roles_loopback_bind_and_port():
    assert _endpoints.server_endpoint('gpu-a', {'ansible_host': '10.0.0.5'}) == {
        'bind': '127.0.0.1', 'port': 30000, 'address': '127.0.0.1', 'target': '127.0.0.1:30000',
        'url': 'http://127.0.0.1:30000', 'local_url': 'http://127.0.0.1:30000'}


@pytest.mark.parametrize('bind', ['0.0.0.0', '::', ''])
def test_a_wildcard_bind_is_reached_at_ansible_host_else_the_inventory_name(bind):
    variables = {'sglang_server_host': bind, 'sglang_server_port': '31000', 'ansible_host': '10.0.0.5'}
    endpoint = _endpoints.server_endpoint('gpu-a', variables)
    assert (endpoint['address'], endpoint['target'], endpoint['url'], endpoint['local_url']) == (
        '10.0.0.5', '10.0.0.5:31000', 'http://10.0.0.5:31000', 'http://127.0.0.1:31000')
    assert _endpoints.server_endpoint('gpu-a', {'sglang_server_host': bind})['url'] == 'http://gpu-a:30000'


def test_an_ipv6_address_is_bracketed_in_target_and_urls():
    endpoint = _endpoints.server_endpoint('gpu-a', {'sglang_server_host': 'fd00::5'})
    assert (endpoint['address'], endpoint['target'], endpoint['url'], endpoint['local_url']) == (
        'fd00::5', '[fd00::5]:30000', 'http://[fd00::5]:30000', 'http://[fd00::5]:30000')
    wildcard = _endpoints.server_endpoint('gpu-b', {'sglang_server_host': '::', 'ansible_host': 'fd00::6'})
    assert (wildcard['target'], wildcard['local_url']) == ('[fd00::6]:30000', 'http://127.0.0.1:30000')


def test_a_given_address_wins_over_the_bind_and_ansible_host():
    variables = {'sglang_server_host': '0.0.0.0', 'ansible_host': '10.0.0.5'}
    endpoint = FILTERS['server_endpoint']('gpu-a', {'gpu-a': variables}, '192.168.1.9')
    assert (endpoint['target'], endpoint['local_url']) == ('192.168.1.9:30000', 'http://127.0.0.1:30000')
    assert FILTERS['server_endpoint']('gpu-a', {'gpu-a': variables})['target'] == '10.0.0.5:30000'


def test_worker_urls_in_host_order_with_the_inventorys_worker_url_first():
    hostvars = {
        'gpu-c': {'sglang_server_host': '0.0.0.0', 'ansible_host': '10.0.0.7', 'sglang_server_port': 30002},
        'gpu-a': {'sglang_server_host': '0.0.0.0', 'sglang_router_worker_url': 'http://lb.example:9000'},
        'gpu-b': {'sglang_server_host': '10.0.0.6'},
        'gpu-d': {},
        'gpu-e': {'sglang_server_host': '::1', 'sglang_server_port': 30004},
    }
    urls = FILTERS['worker_urls'](['gpu-c', 'gpu-a', 'gpu-b', 'gpu-d', 'gpu-e'], hostvars)
    assert list(urls.items()) == [
        ('gpu-c', 'http://10.0.0.7:30002'), ('gpu-a', 'http://lb.example:9000'), ('gpu-b', 'http://10.0.0.6:30000'),
        ('gpu-d', 'http://127.0.0.1:30000'), ('gpu-e', 'http://[::1]:30004')]
    assert FILTERS['worker_urls']([], hostvars) == {}


def test_a_port_that_is_no_number_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match='local_url'):
        FILTERS['local_url']('0.0.0.0', 'http')


def test_worker_urls_of_prefill_and_decode_servers():
    hostvars = {
        'p1': {'sglang_server_host': '0.0.0.0', 'ansible_host': '10.0.0.1', 'sglang_server_disaggregation_mode': 'prefill'},
        'p2': {'sglang_server_host': '10.0.0.2', 'sglang_server_disaggregation_mode': 'prefill',
               'sglang_server_disaggregation_bootstrap_port': 9001},
        'd1': {'sglang_server_host': '10.0.0.3', 'sglang_server_port': 30001, 'sglang_server_disaggregation_mode': 'decode',
               'sglang_server_disaggregation_bootstrap_port': 9002},
        'n1': {'sglang_server_host': '10.0.0.4', 'sglang_server_disaggregation_mode': None},
    }
    urls = FILTERS['worker_urls'](['p1', 'p2', 'd1', 'n1'], hostvars)
    assert urls == {'p1': {'url': 'http://10.0.0.1:30000', 'worker_type': 'prefill', 'bootstrap_port': 8998},
                    'p2': {'url': 'http://10.0.0.2:30000', 'worker_type': 'prefill', 'bootstrap_port': 9001},
                    'd1': {'url': 'http://10.0.0.3:30001', 'worker_type': 'decode', 'bootstrap_port': None},
                    'n1': 'http://10.0.0.4:30000'}
