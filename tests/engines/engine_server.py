"""A real vLLM CPU API server as a test helper (used by conftest.py and the tests).

``VllmServer`` runs ``python -m vllm.entrypoints.openai.api_server`` from the engine
venv on 127.0.0.1 and a free port, in a process group of its own, logs to a file, and
stops the whole group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ENGINE_VENV = Path(os.environ.get("LLMOPS_ENGINE_VENV", ROOT / ".cache" / "vllm-venv"))
ENGINE_PYTHON = ENGINE_VENV / "bin" / "python"

# The flags that work on a 2-core CPU machine (see README.md).
SERVER_FLAGS = ["--max-model-len", "1024", "--dtype", "bfloat16", "--enforce-eager"]
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
              "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
NUM_SPECULATIVE_TOKENS = 3
START_DEADLINE_S = 300.0
STOP_GRACE_S = 20.0

# Seconds to ready (or to exit) per server and acceptance figures, printed at the end of the session.
SUMMARY: dict[str, str] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def speculative_config(drafter: Path) -> str:
    return json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": NUM_SPECULATIVE_TOKENS})


class VllmServer:
    """One ``vllm.entrypoints.openai.api_server`` process group and its log file."""

    def __init__(self, name: str, model: Path, log_dir: Path, drafter: Path | None = None) -> None:
        self.name = name
        self.model = str(model)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"vllm-{name}.log"
        self.argv = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                     "--host", "127.0.0.1", "--port", str(self.port), *SERVER_FLAGS]
        if drafter is not None:
            self.argv += ["--speculative-config", speculative_config(drafter)]
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.ready_s: float | None = None

    def start(self) -> VllmServer:
        env = {**os.environ, **SERVER_ENV}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, cwd=self.log_path.parent, start_new_session=True)
        self.started = time.monotonic()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_ready(self, deadline_s: float = START_DEADLINE_S) -> VllmServer:
        """Poll /health until 200; fail with the log's tail if the process exits or time runs out."""
        end = self.started + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM server {self.name} exited with {self.proc.returncode} before ready:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    self.ready_s = time.monotonic() - self.started
                    SUMMARY[self.name] = f"ready after {self.ready_s:.1f} s"
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.5)  # poll interval, not synchronisation
        pytest.fail(f"vLLM server {self.name} not ready after {deadline_s:.0f} s:\n{self.log_tail()}")

    def wait_exit(self, deadline_s: float = START_DEADLINE_S) -> int | None:
        """Wait for the server to exit on its own; None if it was still running at the deadline."""
        try:
            rc = self.proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            return None
        SUMMARY[self.name] = f"exited {rc} after {time.monotonic() - self.started:.1f} s"
        return rc

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left after the grace period, reap."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + grace
            while time.monotonic() < end and _group_alive(pgid):
                if self.proc.poll() is None:
                    try:
                        self.proc.wait(timeout=0.2)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.1)  # children still exiting
            if not _group_alive(pgid):
                break
        self.proc.poll()

    def cpus_beside_engine(self) -> set[int]:
        """The CPUs the engine's worker is not bound to (vLLM's CPU backend binds the worker's OpenMP
        threads to some cores and reserves the others for its API server), or every CPU when it binds
        none or all of them."""
        everything = os.sched_getaffinity(0)
        bound: set[int] = set()
        for pid in _group_pids(self.proc.pid):
            try:
                cpus = os.sched_getaffinity(pid)
            except OSError:  # exited meanwhile
                continue
            if cpus != everything:
                bound |= cpus
        return everything - bound or everything

    # HTTP helpers used by the tests.
    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30)

    def complete(self, prompt: str, max_tokens: int, **extra) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "return_token_ids": True, **extra}
        resp = requests.post(self.url + "/v1/completions", json=body, timeout=120)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def spec_counters(self) -> dict[str, float]:
        """vllm:spec_decode_* counters from /metrics, summed over label sets (no per-position ones)."""
        counters: dict[str, float] = {}
        for line in self.get("/metrics").text.splitlines():
            if line.startswith("vllm:spec_decode_num_") and "_total" in line and "per_pos" not in line:
                name = line.split("{", 1)[0].split(" ", 1)[0]
                counters[name] = counters.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return counters


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:  # exited meanwhile
                pass
    return pids


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
