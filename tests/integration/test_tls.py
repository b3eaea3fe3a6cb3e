"""TLS on the wire (issue 49) on the test fleet: servers (SGLang simulator, test doubles, playing 0.5.15.post1) on ns1
and ns2 serving HTTPS with certificates of the fleet CA that playbooks/tls.yml made on the controller
(llmops.serving.fleet_tls); the real sglang-router 0.3.2 on ns3 verifying them with the CA (--ca-cert-paths),
presenting its client certificate (--client-cert-path) and serving clients over HTTPS itself (--tls-cert-path).

The bed starts as a fleet deployed before issue 49: servers on plain HTTP with the inference key only (no admin key,
no control-plane key), the router already verifying with the CA (router.yml, step 1 of the README's upgrade), and the
first test moves it under streaming load, as README "Keys with one job each" and "TLS on the wire" tell an operator:
a rolling deploy.yml gives the servers their certificates and admin key (each drained under its http:// entry, which the
router takes the inference key for since it has no control-plane key yet, restarted on HTTPS, registered as https://:
0 failed, 0 truncated); router.yml then writes the https:// workers into the router's launch file without a restart
(the running router lists them already), and router.yml with the control-plane key restarts it (the gap clients see
is printed, not hidden). The other tests run on that end state.

Shows: the router lists both workers as https:// and healthy and serves completions over HTTPS; the keys are 0600
and in no output; the fleet preflight refuses a certificate without its key naming the host, before anything
stops; Python's ssl refuses a worker whose certificate another CA signed, and so does the router (it never lists it
healthy); a rolling deploy (to TLS, to split keys and a depth change, one host per batch) under streaming load
through the HTTPS router loses no request; a certificate renewed on disk is served by a server with
sglang_server_tls_refresh without a restart.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import ssl
import sys
import time
import urllib.error
import urllib.request

import pytest

from router_bed import Load
from test_deploy import API_KEY
from test_router import (ADMIN_KEY, CONTROL_PLANE_KEY, LOAD_PAUSE, ROUTER_PIDFILE, SERVER_PIDFILE, pid_of, router_vars,
                         wait_for)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVERS = ['ns1', 'ns2']
ROUTER = 'ns3'
PORT = 30080
_STATE = {}


def tls_vars(tls_dir, **overrides):
    """router_vars() with TLS everywhere: each host's certificate from tls_dir (paths on the controller)."""
    own = tls_dir + '/{{ inventory_hostname }}'
    settings = dict(llmops_tls_ca_cert=tls_dir + '/ca.crt', sglang_server_tls_cert=own + '.crt',
                    sglang_server_tls_key=own + '.key', sglang_router_tls_cert=own + '.crt',
                    sglang_router_tls_key=own + '.key', sglang_router_client_cert=own + '.crt',
                    sglang_router_client_key=own + '.key')
    settings.update(overrides)
    return router_vars(**settings)


