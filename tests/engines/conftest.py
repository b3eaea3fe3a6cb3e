"""Fixtures that run the real vLLM CPU engine on tiny, locally generated models.

The engine lives in its own virtualenv, made by ``tests/engines/install_vllm.sh``:
``$LLMOPS_ENGINE_VENV`` or, by default, ``<repo>/.cache/vllm-venv``; its python is
``<venv>/bin/python``. The models are written once per session by ``make_models.py``
with that python into pytest's temporary folder.

Every server is stopped (whole process group) when the scope of the fixture that
started it ends, also when a test fails.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from engine_server import ENGINE_PYTHON, ENGINE_VENV, HERE, SUMMARY, VllmServer


@pytest.fixture(scope="session")
def engine_python() -> Path:
    if not ENGINE_PYTHON.exists():
        pytest.fail(f"no engine venv at {ENGINE_VENV}: run tests/engines/install_vllm.sh (or set LLMOPS_ENGINE_VENV)")
    return ENGINE_PYTHON


@pytest.fixture(scope="session")
def engine_models(engine_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run make_models.py once; return its manifest with absolute paths added."""
    out = tmp_path_factory.mktemp("engine-models") / "cpu"
    start = time.monotonic()
    subprocess.run([str(engine_python), str(HERE / "make_models.py"), str(out), "--shape", "cpu"],
                   check=True, capture_output=True, timeout=300)
    SUMMARY["make_models.py"] = f"{time.monotonic() - start:.1f} s"
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["target"]["dir"] = out / manifest["target"]["path"]
    for drafter in manifest["drafters"].values():
        drafter["dir"] = out / drafter["path"]
    return manifest


@pytest.fixture(scope="session")
def start_server(engine_models: dict, tmp_path_factory: pytest.TempPathFactory):
    """Factory: ``start_server(name, drafter_variant=None)`` returns a started VllmServer.

    Every server it started is stopped at the end of the scope of the fixture that
    asked for it, through ``request.addfinalizer`` of that fixture (see ``server_for``).
    """
    log_dir = tmp_path_factory.mktemp("engine-logs")

    def start(name: str, drafter: str | None = None) -> VllmServer:
        path = engine_models["drafters"][drafter]["dir"] if drafter else None
        return VllmServer(name, engine_models["target"]["dir"], log_dir, path).start()

    return start


def server_for(request: pytest.FixtureRequest, start_server, name: str, drafter: str | None) -> VllmServer:
    server = start_server(name, drafter)
    request.addfinalizer(server.stop)
    return server.wait_ready()


@pytest.fixture(scope="session")
def plain_server(request: pytest.FixtureRequest, start_server) -> VllmServer:
    """The target alone: the reference for greedy output."""
    return server_for(request, start_server, "plain", None)


@pytest.fixture(scope="session")
def good_server(request: pytest.FixtureRequest, start_server) -> VllmServer:
    """Shared by the benchmark cross-check and TestGoodDrafter (one start of about 35 s fewer)."""
    return server_for(request, start_server, "good-layers0", "good-layers0")


@pytest.fixture(scope="class")
def random_server(request: pytest.FixtureRequest, start_server) -> VllmServer:
    return server_for(request, start_server, "random-midlayer", "random-midlayer")


@pytest.fixture(scope="class")
def arch_llama_server(request: pytest.FixtureRequest, start_server) -> VllmServer:
    return server_for(request, start_server, "bad-arch-llama", "bad-arch-llama")


@pytest.fixture(scope="class")
def no_lm_head_server(request: pytest.FixtureRequest, start_server) -> VllmServer:
    return server_for(request, start_server, "bad-no-lm-head", "bad-no-lm-head")


def pytest_terminal_summary(terminalreporter) -> None:
    if SUMMARY:
        terminalreporter.write_sep("-", "vLLM CPU engine: timings and acceptance")
        for name, text in SUMMARY.items():
            terminalreporter.write_line(f"{name}: {text}")
