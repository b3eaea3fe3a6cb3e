"""The collection's modules, run through ansible-playbook, against the real vLLM CPU engine.

- ``llmops.serving.drafter_checkpoint`` (engine ``vllm``) on a copy of every drafter
  variant of make_models.py: what it fixes, vLLM then loads and serves; what it cannot
  fix, it refuses before launch, naming the cause vLLM hits (RESULTS.md).
- ``llmops.serving.wait_for_llm_health`` following a real vLLM start: the unfixed
  ``bad-draft-model-prefix`` drafter crashes it on load, the fixed one serves.

Two server starts in all (each costs 30-140 s on a busy 2-core machine): the unfixed
drafter (crash) and the fixed one (ready, smoke generation, acceptance), which is the
server both proofs use. The fixed drafter had its ``draft_model.`` prefix stripped and its
layer converted to ``midlayer.`` by the module in one run, so vLLM serving it proves both
kinds of fix. Servers run in their own process group with a log file and a pidfile and
are stopped (whole group) also when a test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine_server import HERE, NUM_SPECULATIVE_TOKENS, ROOT, SUMMARY, VllmServer

pytestmark = pytest.mark.engine

COLLECTIONS = ROOT / ".collections"
PLAYBOOKS = HERE / "playbooks"

# Stable fragments of vLLM 0.32.0's logs (RESULTS.md).
LOG_DRAFT_MODEL_PREFIX = "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM"
LOG_NO_LM_HEAD = "Detected EAGLE model without its own lm_head in the checkpoint"
LOG_OWN_LM_HEAD = "Detected EAGLE model with distinct lm_head weights. Keeping separate lm_head weights"
STRIP_PREFIX = [{"from": "draft_model.", "to": ""}]
# The fixed drafter has the `good` weights: nearly every draft token is accepted (4.00 in RESULTS.md).
ACCEPT_FLOOR = 1 + 0.9 * NUM_SPECULATIVE_TOKENS
CRASH_DETECTION_S = 5.0  # verdict after vLLM's ValueError line, ansible's per-slice overhead included

# name of the case -> (variant copied, module options, expectation)
#   ("unchanged", layout) / ("fixed", layout after, variant whose tensors it must equal) / ("refused", fragments)
CASES = {
    "good-layers0": ("good-layers0", {}, ("unchanged", "layers")),
    "good-midlayer": ("good-midlayer", {}, ("unchanged", "midlayer")),
    "random-layers0": ("random-layers0", {}, ("unchanged", "layers")),
    "random-midlayer": ("random-midlayer", {}, ("unchanged", "midlayer")),
    # vLLM builds the EAGLE-3 class from the speculative method whatever `architectures` says.
    "bad-arch-llama": ("bad-arch-llama", {}, ("unchanged", "layers")),
    "good-layers0-to-midlayer": ("good-layers0", {"layout": "midlayer"}, ("fixed", "midlayer", "good-midlayer")),
    "bad-draft-model-prefix-renamed": ("bad-draft-model-prefix", {"rename": STRIP_PREFIX},
                                       ("fixed", "layers", "good-layers0")),
    # The drafter the `fixed_server` serves.
    "bad-draft-model-prefix-served": ("bad-draft-model-prefix", {"rename": STRIP_PREFIX, "layout": "midlayer"},
                                      ("fixed", "midlayer", "good-midlayer")),
    # Without the rule: refused; this untouched copy is the drafter that crashes vLLM.
    "bad-draft-model-prefix": ("bad-draft-model-prefix", {},
                               ("refused", [LOG_DRAFT_MODEL_PREFIX, "{from: 'draft_model.', to: ''}"])),
    "bad-no-lm-head": ("bad-no-lm-head", {}, ("refused", ["'lm_head.weight'", LOG_NO_LM_HEAD])),
}


def run_playbook(name: str, extra_vars: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """``ansible-playbook -i localhost, PLAYBOOKS/name`` with the installed collection; extra vars via a file."""
    if not (COLLECTIONS / "ansible_collections" / "llmops" / "serving").is_dir():
        pytest.fail(f"llmops.serving is not installed in {COLLECTIONS}: run 'make collection' first")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="llmops-extra-vars-") as extra:
        json.dump(extra_vars, extra)
        extra.flush()
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(PLAYBOOKS / name),
                "-e", "@" + extra.name]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{name}: rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return proc


def safetensors_tensors(path: Path) -> dict[str, tuple]:
    """Tensor name -> (dtype, shape, data bytes), read with the standard library only."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
        data = handle.read()
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], data[slice(*t["data_offsets"])]) for name, t in header.items()}


