# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event sources of extensions/eda, driven as ansible-rulebook drives them: ``main(queue, args)``
as an asyncio task, real HTTP on 127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os

import aiohttp  # the event sources' HTTP library, as ansible-rulebook ships it
import pytest
from aiohttp import web

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SOURCES = os.path.join(ROOT, 'extensions', 'eda', 'plugins', 'event_source')


def _load(name):
    spec = importlib.util.spec_from_file_location('_eda_' + name, os.path.join(SOURCES, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


webhook = _load('alertmanager_webhook')
poller = _load('acceptance_poller')


def notification(*alerts, status='firing'):
    """An Alertmanager webhook payload (version 4) as Alertmanager 0.25+ sends it."""
    return {
        'version': '4', 'groupKey': '{}:{alertname="LlmopsSpecAcceptLengthBelowFloor"}', 'truncatedAlerts': 0,
        'status': status, 'receiver': 'speculation-guard',
        'groupLabels': {'alertname': 'LlmopsSpecAcceptLengthBelowFloor'},
        'commonLabels': {'alertname': 'LlmopsSpecAcceptLengthBelowFloor'}, 'commonAnnotations': {},
        'externalURL': 'http://monitor:9093',
        'alerts': [{
            'status': a.get('status', status),
            'labels': dict({'alertname': 'LlmopsSpecAcceptLengthBelowFloor', 'severity': 'warning',
                            'job': 'llmops-sglang', 'replica_group': 'llama'}, **a['labels']),
            'annotations': {'summary': 'Acceptance length 1.02 below its floor'},
            'startsAt': '2026-12-04T05:00:00Z', 'endsAt': '0001-01-01T00:00:00Z',
            'generatorURL': 'http://monitor:9090/graph', 'fingerprint': 'f%d' % i,
        } for i, a in enumerate(alerts)],
    }


async def _start_webhook(tmp_path, **args):
    queue = asyncio.Queue()
    ready = str(tmp_path / 'port')
    task = asyncio.ensure_future(webhook.main(queue, dict({'host': '127.0.0.1', 'port': 0, 'ready_file': ready}, **args)))
    for dummy in range(200):
        if os.path.exists(ready):
            break
        await asyncio.sleep(0.02)
    with open(ready) as f:
        return queue, task, 'http://127.0.0.1:%s/alerts' % f.read()


async def _stop(task):
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_webhook_puts_one_event_per_alert_with_the_group_hosts(tmp_path):
    async def scenario():
        queue, task, url = await _start_webhook(tmp_path)
        payload = notification({'labels': {'host': 'gpu-a01', 'instance': '10.0.0.1:30000'}},
                               {'labels': {'host': 'gpu-a02', 'instance': '10.0.0.2:30000'}},
                               {'labels': {'instance': '10.0.0.3:30000'}, 'status': 'resolved'})
        async with aiohttp.ClientSession() as s:
            async with s.post(url, json=payload) as resp:
                assert resp.status == 202
                assert (await resp.json()) == {'events': 3}
        events = [queue.get_nowait() for dummy in range(3)]
        assert queue.empty()
        await _stop(task)
        return events

    events = asyncio.run(scenario())
    assert [e['alert']['host'] for e in events] == ['gpu-a01', 'gpu-a02', '10.0.0.3']
    assert [e['alert']['status'] for e in events] == ['firing', 'firing', 'resolved']
    assert events[0]['alert']['name'] == 'LlmopsSpecAcceptLengthBelowFloor'
    assert events[0]['alert']['labels']['replica_group'] == 'llama'
    assert all(e['group_hosts'] == ['gpu-a01', 'gpu-a02'] for e in events)
    assert events[0]['receiver'] == 'speculation-guard'
    assert 'meta' not in events[0]  # no --limit from the source: the guard play on localhost decides


def test_webhook_refuses_what_is_no_notification_and_a_wrong_token(tmp_path, caplog):
    caplog.set_level('WARNING', logger='llmops.serving.alertmanager_webhook')

    async def scenario():
        queue, task, url = await _start_webhook(tmp_path, token='s3cret')
        codes = []
        async with aiohttp.ClientSession() as s:
            for headers, body in [({}, json.dumps(notification({'labels': {'host': 'a'}}))),
                                  ({'Authorization': 'Bearer wrong'}, '{}'),
                                  ({'Authorization': 'Bearer s3cret'}, 'not json'),
                                  ({'Authorization': 'Bearer s3cret'}, '{"alerts": 3}'),
                                  ({'Authorization': 'Bearer s3cret'}, json.dumps(notification({'labels': {'host': 'a'}})))]:
                async with s.post(url, data=body, headers=headers) as resp:
                    codes.append(resp.status)
        size = queue.qsize()
        await _stop(task)
        return codes, size

    codes, size = asyncio.run(scenario())
    assert codes == [401, 401, 400, 400, 202]
    assert size == 1
    refusals = [r.getMessage() for r in caplog.records if 'refused a notification from' in r.getMessage()]
    assert refusals == ['refused a notification from 127.0.0.1: no token',
                        'refused a notification from 127.0.0.1: wrong token']
    assert 'wrong' not in caplog.text.replace('wrong token', '')  # what was sent as a token is never logged


@pytest.mark.parametrize('host, token, allow_open, refused', [
    ('0.0.0.0', '', False, True),
    ('10.0.0.5', '', False, True),
    ('::', '', False, True),
    ('0.0.0.0', 's3cret', False, False),
    ('0.0.0.0', '', True, False),
    ('127.0.0.1', '', False, False),
    ('::1', '', False, False),
    ('localhost', '', False, False),
])
def test_webhook_beyond_loopback_needs_a_token(host, token, allow_open, refused):
    problem = webhook.open_listener_problem(host, token, allow_open)
    assert bool(problem) == refused
    if refused:
        assert problem.startswith('llmops.serving.alertmanager_webhook: listening on %s without a token' % host)


def test_webhook_does_not_start_open_without_a_token(tmp_path):
    with pytest.raises(ValueError, match='without a token'):
        asyncio.run(webhook.main(asyncio.Queue(), {'host': '0.0.0.0', 'port': 0}))


@pytest.mark.parametrize('labels, host', [
    ({'host': 'gpu-a01', 'instance': '10.0.0.1:30000'}, 'gpu-a01'),
    ({'instance': 'gpu-a02:30000'}, 'gpu-a02'),
    ({'instance': '[::1]:30000'}, '[::1]:30000'),
    ({}, ''),
])
def test_alert_host(labels, host):
    assert webhook.alert_host(labels) == host


METRICS = '''# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="tiny"} %(tokens)s
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{model_name="tiny"} %(verify)s
sglang:num_running_reqs{model_name="tiny"} 1.0
'''


def test_counters_sum_label_sets_and_need_both():
    text = METRICS % {'tokens': '300.0', 'verify': '100.0'} + 'sglang:spec_verify_calls_total{model_name="b"} 50\n'
    assert poller.counters(text) == {poller.TOKENS: 300.0, poller.VERIFY: 150.0}
    assert poller.counters('sglang:generation_tokens_total 3\n') is None


def test_watch_fires_after_for_repeats_and_resolves():
    watch = poller.Watch(poller.targets_of({'targets': {'a': 'http://a:1', 'b': 'http://b:1'}, 'floor': 1.5}),
                         for_s=10, repeat_interval=100)

    def c(tokens, verify):
        return {poller.TOKENS: float(tokens), poller.VERIFY: float(verify)}

    assert watch.round({'a': c(0, 0), 'b': c(0, 0)}, 0) == []
    assert watch.round({'a': c(100, 100), 'b': c(300, 100)}, 5) == []     # a below since 5
    assert watch.round({'a': c(100, 100), 'b': c(300, 100)}, 10) == []    # no traffic: no value
    events = watch.round({'a': c(200, 200), 'b': c(600, 200)}, 15)
    assert [(e['alert']['host'], e['alert']['status']) for e in events] == [('a', 'firing')]
    assert events[0]['group_hosts'] == ['a'] and events[0]['alert']['annotations']['value'] == '1.000'
    assert watch.round({'a': c(300, 300), 'b': c(900, 300)}, 20) == []    # fired already
    assert [e['alert']['status'] for e in watch.round({'a': c(400, 400), 'b': c(1200, 400)}, 120)] == ['firing']
    assert watch.round({'a': c(0, 0), 'b': None}, 125) == []               # restart, b does not answer
    events = watch.round({'a': c(300, 100), 'b': c(1500, 500)}, 130)
    assert [(e['alert']['host'], e['alert']['status']) for e in events] == [('a', 'resolved')]


def test_poller_reads_real_metrics_and_fires_for_the_collapsed_server():
    counters = {'good': [0, 0], 'bad': [0, 0]}

    async def scenario():
        async def metrics(request):
            name = request.match_info['name']
            tokens, verify = counters[name]
            return web.Response(text=METRICS % {'tokens': tokens, 'verify': verify})

        app = web.Application()
        app.router.add_get('/{name}/metrics', metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, '127.0.0.1', 0)
        await site.start()
        base = 'http://127.0.0.1:%d' % site._server.sockets[0].getsockname()[1]
        queue = asyncio.Queue()
        task = asyncio.ensure_future(poller.main(queue, {
            'targets': [{'host': 'good', 'url': base + '/good'}, {'host': 'bad', 'url': base + '/bad', 'floor': 2.0},
                        {'host': 'gone', 'url': 'http://127.0.0.1:1'}],
            'interval': 0.05, 'for': 0.2, 'timeout': 1}))
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while queue.empty() and asyncio.get_running_loop().time() < deadline:
                counters['good'][0] += 30
                counters['good'][1] += 10
                counters['bad'][0] += 11
                counters['bad'][1] += 10
                await asyncio.sleep(0.05)
            event = await asyncio.wait_for(queue.get(), 1)
        finally:
            task.cancel()
            await runner.cleanup()
        return event

    event = asyncio.run(scenario())
    assert event['alert']['host'] == 'bad' and event['alert']['status'] == 'firing'
    assert event['alert']['name'] == 'LlmopsSpecAcceptLengthBelowFloor'
    assert event['group_hosts'] == ['bad']
    assert float(event['alert']['annotations']['value']) == pytest.approx(1.1)
