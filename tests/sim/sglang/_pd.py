# Copyright: contributors to llmops.serving
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prefill/decode disaggregation of the simulated SGLang (TEST DOUBLE: no KV cache moves; the two
sides only agree, over HTTP, that a request's "transfer" is done).

What it keeps of SGLang 0.5.x (``--disaggregation-mode prefill|decode``; sglang/srt/disaggregation):

- A prefill listens on ``--disaggregation-bootstrap-port`` (default 8998) beside its HTTP port, with
  ``GET /health`` ("OK") and ``GET /route`` (its parallel layout) as SGLang's bootstrap server has them.
- sglang-router 0.3.2 in PD mode sends each request to a prefill and a decode at once, with
  ``bootstrap_host`` (the prefill's address), ``bootstrap_port`` and ``bootstrap_room`` (a random id
  shared by both) added to the body (seen with the real router, 2026-12-07); the decode's answer is
  the client's.
- The prefill: the request waits in its bootstrap queue until the decode of its room has come
  (``sglang:num_prefill_bootstrap_queue_reqs``, as 0.5.15.post1 names it), is prefilled (one token), then waits in the inflight
  queue until the decode has taken its KV (``sglang:num_prefill_inflight_queue_reqs``).
- The decode: the request waits in its prealloc queue until the prefill's bootstrap server answers
  (``sglang:num_decode_prealloc_queue_reqs``), then in its transfer queue until the prefill has
  prefilled it (``sglang:num_decode_transfer_queue_reqs``), then decodes every output token; so
  speculative acceptance shows on the decode only.
- The decode heartbeats the bootstrap ``/health`` of every prefill it has served a request of, every
  SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL seconds (5); after SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE
  (2) misses in a row it logs "Lost connection with prefill instance (bootstrap_addr: H:P), N transfers
  affected" and fails the requests still waiting on that prefill (HTTP 500).
- With ``--disaggregation-transfer-backend fake`` (decode only) the decode waits for no prefill, and takes
  requests without ``bootstrap_room`` too.
- Any other backend refuses a generation request without ``bootstrap_room`` (scheduler.py of 0.5.15.post1: HTTP 400,
  "Invalid request: Disaggregated request received without bootstrap room id.").
- A request whose ``bootstrap_host`` is FAKE_BOOTSTRAP_HOST (2.2.2.2; SGLang's own /health_generate sends it with a
  room) runs on that side alone: no contact with any prefill or decode, no KV wait (a prefill still makes one token).
- The simulator's own warm-up and health generation do not go through these checks.

The simulator-only routes of the bootstrap server (``/sim/rooms/<room>``) stand for the transfer
engine (Mooncake, NIXL) and are no part of SGLang.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOOTSTRAP_TIMEOUT = 30.0     # seconds a prefill request waits for its decode (SGLang: 300)
WAITING_TIMEOUT = 30.0       # seconds a decode request waits for its prefill's KV (SGLang: 300)
ROOM_KEEP = 120.0            # seconds a finished room is remembered
FAKE_BOOTSTRAP_HOST = '2.2.2.2'  # disaggregation/utils.py: the request runs on one side alone (fake KV sender/receiver)
NO_ROOM = 'Invalid request: Disaggregated request received without bootstrap room id.'
POLL = 0.05
GAUGES = {
    'prefill': (('num_prefill_bootstrap_queue_reqs', 'The number of requests in the prefill bootstrap queue.', 'bootstrap'),
                ('num_prefill_inflight_queue_reqs', 'The number of requests in the prefill inflight queue.', 'inflight')),
    'decode': (('num_decode_prealloc_queue_reqs', 'The number of requests in the decode prealloc queue.', 'prealloc'),
               ('num_decode_transfer_queue_reqs', 'The number of requests in the decode transfer queue.', 'transfer')),
}
GAUGE_ORDER = GAUGES['prefill'] + GAUGES['decode']


class TransferError(Exception):
    """A request of the PD pair failed (its message is SGLang's)."""


class RequestRefused(Exception):
    """SGLang refuses the request (HTTP 400; its message is SGLang's)."""


class Room:
    def __init__(self):
        self.came = threading.Event()      # the decode has come (bootstrap done)
        self.ready = threading.Event()     # the prefill has prefilled it (KV sent)
        self.taken = threading.Event()     # the decode has its KV
        self.born = time.monotonic()


class PD:
    """One side of a PD pair: ``mode`` prefill or decode."""

    def __init__(self, sim):
        self.sim = sim
        self.args = sim.args
        self.log = sim.log
        self.mode = sim.args['disaggregation_mode']
        self.backend = sim.args['disaggregation_transfer_backend']
        self.lock = threading.Lock()
        self.queues = {'bootstrap': set(), 'inflight': set(), 'prealloc': set(), 'transfer': set()}
        self.snapshot = dict((name, 0) for name in self.queues)
        self.rooms = {}
        self.httpd = None
        self.interval = max(2.0, float(os.environ.get('SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL') or 5.0))
        self.max_failure = int(os.environ.get('SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE') or 2)
        self.prefills = {}   # decode: bootstrap address -> consecutive misses
        self.lost = {}       # decode: bootstrap address -> failure message, for the requests waiting on it

    # ------------------------------------------------------------ set-up
    def start(self):
        if self.mode == 'prefill':
            host, port = self.args['host'], self.args['disaggregation_bootstrap_port']
            handler = type('BootstrapHandler', (_Bootstrap,), {'pd': self})
            self.httpd = ThreadingHTTPServer((host, port), handler)
            self.httpd.daemon_threads = True
            threading.Thread(target=self.httpd.serve_forever, name='bootstrap', daemon=True).start()
            self.log('Bootstrap server started on %s:%d (simulated: /health, /route)' % (host, port))
        else:
            threading.Thread(target=self._heartbeat, name='heartbeat', daemon=True).start()

    def refresh_gauges(self, batch=0):
        """The scheduler logged a batch of ``batch`` new requests (or idled): the queue gauges take the queues' lengths
        now. A prefill counts the batch in its inflight queue already: SGLang 0.5.15.post1 appends a prefilled batch to
        the inflight queue before it writes the gauges (disaggregation/prefill.py), so a /health probe before each
        read kept a real prefill's gauges at 1 (seen on an H100) until the idle refresh."""
        with self.lock:
            self.snapshot = dict((name, len(items)) for name, items in self.queues.items())
            if self.mode == 'prefill':
                self.snapshot['inflight'] += batch

    def gauges(self):
        """[(metric name, help, value)] of the four PD queue gauges (the other side's stay 0)."""
        with self.lock:
            return [(name, text, self.snapshot[queue] if (name, text, queue) in GAUGES[self.mode] else 0)
                    for name, text, queue in GAUGE_ORDER]

    def _enter(self, queue, rid):
        with self.lock:
            self.queues[queue].add(rid)

    def _leave(self, queue, rid):
        with self.lock:
            self.queues[queue].discard(rid)

    def room(self, room, create=True):
        with self.lock:
            now = time.monotonic()
            for key in [k for k, r in self.rooms.items() if now - r.born > ROOM_KEEP]:
                del self.rooms[key]
            if room not in self.rooms and create:
                self.rooms[room] = Room()
            return self.rooms.get(room)

    # ------------------------------------------------------------ requests
    def begin(self, body, rid):
        """Before the request runs: the bootstrap (prefill) or the prealloc and transfer (decode).
        Returns the request's handle (its ``finish`` runs after the forward) or None where the request runs
        alone (the fake bootstrap host, or no room on the fake backend); raises RequestRefused (no room on
        another backend) or TransferError."""
        room = body.get('bootstrap_room')
        if room is None:
            if self.backend == 'fake':
                return None
            self.log('Invalid request: Disaggregated request received without bootstrap room id.')
            raise RequestRefused(NO_ROOM)
        if body.get('bootstrap_host') == FAKE_BOOTSTRAP_HOST:
            return None
        room = str(room)
        if self.mode == 'prefill':
            return self._prefill(room, rid)
        if self.backend == 'fake':
            return None
        return self._decode(room, rid, '%s:%s' % (body.get('bootstrap_host'), body.get('bootstrap_port')))

    def _prefill(self, room, rid):
        state = self.room(room)
        self._enter('bootstrap', rid)
        try:
            if not state.came.wait(BOOTSTRAP_TIMEOUT * self.sim.config.speed):
                self.log('Prefill bootstrap failed for request rank=0 req.rid=%s req.bootstrap_room=%s with exception '
                         'KVTransferError(bootstrap_room=%s): Request %s timed out after %.1f seconds in '
                         'KVPoll.Bootstrapping' % (rid, room, room, room, BOOTSTRAP_TIMEOUT))
                raise TransferError('Request %s timed out in KVPoll.Bootstrapping' % room)
        finally:
            self._leave('bootstrap', rid)
        return _Finish(self, room, rid)

    def _decode(self, room, rid, addr):
        with self.lock:
            self.prefills.setdefault(addr, 0)
            self.lost.pop(addr, None)
        self._enter('prealloc', rid)
        try:
            deadline = time.monotonic() + WAITING_TIMEOUT * self.sim.config.speed
            while self._call(addr, 'POST', room) is None:
                self._check(addr, room, deadline)
                time.sleep(POLL * 4)
        finally:
            self._leave('prealloc', rid)
        self._enter('transfer', rid)
        try:
            while True:
                answer = self._call(addr, 'GET', room)
                if answer == 'ready':
                    self._call(addr, 'DELETE', room)
                    return None
                self._check(addr, room, deadline)
                time.sleep(POLL)
        finally:
            self._leave('transfer', rid)

    def _check(self, addr, room, deadline):
        with self.lock:
            lost = self.lost.get(addr)
        if lost:
            raise TransferError(lost)
        if time.monotonic() >= deadline:
            self.log('Decode transfer failed for request rank=0 req.bootstrap_room=%s: fail to receive KV Cache '
                     'transfer done signal after %.1f seconds' % (room, WAITING_TIMEOUT))
            raise TransferError('KV transfer of room %s timed out' % room)

    @staticmethod
    def _call(addr, method, room):
        """The bootstrap server's answer about ``room``: 'ready', 'pending', 'ok', or None (no answer)."""
        request = urllib.request.Request('http://%s/sim/rooms/%s' % (addr, room), method=method,
                                         data=b'' if method == 'POST' else None)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read().decode() or '{}').get('state', 'ok')
        except (urllib.error.URLError, OSError, ValueError):
            return None

    # ------------------------------------------------------------ heartbeat (decode)
    def _heartbeat(self):
        while True:
            time.sleep(self.interval)
            with self.lock:
                addrs = list(self.prefills)
            for addr in addrs:
                ok = True
                try:
                    with urllib.request.urlopen('http://%s/health' % addr, timeout=2) as response:
                        ok = response.status == 200
                except (urllib.error.URLError, OSError):
                    ok = False
                with self.lock:
                    if ok:
                        self.prefills[addr] = 0
                        continue
                    self.prefills[addr] = self.prefills.get(addr, 0) + 1
                    if self.prefills[addr] < self.max_failure:
                        continue
                    del self.prefills[addr]
                    affected = len(self.queues['prealloc']) + len(self.queues['transfer'])
                    message = 'Lost connection with prefill instance (bootstrap_addr: %s)' % addr
                    self.lost[addr] = message
                self.log('%s, %d transfers affected' % (message, affected))