def https(url, context, *, key=API_KEY, body=None, method=None, timeout=10):
    headers = {'Content-Type': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer ' + key
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def served_serial(address, port, cafile):
    """The serial number of the certificate a TLS server presents, verified with cafile (ssl raises otherwise)."""
    from cryptography import x509
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection((address, port), timeout=5) as sock:
        with context.wrap_socket(sock, server_hostname=address) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def plain_vars(tls_dir):
    """The fleet before the upgrade: servers on plain HTTP with the inference key only; the router with the CA (step 1 of
    the upgrade, and its own listener on TLS) and no control-plane key."""
    return tls_vars(tls_dir, sglang_server_tls_cert='', sglang_server_tls_key='', sglang_server_admin_api_key='',
                    sglang_router_control_plane_api_key='')


@pytest.fixture
def tls_bed(fleet, run_playbook, request, tmp_path_factory):
    """The CA and certificates, servers on ns1/ns2 on plain HTTP with one key and the router on ns3 on TLS with the CA,
    set up once: ``(fleet, inventory, router URL, tls_dir, client ssl context)``."""
    if 'bed' not in _STATE:
        subprocess.run([os.path.join(ROOT, 'tests', 'integration', 'install_router.sh')], check=True, timeout=900)
        request.getfixturevalue('clean_fleet')
        inventory = tmp_path_factory.mktemp('tls-inventory')
        tls_dir = str(tmp_path_factory.mktemp('tls'))
        with open(fleet.inventory) as f:
            (inventory / 'fleet.yml').write_text(f.read())
        (inventory / 'groups.yml').write_text(
            'sglang_servers:\n  hosts:\n%s\nsglang_routers:\n  hosts:\n    %s:\n'
            % (''.join('    %s:\n' % h for h in SERVERS), ROUTER))
        run_playbook('playbooks/tls.yml', inventory=str(inventory), extra_vars={'llmops_tls_dir': tls_dir}, expect_rc=0)
        for name in ('ca.key', 'ns1.key', 'ns3.key'):
            assert oct(os.stat(os.path.join(tls_dir, name)).st_mode & 0o777) == '0o600'
        limit = ','.join(SERVERS)
        run_playbook('tests/sim/prepare_host.yml', inventory=str(inventory), limit=limit, extra_vars=tls_vars(tls_dir),
                     expect_rc=0)
        run_playbook('playbooks/deploy.yml', inventory=str(inventory), limit=limit, extra_vars=plain_vars(tls_dir),
                     expect_rc=0, timeout=600)
        run_playbook('playbooks/router.yml', inventory=str(inventory), extra_vars=plain_vars(tls_dir), expect_rc=0,
                     timeout=600)
        context = ssl.create_default_context(cafile=os.path.join(tls_dir, 'ca.crt'))
        _STATE['bed'] = (fleet, str(inventory), 'https://%s:%d' % (fleet.hosts[ROUTER]['address'], PORT), tls_dir,
                         context)
    return _STATE['bed']


def workers(router, context, key=CONTROL_PLANE_KEY):
    status, text = https(router + '/workers', context, key=key)
    assert status == 200, text
    return {w['url']: w['is_healthy'] for w in json.loads(text)['workers']}


def url_of(fleet, host):
    return 'https://%s:30000' % fleet.hosts[host]['address']


def upgrade(bed, run_playbook):
    """The README's upgrade from the bed's state (plain HTTP, one key), without load: the servers' rolling deploy (their
    certificates, their admin key, and a depth change), then router.yml (the router's control-plane key and its
    https:// worker list). The first test does the same under load."""
    dummy, inventory, dummy, tls_dir, dummy = bed
    run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900, expect_rc=0,
                 extra_vars=tls_vars(tls_dir, sglang_server_speculative_depth=10, llmops_serial=1))
    run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=tls_vars(tls_dir), expect_rc=0, timeout=600)
    _STATE['upgraded'] = True


@pytest.fixture
def tls_fleet(tls_bed, run_playbook):
    """The bed once upgraded (by the first test, under load; here without where a test runs alone)."""
    if 'upgraded' not in _STATE:
        upgrade(tls_bed, run_playbook)
    return tls_bed


def test_rolling_deploy_under_load_over_tls_loses_nothing(tls_bed, run_playbook):
    """Servers on plain HTTP with the inference key only, behind the router on TLS with the CA: the rolling deploy that
    gives them certificates and the admin key loses no request under streaming load through the router, nor does
    router.yml writing their https:// URLs into the router's launch file (no restart); router.yml then gives the router
    its control-plane key and restarts it (the gap is printed). End state: every worker https://
    and healthy, the inference key refused on /workers and on the servers' admin endpoints."""
    fleet, inventory, router, tls_dir, context = tls_bed
    assert 'upgraded' not in _STATE, 'runs first, on the bed before its upgrade'
    assert workers(router, context, key=API_KEY) == {url_of(fleet, h).replace('https:', 'http:'): True for h in SERVERS}
    before = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    router_pid = pid_of(fleet, ROUTER, ROUTER_PIDFILE)
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE, context=context) as load:
        wait_for(lambda: load.sent >= 20, 60)
        started = time.monotonic()
        rolled = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900,
                              extra_vars=tls_vars(tls_dir, sglang_server_speculative_depth=10, llmops_serial=1))
        took = time.monotonic() - started
        # router.yml with the servers' https:// URLs and still no control-plane key: its launch file changes in its
        # workers alone, which the running router already lists (the register added them): it keeps running.
        listed = run_playbook('playbooks/router.yml', inventory=inventory, expect_rc=0, timeout=600,
                              extra_vars=tls_vars(tls_dir, sglang_router_control_plane_api_key=''))
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 10, 60)
    print('\nrolling deploy from plain HTTP and one key to TLS and split keys behind the router (2 servers, serial 1): '
          '%.0f s, %d requests, %d failed, %d truncated' % (took, load.sent, load.failed, load.truncated))
    assert rolled.rc == 0, rolled.stdout[-4000:]
    text = ' '.join((rolled.stdout + rolled.stderr).split())
    assert 'runs without sglang_router_control_plane_api_key yet' in text, text[-3000:]
    assert all(pid_of(fleet, h, SERVER_PIDFILE) != before[h] for h in SERVERS)
    assert rolled.stdout.count('Drain the server - take it out of the routers in front of it') == 2
    assert load.failed == 0 and load.truncated == 0
    # the router still has no control-plane key: its /workers takes the inference key, and lists both on https://
    assert workers(router, context, key=API_KEY) == {url_of(fleet, h): True for h in SERVERS}
    assert listed.changed(ROUTER) > 0 and pid_of(fleet, ROUTER, ROUTER_PIDFILE) == router_pid
    assert fleet.ssh(ROUTER, 'grep -c "https://" /etc/llmops/sglang-router-main.sh').stdout.strip() == '1'
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE, context=context) as gap:
        wait_for(lambda: gap.sent >= 10, 60)
        run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=tls_vars(tls_dir), expect_rc=0,
                     timeout=600)
        sent = gap.sent
        wait_for(lambda: gap.sent >= sent + 10, 60)
    _STATE['upgraded'] = True
    print('router.yml with the control-plane key (the router restarts): %d requests, %d failed, %d truncated'
          % (gap.sent, gap.failed, gap.truncated))
    assert pid_of(fleet, ROUTER, ROUTER_PIDFILE) != router_pid
    assert https(router + '/workers', context, key=API_KEY)[0] == 401
    wait_for(lambda: workers(router, context) == {url_of(fleet, h): True for h in SERVERS}, 30)
    for host in SERVERS:
        assert https(url_of(fleet, host) + '/flush_cache', context, body={}, method='POST')[0] == 401
        assert https(url_of(fleet, host) + '/flush_cache', context, body={}, method='POST', key=ADMIN_KEY)[0] == 200


