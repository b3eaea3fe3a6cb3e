# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""llmops.serving.alertmanager_webhook: an ansible-rulebook event source that receives Prometheus
Alertmanager's webhook notifications (webhook_config, payload version 4) and puts one event per alert
on the queue.

Each event::

    {"alert": {"name": "LlmopsSpecAcceptLengthBelowFloor", "status": "firing", "host": "gpu-a01",
               "instance": "10.0.0.1:30000", "labels": {...}, "annotations": {...},
               "starts_at": "...", "fingerprint": "..."},
     "group_hosts": ["gpu-a01", ...],   # hosts of the firing alerts of the same name in this notification
     "receiver": "...", "group_key": "...", "external_url": "..."}

The host is the alert's ``host`` label (llmops.serving.serving_monitoring sets it to the inventory name),
else its ``instance`` without the port. ``group_hosts`` lets the guard see a fleet-wide collapse that
Alertmanager grouped into one notification.

Arguments (rulebook ``args``):
  host: address to listen on (default 127.0.0.1)
  port: TCP port (default 5001; 0 picks a free one, for tests)
  token: a bearer token that each request must carry (Alertmanager's http_config.authorization); empty: none,
    which only a loopback address takes: a listener beyond loopback without a token does not start (anyone who
    reaches it could have servers drained and restarted), unless allow_open is true
  allow_open: true to listen beyond loopback without a token (default false)
  ready_file: where to write the port once listening (optional; tests)

A request without the token is answered 401 and logged (its address, never what it sent as a token).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os

from aiohttp import web

LOGGER = logging.getLogger('llmops.serving.alertmanager_webhook')


def alert_host(labels):
    """The inventory name of an alert's host: its host label, else its instance without the port."""
    host = labels.get('host') or ''
    if not host:
        instance = labels.get('instance') or ''
        host = instance.rsplit(':', 1)[0] if instance.count(':') == 1 else instance
    return host


def events_of(payload):
    """The events of one Alertmanager notification; ValueError where it is no notification."""
    if not isinstance(payload, dict) or not isinstance(payload.get('alerts'), list):
        raise ValueError('not an Alertmanager notification: no list "alerts"')
    firing = {}
    alerts = []
    for raw in payload['alerts']:
        if not isinstance(raw, dict):
            raise ValueError('an alert is not an object')
        labels = dict(raw.get('labels') or {})
        alert = {
            'name': labels.get('alertname', ''),
            'status': raw.get('status') or payload.get('status') or '',
            'host': alert_host(labels),
            'instance': labels.get('instance', ''),
            'labels': labels,
            'annotations': dict(raw.get('annotations') or {}),
            'starts_at': raw.get('startsAt', ''),
            'fingerprint': raw.get('fingerprint', ''),
        }
        alerts.append(alert)
        if alert['status'] == 'firing' and alert['host']:
            firing.setdefault(alert['name'], [])
            if alert['host'] not in firing[alert['name']]:
                firing[alert['name']].append(alert['host'])
    return [{'alert': alert,
             'group_hosts': list(firing.get(alert['name'], [])),
             'receiver': payload.get('receiver', ''),
             'group_key': payload.get('groupKey', ''),
             'external_url': payload.get('externalURL', '')} for alert in alerts]


def is_loopback(host):
    """Whether ``host`` (an address or ``localhost``) listens on loopback only."""
    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_listener_problem(host, token, allow_open):
    """Why the webhook must not listen on ``host`` with ``token``, or ''."""
    if token or allow_open or is_loopback(host):
        return ''
    return ('llmops.serving.alertmanager_webhook: listening on %s without a token would let anyone who reaches it '
            'have servers drained and restarted; set webhook_token (the role: speculation_guard_webhook_token, '
            'Alertmanager: serving_monitoring_guard_webhook_token), listen on 127.0.0.1, or set allow_open' % host)


def make_app(queue, token=''):
    async def receive(request):
        if token:
            given = request.headers.get('Authorization', '')
            if not hmac.compare_digest(given.encode('utf-8'), ('Bearer ' + token).encode('utf-8')):
                LOGGER.warning('refused a notification from %s: %s', request.remote,
                               'wrong token' if given else 'no token')
                return web.json_response({'error': 'unauthorized'}, status=401)
        try:
            events = events_of(json.loads(await request.text()))
        except ValueError as exc:
            LOGGER.warning('refused a notification: %s', exc)
            return web.json_response({'error': str(exc)}, status=400)
        for event in events:
            await queue.put(event)
        LOGGER.info('notification of %d alerts from %s', len(events), request.remote)
        return web.json_response({'events': len(events)}, status=202)

    app = web.Application()
    app.router.add_post('/{tail:.*}', receive)
    return app


async def main(queue, args):
    host = args.get('host', '127.0.0.1')
    port = int(args.get('port', 5001))
    token = str(args.get('token') or '')
    problem = open_listener_problem(host, token, str(args.get('allow_open', False)).lower() in ('true', '1', 'yes'))
    if problem:
        LOGGER.error(problem)
        raise ValueError(problem)
    runner = web.AppRunner(make_app(queue, token))
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]
        LOGGER.info('listening on %s:%d', host, bound)
        if args.get('ready_file'):
            with open(args['ready_file'] + '.tmp', 'w') as f:
                f.write(str(bound))
            os.replace(args['ready_file'] + '.tmp', args['ready_file'])
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == '__main__':
    class MockQueue(asyncio.Queue):
        async def put(self, item):
            print(json.dumps(item))

    asyncio.run(main(MockQueue(), {'port': 5001}))
