#!/usr/bin/env bash
# Installs the OS packages the test bed needs, only when missing (idempotent, fast when present):
# sshd, ssh and ssh-keygen for the fleet hosts and their client, systemd-nspawn for the systemd
# host, ip (network namespaces, veth, bridge), unshare/setpriv/mount (namespaces, overlays),
# prometheus and promtool for the monitoring role's rules and its integration test, Debian's
# Alertmanager for the speculation guard's fleet test, Java for ansible-rulebook, rsync for
# tests/perf/restart_time.py.
set -euo pipefail
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 && command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v systemd-nspawn >/dev/null 2>&1 || need+=(systemd-container)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v mount >/dev/null 2>&1 || need+=(mount)
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
/usr/bin/python3 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
# ansible-rulebook's rule engine (Drools, through drools_jpy) runs on Java 17
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
# tests/perf/restart_time.py compares the staging with rsync of the same files
command -v rsync >/dev/null 2>&1 || need+=(rsync)
# ansible-test sanity checks shell scripts with it (and only warns when it is missing)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing OS packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The packages start their daemons (ports 9090, 9093) and enable them at boot: the tests start
# their own on free ports, and the systemd test host (an overlay of /) would boot them too.
for daemon in prometheus prometheus-alertmanager; do
  if [[ " ${need[*]} " == *" $daemon "* ]]; then
    invoke-rc.d "$daemon" stop >/dev/null 2>&1 || true
    DPKG_MAINTSCRIPT_PACKAGE=$daemon deb-systemd-helper disable "$daemon.service"
  fi
done