def test_servers_and_router_speak_tls_with_the_fleet_ca(tls_fleet, run_playbook):
    fleet, inventory, router, tls_dir, context = tls_fleet
    wait_for(lambda: workers(router, context) == {url_of(fleet, h): True for h in SERVERS}, 30)
    body = {'model': 'tiny-llama', 'prompt': 'hi', 'max_tokens': 4}
    status, text = https(router + '/v1/completions', context, body=body)
    assert status == 200 and json.loads(text)['choices'][0]['text'], text
    # the router's listener is TLS only, and a client without the CA refuses it
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        urllib.request.urlopen(router.replace('https:', 'http:') + '/readiness', timeout=5)
    with pytest.raises(urllib.error.URLError, match='CERTIFICATE_VERIFY_FAILED'):
        urllib.request.urlopen(router + '/readiness', timeout=5, context=ssl.create_default_context())
    for host in SERVERS:
        argv = fleet.ssh(host, 'cat /proc/$(pgrep -f -o "[l]lmops_launch.py")/cmdline | tr "\\0" " "').stdout
        assert '--ssl-certfile /etc/llmops/sglang-main.tls.crt --ssl-keyfile /etc/llmops/sglang-main.tls.key' in argv
        assert fleet.ssh(host, 'stat -c "%a %U" /etc/llmops/sglang-main.tls.key').stdout.split()[0] == '600'
    assert fleet.ssh(ROUTER, 'stat -c %a /etc/llmops/sglang-router-main.tls.key /etc/llmops/sglang-router-main.client.key'
                     ).stdout.split() == ['600', '600']
    router_argv = fleet.ssh(ROUTER, 'cat /etc/llmops/sglang-router-main.sh').stdout
    for flag in ('--tls-cert-path', '--tls-key-path', '--ca-cert-paths', '--client-cert-path', '--client-key-path'):
        assert flag in router_argv
    # a rerun changes nothing, and no key material reaches the output
    again = run_playbook('playbooks/router.yml', inventory=inventory, extra_vars=tls_vars(tls_dir), verbosity=3,
                         expect_rc=0)
    assert again.changed(ROUTER) == 0
    with open(os.path.join(tls_dir, 'ns3.key')) as handle:
        key_line = handle.read().splitlines()[1]
    assert key_line not in again.stdout and 'PRIVATE KEY' not in again.stdout
    # status.yml reads the router over HTTPS with the CA of its launch file
    status = run_playbook('playbooks/status.yml', inventory=inventory, extra_vars=tls_vars(tls_dir), limit=ROUTER,
                          expect_rc=0)
    assert 'healthy=True breaker=closed' in ' '.join(status.stdout.split()), status.stdout[-3000:]


def test_preflight_refuses_a_certificate_without_its_key_naming_the_host(tls_fleet, run_playbook):
    fleet, inventory, _router, tls_dir, _context = tls_fleet
    before = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    slip = "{{ '' if inventory_hostname == 'ns2' else '%s/' ~ inventory_hostname ~ '.key' }}" % tls_dir
    refused = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=300,
                           extra_vars=tls_vars(tls_dir, sglang_server_tls_key=slip, sglang_server_speculative_depth=12,
                                               llmops_serial=1))
    text = ' '.join(refused.stdout.split())
    assert refused.rc != 0
    assert 'ns2: sglang_server_tls_cert is set but sglang_server_tls_key is not (TLS needs both)' in text, text[-3000:]
    assert {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS} == before


