"""A server of someone else already answers on the configured port (another checkout's
demo, a stale server): the new server cannot bind it and dies, and the health check and
the smoke request would be answered by the foreign one. The deploy must fail, naming who
holds the port, instead of reporting ready (issue 23, case 0).

The foreign server is the SGLang simulator (a test double) started by hand in a session of
its own on ns3, with simulated GPUs of its own, so that the GPU preflight passes."""

from __future__ import annotations

from test_deploy import SIM, deploy_vars

PORT = 31200


def test_a_foreign_server_on_the_port_fails_the_deploy_naming_it(clean_fleet, run_playbook, prepare_simulator):
    # clean_fleet: no server of another test on ns3, the foreign one must be the only one
    extra = deploy_vars(sglang_server_name='fx', sglang_server_port=PORT, sglang_server_api_key='',
                        llmops_rollback=False)
    prepare_simulator(limit='ns3', extra_vars=extra)
    foreign = clean_fleet.ssh('ns3', 'mkdir -p /tmp/foreign-nvsim; NVSIM_STATE_DIR=/tmp/foreign-nvsim /usr/bin/python3 '
                                     '%s/nvsim.py init --count 8 >/dev/null 2>&1; cd /; PYTHONPATH=%s '
                                     'NVSIM_STATE_DIR=/tmp/foreign-nvsim SGLANG_SIM_SPEED=0.05 setsid /usr/bin/python3 -m '
                                     'sglang.launch_server --model-path /srv/llmops/checkpoints/target --port %d '
                                     '>/tmp/foreign.log 2>&1 </dev/null & echo $!' % (SIM, SIM, PORT)).stdout.strip()
    try:
        # The foreign server answers before the deploy starts.
        clean_fleet.ssh('ns3', 'for i in $(seq 600); do /usr/bin/python3 -c \'import urllib.request; '
                               'urllib.request.urlopen("http://127.0.0.1:%d/health", timeout=2)\' 2>/dev/null && exit 0; '
                               'sleep 0.1; done; exit 1' % PORT, timeout=90)
        result = run_playbook('playbooks/deploy.yml', limit='ns3', extra_vars=extra)
        text = ' '.join(result.stdout.split())
        assert result.rc != 0 and result.recap['ns3']['failed'] == 1, result.stdout[-4000:]
        assert ': ready (' not in text
        # Either the health check sees the foreign server (named by PID), or our server's
        # bind failure is seen first: both name the cause.
        assert ('held by PID %s' % foreign in text) or ('address already in use' in text), result.stdout[-4000:]
    finally:
        clean_fleet.ssh('ns3', 'kill %s; pkill -f "[-]-port %d" || true' % (foreign, PORT), check=False)
        run_playbook('playbooks/stop.yml', limit='ns3', expect_rc=0, extra_vars=extra)
