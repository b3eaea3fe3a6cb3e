# -*- coding: utf-8 -*-
# Copyright (c) llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""llmops.serving.acceptance_poller: an ansible-rulebook event source for sites without Alertmanager.
It reads each server's /metrics every ``interval`` seconds and computes the acceptance length over the
interval as serving_monitoring's rule does (the increase of sglang:generation_tokens_total over the
increase of sglang:spec_verify_calls_total; no verify call in the interval: no value, nothing changes).
A server below its floor for ``for`` seconds fires one event shaped like the Alertmanager source's
(``alert.name`` LlmopsSpecAcceptLengthBelowFloor, ``alert.status`` firing, ``alert.host``), again every
``repeat_interval`` seconds while it stays below, and one ``resolved`` event when it is back above.

Arguments (rulebook ``args``):
  targets: the servers, a list of {host, url, floor} (floor optional) or a dict host -> url
  floor: the acceptance length floor where a target has none (default 1.5)
  interval: seconds between rounds (default 15)
  for: seconds below the floor before the event (default 60)
  repeat_interval: seconds between events while a server stays below (default 1800)
  timeout: seconds per request (default 5)
  api_key: sent as a bearer token (SGLang's --api-key), where set
  ca_path: PEM file of the CA that signed the servers' certificates, for https:// URLs (the fleet CA,
    llmops_tls_ca_cert); unset or empty, the system's CAs
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time

import aiohttp

LOGGER = logging.getLogger('llmops.serving.acceptance_poller')

ALERT = 'LlmopsSpecAcceptLengthBelowFloor'
TOKENS = 'sglang:generation_tokens_total'
VERIFY = 'sglang:spec_verify_calls_total'
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def counters(text):
    """The sums of the two counters over their label sets, from a Prometheus text exposition."""
    sums = {TOKENS: 0.0, VERIFY: 0.0}
    seen = set()
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) in sums:
            try:
                sums[match.group(1)] += float(match.group(3))
                seen.add(match.group(1))
            except ValueError:
                pass
    return sums if len(seen) == 2 else None


def targets_of(args):
    raw = args.get('targets') or []
    if isinstance(raw, dict):
        raw = [{'host': h, 'url': u} for h, u in raw.items()]
    floor = float(args.get('floor', 1.5))
    out = []
    for t in raw:
        out.append({'host': t['host'], 'url': t['url'].rstrip('/'),
                    'floor': float(t['floor']) if t.get('floor') is not None else floor})
    return out


class Watch(object):
    """The acceptance of every target between rounds, and when to fire (pure: the clock is passed)."""

    def __init__(self, targets, for_s=60.0, repeat_interval=1800.0):
        self.targets = targets
        self.for_s = for_s
        self.repeat = repeat_interval
        self.last = {}         # host -> counters of the previous round
        self.below_since = {}  # host -> when it went below its floor
        self.fired_at = {}     # host -> when its last firing event went out

    def round(self, readings, now):
        """``readings``: host -> counters (None: no answer). Returns the events of this round."""
        resolved, values = [], {}
        for t in self.targets:
            host, now_c = t['host'], readings.get(t['host'])
            before, self.last[host] = self.last.get(host), now_c
            if now_c is None or before is None:
                continue
            verify = now_c[VERIFY] - before[VERIFY]
            tokens = now_c[TOKENS] - before[TOKENS]
            if verify <= 0 or tokens < 0:  # no traffic, or the server restarted
                continue
            values[host] = tokens / verify
            if values[host] < t['floor']:
                self.below_since.setdefault(host, now)
            elif host in self.below_since:
                del self.below_since[host]
                if self.fired_at.pop(host, None) is not None:
                    resolved.append(host)
        firing = [h for h, since in self.below_since.items() if now - since >= self.for_s]
        due = [h for h in firing if h not in self.fired_at or now - self.fired_at[h] >= self.repeat]
        events = []
        for host in due:
            self.fired_at[host] = now
            LOGGER.info('%s: acceptance length %s below its floor for %.0f s: firing', host, values.get(host), self.for_s)
            events.append(self._event(host, 'firing', values.get(host), sorted(firing)))
        for host in resolved:
            events.append(self._event(host, 'resolved', values.get(host), sorted(firing)))
        return events

    def _event(self, host, status, value, firing):
        t = [x for x in self.targets if x['host'] == host][0]
        labels = {'alertname': ALERT, 'host': host, 'instance': t['url'].split('//', 1)[-1],
                  'min_accept_length': str(t['floor'])}
        return {'alert': {'name': ALERT, 'status': status, 'host': host, 'instance': labels['instance'],
                          'labels': labels, 'annotations': {'value': '' if value is None else '%.3f' % value},
                          'starts_at': '', 'fingerprint': ''},
                'group_hosts': firing, 'receiver': 'acceptance_poller', 'group_key': '', 'external_url': ''}


def ssl_context(ca_path):
    """The TLS context of the https:// targets: verified with ``ca_path`` (the fleet CA) where set, else the
    system's CAs."""
    return ssl.create_default_context(cafile=ca_path or None)


async def _read(session, target, timeout, headers):
    try:
        async with session.get(target['url'] + '/metrics', headers=headers,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                return None
            return counters(await resp.text())
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        LOGGER.info('%s: /metrics does not answer: %s', target['host'], exc)
        return None


async def main(queue, args):
    targets = targets_of(args)
    watch = Watch(targets, float(args.get('for', 60)), float(args.get('repeat_interval', 1800)))
    interval = float(args.get('interval', 15))
    timeout = float(args.get('timeout', 5))
    headers = {'Authorization': 'Bearer %s' % args['api_key']} if args.get('api_key') else {}
    connector = aiohttp.TCPConnector(ssl=ssl_context(args.get('ca_path')))
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            started = time.monotonic()
            answers = await asyncio.gather(*[_read(session, t, timeout, headers) for t in targets])
            for event in watch.round(dict(zip([t['host'] for t in targets], answers)), time.monotonic()):
                await queue.put(event)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


if __name__ == '__main__':
    import json
    import sys

    class MockQueue(asyncio.Queue):
        async def put(self, item):
            print(json.dumps(item))

    asyncio.run(main(MockQueue(), {'targets': {'local': sys.argv[1]}, 'interval': 5, 'for': 10}))
