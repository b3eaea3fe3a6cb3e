"""The real vLLM CPU engine serving the tiny target, alone and with each EAGLE-3 drafter.

What each drafter variant does in vLLM is written down in RESULTS.md; the log fragments
asserted here are the stable parts of those texts (a later issue's tests rely on them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from engine_server import NUM_SPECULATIVE_TOKENS, SUMMARY, VllmServer

pytestmark = pytest.mark.engine

RESULTS = Path(__file__).with_name("RESULTS.md")
PROMPTS = ["the quick brown fox", "Speculative decoding with EAGLE-3 drafters.", "zq xv"]
MAX_TOKENS = 48

# Stable fragments of what vLLM 0.32.0 logs for each drafter variant (see RESULTS.md).
LOG_DRAFT_MODEL_PREFIX = "ValueError: There is no module or parameter named 'draft_model' in Eagle3LlamaForCausalLM"
LOG_NO_LM_HEAD = ("Detected EAGLE model without its own lm_head in the checkpoint. "
                  "Sharing target model lm_head weights with the draft model.")
LOG_OWN_LM_HEAD = "Detected EAGLE model with distinct lm_head weights. Keeping separate lm_head weights"
LOG_ENGINE_FAILED = "RuntimeError: Engine core initialization failed."


def greedy(server: VllmServer, prompt: str) -> tuple[list[int], str]:
    choice = server.complete(prompt, MAX_TOKENS)["choices"][0]
    assert choice["finish_reason"] == "length"
    return choice["token_ids"], choice["text"]


def acceptance_length(server: VllmServer) -> tuple[float, dict[str, float]]:
    """Mean acceptance length (1 + accepted / drafts) over this function's own requests."""
    before = server.spec_counters()
    for prompt in PROMPTS:
        server.complete(prompt, MAX_TOKENS)
    after = server.spec_counters()
    delta = {name: after[name] - before.get(name, 0.0) for name in after}
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    assert drafts > 0, f"no speculative drafts counted: {delta}"
    assert delta["vllm:spec_decode_num_draft_tokens_total"] == drafts * NUM_SPECULATIVE_TOKENS
    length = 1.0 + delta["vllm:spec_decode_num_accepted_tokens_total"] / drafts
    SUMMARY[f"{server.name} acceptance"] = (
        f"{length:.2f} ({delta['vllm:spec_decode_num_accepted_tokens_total']:.0f} of "
        f"{delta['vllm:spec_decode_num_draft_tokens_total']:.0f} draft tokens in {drafts:.0f} drafts)")
    return length, delta


def assert_same_greedy_output(server: VllmServer, plain_server: VllmServer) -> None:
    for prompt in PROMPTS:
        assert greedy(server, prompt) == greedy(plain_server, prompt), prompt


class TestPlainTarget:
    def test_health(self, plain_server):
        resp = plain_server.get("/health")
        assert resp.status_code == 200
        assert resp.text == ""

    def test_models_lists_the_target(self, plain_server, engine_models):
        data = plain_server.get("/v1/models").json()["data"]
        assert [m["id"] for m in data] == [str(engine_models["target"]["dir"])]
        assert data[0]["max_model_len"] == 1024

    def test_completion_is_greedy_token_of_the_construction(self, plain_server, engine_models):
        body = plain_server.complete(PROMPTS[0], MAX_TOKENS)
        target = engine_models["target"]
        assert body["usage"]["completion_tokens"] == MAX_TOKENS
        assert body["choices"][0]["token_ids"] == [target["greedy_token_id"]] * MAX_TOKENS
        assert body["choices"][0]["text"] == target["token0_text"] * MAX_TOKENS

    def test_streaming_matches_non_streaming(self, plain_server):
        body = {"model": plain_server.model, "prompt": PROMPTS[1], "max_tokens": MAX_TOKENS, "temperature": 0,
                "stream": True}
        chunks, done = [], False
        with requests.post(plain_server.url + "/v1/completions", json=body, stream=True, timeout=120) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines(decode_unicode=True):
                if not line:
                    continue
                assert line.startswith("data: "), line
                payload = line[len("data: "):]
                if payload == "[DONE]":
                    done = True
                    break
                chunks.append(json.loads(payload)["choices"][0]["text"])
        assert done
        assert len(chunks) > 1
        assert "".join(chunks) == greedy(plain_server, PROMPTS[1])[1]


class TestGoodDrafter:
    """`good` with `layers.0.*` names: every draft is accepted."""

    def test_greedy_output_identical_to_plain(self, good_server, plain_server):
        assert_same_greedy_output(good_server, plain_server)

    def test_acceptance_clearly_above_one(self, good_server):
        length, delta = acceptance_length(good_server)
        assert length > 1 + 0.9 * NUM_SPECULATIVE_TOKENS, delta

    def test_keeps_its_own_lm_head(self, good_server):
        assert LOG_OWN_LM_HEAD in good_server.log()


class TestRandomDrafter:
    """`random` with `midlayer.*` names (vLLM maps them to `layers.0.`): drafts rejected."""

    def test_greedy_output_identical_to_plain(self, random_server, plain_server):
        assert_same_greedy_output(random_server, plain_server)

    def test_acceptance_about_one(self, random_server):
        length, delta = acceptance_length(random_server)
        assert 1.0 <= length < 1.1, delta


class TestArchitectureLlamaForCausalLM:
    """`architectures: ["LlamaForCausalLM"]`: vLLM builds the EAGLE-3 drafter anyway."""

    def test_boots_and_accepts_like_good(self, arch_llama_server):
        length, delta = acceptance_length(arch_llama_server)
        assert length > 1 + 0.9 * NUM_SPECULATIVE_TOKENS, delta
        assert "Resolved architecture: LlamaForCausalLMEagle3" not in arch_llama_server.log()


class TestMissingLmHead:
    """No `lm_head.weight`: vLLM boots silently on the target's lm_head; drafts are rejected."""

    def test_logs_shared_lm_head(self, no_lm_head_server):
        assert LOG_NO_LM_HEAD in no_lm_head_server.log()

    def test_acceptance_about_one_and_output_unchanged(self, no_lm_head_server, plain_server):
        length, delta = acceptance_length(no_lm_head_server)
        assert 1.0 <= length < 1.1, delta
        assert_same_greedy_output(no_lm_head_server, plain_server)


def test_draft_model_prefix_is_refused_at_start(start_server):
    server = start_server("bad-draft-model-prefix", "bad-draft-model-prefix")
    try:
        rc = server.wait_exit()
        assert rc not in (None, 0), f"expected a failed start, got {rc}:\n{server.log_tail()}"
        log = server.log()
        assert LOG_DRAFT_MODEL_PREFIX in log
        assert LOG_ENGINE_FAILED in log
    finally:
        server.stop()


@pytest.mark.parametrize("fragment", [LOG_DRAFT_MODEL_PREFIX, LOG_NO_LM_HEAD, LOG_OWN_LM_HEAD, LOG_ENGINE_FAILED])
def test_results_md_records_the_fragment(fragment):
    assert fragment in RESULTS.read_text()
