"""Fixtures of the module_utils tests: a fake LLM server and child processes that are always reaped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.tests.unit._fake_llm_server import FakeLLMServer


@pytest.fixture
def server():
    fake = FakeLLMServer()
    yield fake
    fake.close()


@pytest.fixture
def python_child():
    children = []

    def start(code):
        child = subprocess.Popen([sys.executable, '-c', code])
        children.append(child)
        return child
    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