class _Finish:
    """The prefill's end of a request: its KV is "sent"; it waits in the inflight queue until taken."""

    def __init__(self, pd, room, rid):
        self.pd, self.room, self.rid = pd, room, rid

    def __call__(self):
        state = self.pd.room(self.room)
        self.pd._enter('inflight', self.rid)
        try:
            state.ready.set()
            state.taken.wait(WAITING_TIMEOUT * self.pd.sim.config.speed)
        finally:
            self.pd._leave('inflight', self.rid)


class _Bootstrap(BaseHTTPRequestHandler):
    """The prefill's bootstrap server (SGLang's is aiohttp on --disaggregation-bootstrap-port)."""

    protocol_version = 'HTTP/1.1'
    pd = None

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def _send(self, status, body, content_type='application/json'):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        length = int(self.headers.get('content-length') or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split('?')[0]
        if path == '/health' and self.command == 'GET':
            return self._send(200, 'OK', 'text/plain; charset=utf-8')
        if path == '/route':
            args = self.pd.args
            return self._send(200, {'prefill_attn_tp_size': args['tp_size'], 'prefill_dp_size': args['dp_size'],
                                    'prefill_pp_size': args['pp_size'], 'prefill_page_size': args['page_size']})
        if path.startswith('/sim/rooms/'):
            room = path[len('/sim/rooms/'):]
            state = self.pd.room(room, create=self.command == 'POST')
            if self.command == 'POST':
                state.came.set()
                return self._send(200, {'state': 'ok'})
            if state is None:
                return self._send(200, {'state': 'pending'})
            if self.command == 'DELETE':
                state.taken.set()
                return self._send(200, {'state': 'ok'})
            return self._send(200, {'state': 'ready' if state.ready.wait(1.0) else 'pending'})
        return self._send(404, {'detail': 'Not Found'})

    do_GET = do_POST = do_PUT = do_DELETE = _handle