@pytest.fixture(scope="module")
def drafters(engine_models: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A copy of a drafter variant per case and both drafter_checkpoint passes over it.

    Returns ``{case: (drafter dir, first pass result, second pass result)}``.
    """
    root = tmp_path_factory.mktemp("collection-drafters")
    cases = []
    for case, (variant, options, dummy) in CASES.items():
        shutil.copytree(engine_models["drafters"][variant]["dir"], root / case)
        cases.append({"path": str(root / case), **options})
    results_file = root / "results.json"
    run_playbook("vllm_drafter_checkpoint.yml", {"drafter_cases": cases, "drafter_results_file": str(results_file)})
    results = json.loads(results_file.read_text())
    by_path = {Path(r["item"]["path"]).name: r for r in results["first"]}
    again = {Path(r["item"]["path"]).name: r for r in results["second"]}
    return {case: (root / case, by_path[case], again[case]) for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_drafter_checkpoint_for_vllm(case, drafters, engine_models):
    variant, dummy, expect = CASES[case]
    path, first, second = drafters[case]
    original = safetensors_tensors(engine_models["drafters"][variant]["dir"] / "model.safetensors")
    now = safetensors_tensors(path / "model.safetensors")
    if expect[0] == "refused":
        assert first.get("failed") and second.get("failed"), first
        for fragment in expect[1]:
            assert fragment in first["msg"], first["msg"]
        assert not first["changed"]
        assert now == original  # nothing modified
        return
    assert not first.get("failed") and not second.get("failed"), first.get("msg")
    assert not second["changed"]  # idempotent
    assert first["layout_after"] == second["layout_before"] == expect[1]
    if expect[0] == "unchanged":
        assert not first["changed"] and first["renamed"] == 0
        assert now == original
        return
    # Fixed: the header was rewritten in place, and the tensors (names, dtypes, shapes and
    # data bytes) are exactly those of the variant make_models.py wrote with these names.
    assert first["changed"] and first["renamed"] == len(set(original) - set(now)) > 0, first
    assert [f["method"] for f in first["files"]] == ["header_in_place"]
    assert now == safetensors_tensors(engine_models["drafters"][expect[2]]["dir"] / "model.safetensors")


def test_module_refuses_what_vllm_crashes_on_and_wait_reports_the_crash(drafters, engine_models, tmp_path):
    """The unfixed `draft_model.` drafter: the module refused it (above); vLLM crashes on it,
    and wait_for_llm_health says so within seconds of vLLM's ValueError."""
    path, first, dummy = drafters["bad-draft-model-prefix"]
    assert first.get("failed")
    server, started = start_server(engine_models, "collection-prefix-crash", path, tmp_path)
    crash_line_at: list[float] = []
    watcher = LogWatch(server.log_path, LOG_DRAFT_MODEL_PREFIX, crash_line_at)
    try:
        watcher.start()
        result, task_started, stdout = wait_for_health(server, tmp_path)
    finally:
        watcher.stop()
        server.stop()
    assert result["status"] in ("crashed", "fatal_log"), result
    assert result.get("failed")
    # vLLM fails while loading the drafter's weights; the message names the phase and the log.
    assert result["phase"] == "load_weights", result["phases"]
    assert "in phase load_weights" in result["msg"] and str(server.log_path) in result["msg"]
    said = "\n".join([result["msg"], *result.get("fatal_line", []), *result["log_tail"]])
    assert LOG_DRAFT_MODEL_PREFIX in said
    assert crash_line_at, f"vLLM never logged the ValueError:\n{server.log_tail()}"
    verdict_at = task_started + result["elapsed"]
    delay = verdict_at - crash_line_at[0]
    SUMMARY["wait_for_llm_health crash"] = (
        f"{result['status']} after {verdict_at - started:.1f} s from start; vLLM's ValueError at "
        f"{crash_line_at[0] - started:.1f} s; verdict {delay:+.1f} s after it")
    # The Traceback before the ValueError is already fatal: the verdict may even come first.
    assert -5.0 < delay <= CRASH_DETECTION_S, SUMMARY["wait_for_llm_health crash"]
    # One heartbeat per 20 s slice that ended without a verdict. The task's elapsed also counts each slice's
    # module start (under a second here; a verdict at 20.4 s came within the first slice), hence the 5 s.
    assert len(heartbeats(stdout)) >= int((result["elapsed"] - 5) // 20), stdout[-3000:]


@pytest.fixture(scope="module")
def fixed_server(request, drafters, engine_models, tmp_path_factory):
    """vLLM on the drafter the module fixed, and wait_for_llm_health's result for it."""
    path, first, dummy = drafters["bad-draft-model-prefix-served"]
    assert not first.get("failed"), first.get("msg")
    log_dir = tmp_path_factory.mktemp("collection-vllm")
    server, started = start_server(engine_models, "collection-prefix-fixed", path, log_dir)
    request.addfinalizer(server.stop)
    result, task_started, stdout = wait_for_health(server, log_dir, smoke="completions",
                                                   min_accept_length=ACCEPT_FLOOR)
    ready = [p["elapsed"] for p in result["phases"] if p["phase"] == "ready"]
    if ready:
        SUMMARY["wait_for_llm_health ready"] = (
            f"ready after {task_started + ready[0] - started:.1f} s from start; "
            f"verdict with smoke after {task_started + result['elapsed'] - started:.1f} s")
    return server, result, stdout


class TestFixedDrafterServes:
    def test_wait_reports_ready_with_vllm_phases(self, fixed_server):
        server, result, stdout = fixed_server
        assert result["status"] == "ready" and not result.get("failed"), result.get("msg")
        names = [p["phase"] for p in result["phases"]]
        assert names[0] == "launching" and names[-1] == "ready", names
        assert names.index("load_weights") < names.index("http_server"), names
        lines = {p["phase"]: p.get("line", "") for p in result["phases"]}
        assert "Starting vLLM server on" in lines["http_server"], lines
        assert "Application startup complete" in server.log()
        assert result["server_info"]["engine"] == "vllm"
        assert heartbeats(stdout), stdout[-3000:]

    def test_smoke_generates_and_drafter_is_accepted(self, fixed_server):
        server, result, dummy = fixed_server
        smoke = result["smoke"]
        assert smoke["ok"] and smoke["tokens"] == 48 and smoke["text"], smoke
        assert smoke["accept_length"] >= ACCEPT_FLOOR, smoke
        assert "vllm:spec_decode" in smoke["accept_length_source"], smoke
        assert smoke["accept_length_check"].startswith("passed"), smoke
        SUMMARY["wait_for_llm_health smoke acceptance"] = (
            f"{smoke['accept_length']:.2f} ({smoke['accept_length_source']})")

    def test_vllm_metrics_show_acceptance(self, fixed_server):
        server, dummy, dummy2 = fixed_server
        before = server.spec_counters()
        body = server.complete("the quick brown fox", 48)
        assert body["usage"]["completion_tokens"] == 48
        after = server.spec_counters()
        drafts = after["vllm:spec_decode_num_drafts_total"] - before.get("vllm:spec_decode_num_drafts_total", 0.0)
        accepted = (after["vllm:spec_decode_num_accepted_tokens_total"]
                    - before.get("vllm:spec_decode_num_accepted_tokens_total", 0.0))
        assert drafts > 0
        length = 1 + accepted / drafts
        SUMMARY["collection-prefix-fixed acceptance"] = f"{length:.2f} ({accepted:.0f} tokens in {drafts:.0f} drafts)"
        assert length >= ACCEPT_FLOOR

    def test_vllm_loaded_the_drafters_own_lm_head(self, fixed_server):
        server = fixed_server[0]
        assert LOG_OWN_LM_HEAD in server.log()
        assert LOG_NO_LM_HEAD not in server.log()


def start_server(engine_models: dict, name: str, drafter: Path, work: Path) -> tuple[VllmServer, float]:
    """A started VllmServer (own process group, log file) and the epoch second it started."""
    started = time.time()
    return VllmServer(name, engine_models["target"]["dir"], work, drafter).start(), started


def wait_for_health(server: VllmServer, work: Path, **options) -> tuple[dict, float, str]:
    """Write the server's pidfile, run the wait playbook; return (result, epoch the task began, stdout)."""
    pidfile = work / f"{server.name}.pid"
    pidfile.write_text(f"{server.proc.pid}\n")
    results_file = work / f"{server.name}.health.json"
    extra = {"health_url": server.url, "health_pidfile": str(pidfile), "health_log": str(server.log_path),
             "health_results_file": str(results_file), "health_timeout": 300}
    extra.update({"health_" + key: value for key, value in options.items()})
    proc = run_playbook("vllm_wait_for_llm_health.yml", extra)
    data = json.loads(results_file.read_text())
    return data["result"], data["task_started"], proc.stdout


def heartbeats(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[localhost] wait_for_llm_health: ")]


class LogWatch(threading.Thread):
    """Records the epoch second a fragment first appears in a log file (polled every 0.1 s)."""

    def __init__(self, path: Path, fragment: str, found_at: list[float]) -> None:
        super().__init__(daemon=True)
        self.path, self.fragment, self.found_at = path, fragment, found_at
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            if self.path.exists() and self.fragment in self.path.read_text(errors="replace"):
                self.found_at.append(time.time())
                return

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)