ROGUE = r'''
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 30001), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
'''


def test_a_worker_the_ca_did_not_sign_is_refused(tls_fleet, tmp_path):
    """A server on ns1:30001 with a certificate of another CA (made with the same module): Python's ssl with the
    fleet CA refuses its handshake where it accepts the real worker's, and the router, asked with the control-plane key
    to add it, never lists it as a healthy worker."""
    fleet, _inventory, router, tls_dir, context = tls_fleet
    sys.path.insert(0, os.path.join(ROOT, '.collections'))
    from ansible_collections.llmops.serving.plugins.module_utils import _tls  # pylint: disable=import-outside-toplevel
    ca = _tls.make_ca('rogue CA')
    cert, key = _tls.make_host_cert(ca[0], ca[1], 'ns1', [fleet.hosts['ns1']['address']])
    for name, text in (('rogue.crt', cert), ('rogue.key', key)):
        fleet.ssh('ns1', 'umask 077; cat > /tmp/%s' % name, input=text)
    rogue_pid = fleet.ssh('ns1', "nohup /usr/bin/python3 -c '%s' /tmp/rogue.crt /tmp/rogue.key >/dev/null 2>&1 & echo $!"
                          % ROGUE).stdout.strip()
    address = fleet.hosts['ns1']['address']
    cafile = os.path.join(tls_dir, 'ca.crt')
    rogue_url = 'https://%s:30001' % address
    try:
        wait_for(lambda: fleet.ssh('ns1', 'ss -ltn | grep -q ":30001 "', check=False).returncode == 0, 20)
        assert served_serial(address, 30000, cafile)  # the real worker: verified
        with pytest.raises(ssl.SSLCertVerificationError, match='certificate verify failed'):
            served_serial(address, 30001, cafile)
        status, text = https(router + '/workers', context, key=CONTROL_PLANE_KEY, body={'url': rogue_url})
        print('\nrouter asked to add a worker of another CA: HTTP %d %s' % (status, text[:200]))
        time.sleep(8)  # four health intervals
        listed = workers(router, context)
        assert listed.get(rogue_url) is not True, listed
        assert all(listed[url_of(fleet, h)] for h in SERVERS), listed
    finally:
        fleet.ssh('ns1', 'kill %s; rm -f /tmp/rogue.crt /tmp/rogue.key' % rogue_pid, check=False)
        for entry in json.loads(https(router + '/workers', context, key=CONTROL_PLANE_KEY)[1])['workers']:
            if entry['url'] == rogue_url:
                https(router + '/workers/' + entry['id'], context, key=CONTROL_PLANE_KEY, method='DELETE')


def test_a_renewed_certificate_is_served_without_a_restart_with_refresh(tls_fleet, run_playbook):
    """sglang_server_tls_refresh (--enable-ssl-refresh): the first deploy with it restarts (a new flag); a certificate
    renewed afterwards (playbooks/tls.yml after the old one is removed) is written by the next deploy and served
    without a restart. The simulator reloads like SGLang's refresh does (it watches the files' mtimes)."""
    fleet, inventory, router, tls_dir, context = tls_fleet
    extra = tls_vars(tls_dir, sglang_server_speculative_depth=10, llmops_serial=1, sglang_server_tls_refresh=True)
    run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900, extra_vars=extra,
                 expect_rc=0)
    address, cafile = fleet.hosts['ns1']['address'], os.path.join(tls_dir, 'ca.crt')
    old = served_serial(address, 30000, cafile)
    pids = {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS}
    shutil.move(os.path.join(tls_dir, 'ns1.crt'), os.path.join(tls_dir, 'ns1.crt.old'))
    run_playbook('playbooks/tls.yml', inventory=inventory, extra_vars={'llmops_tls_dir': tls_dir}, expect_rc=0)
    with Load(router, key=API_KEY, model='tiny-llama', pause=LOAD_PAUSE, context=context) as load:
        wait_for(lambda: load.sent >= 10, 60)
        rotated = run_playbook('playbooks/deploy.yml', inventory=inventory, limit=','.join(SERVERS), timeout=900,
                               extra_vars=extra, expect_rc=0)
        wait_for(lambda: served_serial(address, 30000, cafile) != old, 30)
        sent = load.sent
        wait_for(lambda: load.sent >= sent + 10, 60)
    print('\ncertificate rotation with --enable-ssl-refresh: %d requests, %d failed' % (load.sent, load.failed))
    assert {h: pid_of(fleet, h, SERVER_PIDFILE) for h in SERVERS} == pids
    assert rotated.changed('ns1') > 0
    assert load.failed == 0 and load.truncated == 0
