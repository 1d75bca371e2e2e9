"""A paper model's stand-in (2-layer random Qwen2 with Qwen2.5's real tokenizer and template,
`make standins`) through vLLM's own server and on the local backend: the token ids vLLM receives are
the local backend's, and SCG-Mem builds the same memory. The server is started as
`make reproduce-table1 BACKEND=vllm` starts it (scgmem/llm/served/launchers/__init__.py, on what
`model=standin-qwen2.5 backend=vllm` composes), once for the module.

The fixture never installs anything: it uses `.venv-vllm` (`make vllm-install`; `.ci/run` runs it) or
$SCGMEM_VLLM_PYTHON. It skips without one, except in CI (CI=true), where a missing vLLM fails.
Llama 3.2's template (its "Cutting Knowledge Date" / "Today Date" lines) is checked at the prompt-ids
level without a second server: the served client renders and tokenises exactly as the local backend.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from scgmem.llm.served.launchers.vllm import vllm_python

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "locomo10.json"
IN_CI = os.environ.get("CI") == "true"
pytestmark = [pytest.mark.skipif(not DATA.exists(), reason="data/locomo10.json missing (make data)"),
              pytest.mark.skipif(vllm_python() is None and not IN_CI,
                                 reason="vLLM is not set up here (make vllm-install)")]
SLICE = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1"]
PROMPT = "Extract the 3 to 5 most important keywords of this message: 'I went hiking with my kids on Sunday.'"


def composed(model: str, *overrides: str):
    from hydra import compose, initialize_config_dir

    from scgmem.config_resolvers import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[f"model={model}", "backend=vllm", *overrides])


def run_policy():
    from scgmem.harness.run import split_protocol
    from scgmem.llm.chat_template import ChatPolicy

    return ChatPolicy(**split_protocol(composed("standin-qwen2.5"))[1])


@pytest.fixture(scope="module")
def standins():
    from scgmem.llm.doubles.tiny_real_models import build_standins

    return {p.name: p for p in build_standins()}


@pytest.fixture(scope="module")
def vllm(standins, tmp_path_factory):
    from omegaconf import OmegaConf

    from scgmem.llm.served.launchers import ServeSpec, launcher
    from tests.llm.servers import free_port

    spec = ServeSpec.of(OmegaConf.to_container(composed("standin-qwen2.5").backend.serve, resolve=True))
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = launcher("vllm").start(spec, port=free_port(), log=log, wait_s=900)
    yield {"url": server.url, "log": log, "spec": spec}
    server.stop()


def clients(folder: Path, url: str, name: str, policy):
    """The local backend and the served client of one stand-in, under one chat policy."""
    from scgmem.llm import LLM
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    local = LLM(name, str(folder), dtype="float32", device="cpu")
    served = OpenAICompatibleLLM(url, name, tokenizer=str(folder), engine="vllm")
    for llm in (local, served):
        llm.set_chat_policy(policy)
    return local, served


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as reply:
        return json.loads(reply.read())


@pytest.mark.parametrize("system", ["run", "template's own"])
def test_vllm_receives_the_local_backends_token_ids_under_qwens_template(vllm, standins, system):
    from scgmem.llm.chat_template import ChatPolicy
    from scgmem.llm.doubles.real_tokenizers import QWEN25_SYSTEM

    policy = run_policy() if system == "run" else ChatPolicy(system_prompt=None)
    local, served = clients(standins["standin-qwen2.5"], vllm["url"], "standin-qwen2.5", policy)
    text = local.render(PROMPT, assistant_prefix="Keywords:")
    assert served.render(PROMPT, assistant_prefix="Keywords:") == text
    assert (QWEN25_SYSTEM in text) == (system != "run")  # Qwen2.5's default system message, when none is given
    ids = local.encode(text)
    assert served.encode(text) == ids
    base = {"model": "standin-qwen2.5", "max_tokens": 1, "temperature": 0.0, "return_token_ids": True}
    echoed = post(vllm["url"] + "/completions", {**base, "prompt": ids})["choices"][0]["prompt_token_ids"]
    as_text = post(vllm["url"] + "/completions",
                   {**base, "prompt": text, "add_special_tokens": False})["choices"][0]["prompt_token_ids"]
    assert echoed == ids and as_text == ids  # what vLLM received, and its own tokeniser agrees


def test_the_served_client_renders_llamas_template_as_the_local_backend(standins):
    """Llama 3.2's system block with its two date lines, under the run's fixed date."""
    from tests.llm.servers import ScriptedServer

    with ScriptedServer(lambda body: (404, {}), model="standin-llama3.2") as stub:  # answers /models only
        local, served = clients(standins["standin-llama3.2"], stub.url, "standin-llama3.2", run_policy())
        text = local.render(PROMPT, assistant_prefix="Keywords:")
        assert "Cutting Knowledge Date: December 2023" in text and "Today Date: 26 Jul 2024" in text
        assert served.render(PROMPT, assistant_prefix="Keywords:") == text
        ids = local.encode(text)
        assert served.encode(text) == ids and ids[0] == 128000  # one <|begin_of_text|>, from the template
        assert ids.count(128000) == 1


def scgmem_run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "scgmem.run", "model=standin-qwen2.5", "method=scgmem", f"data.path={DATA}",
           "run.use_memory_cache=false", "run.progress=false", f"hydra.run.dir={run_dir}", *SLICE, *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


CONCEPTS = ("hiking", "kids", "sunday", "support group", "painting", "sunrise", "lake", "career", "counseling",
            "mental health", "swimming", "family", "music", "school", "transgender stories", "pottery class")


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def test_scgmem_constrained_keys_through_vllm_equal_the_local_backends(vllm, standins):
    """SCG-Mem's constrained calls (greedy key lists and recall's beam search under the schema trie) on the
    stand-in: vLLM's keys are the local backend's. A random model's memory from a real run stays empty
    (its free keywords never parse), so the schema is given here, as the memory would hold it."""
    import torch

    from scgmem.core.decoding import key_end_id
    from scgmem.core.schema import CognitiveSchema
    from scgmem.llm.constraint_spec import KeyConstraint

    local, served = clients(standins["standin-qwen2.5"], vllm["url"], "standin-qwen2.5", run_policy())
    schema = CognitiveSchema(local.encode, local.vocab_size, forbidden_ids=local.eos_ids)
    for concept in CONCEPTS:
        schema.add(concept)
    constraint = KeyConstraint(schema.trie, terminator=schema.terminator, end_id=key_end_id(local), max_keys=5)
    prompt = local.render(PROMPT, assistant_prefix="Keywords:")
    greedy = [llm.generate([prompt], constraint=constraint, max_new_tokens=32, temperature=0.0, seeds=[0])[0][0]
              for llm in (local, served)]
    ours, theirs = greedy[1].token_ids, greedy[0].token_ids
    at = first_divergence(ours, theirs)
    if at is not None:  # a near-tie of the random model: show its margin, then the keys before it must agree
        ids = torch.tensor([local.encode(prompt) + theirs[:at]])
        with torch.no_grad():
            scores = local.model(ids).logits[0, -1].float().log_softmax(-1)
        margin = abs(float(scores[theirs[at]] - scores[ours[at]]))
        print(f"greedy keys diverge at token {at}: local {theirs[at]}, vLLM {ours[at]}, margin {margin:.2e}")
        assert margin < 1e-3, f"not a near-tie: margin {margin} at token {at}"
    assert ours[:at] == theirs[:at] and len(ours) > 0
    assert all(schema.concept_of_tokens(k) is not None for k in _keys(ours[:at], schema.terminator))
    beams = [llm.generate([prompt], constraint=constraint, max_new_tokens=16, num_beams=4, num_return_sequences=4)[0]
             for llm in (local, served)]
    assert [b.token_ids for b in beams[1]] == [b.token_ids for b in beams[0]]


def _keys(ids: list[int], terminator: int) -> list[list[int]]:
    out, cur = [], []
    for t in ids:
        if t == terminator:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    return out


def test_scgmem_on_the_standin_through_vllm_matches_the_local_run(vllm, tmp_path):
    scgmem_run(tmp_path / "local")
    scgmem_run(tmp_path / "vllm", "backend=vllm", f"backend.llm.base_url={vllm['url']}")
    ours = (tmp_path / "vllm" / "memory" / "conv-26.json").read_bytes()
    assert ours == (tmp_path / "local" / "memory" / "conv-26.json").read_bytes()
    summary = json.loads((tmp_path / "vllm" / "summary.json").read_text())
    assert summary["model"] == "standin-qwen2.5@vllm" and summary["backend"] == "vllm"
    assert summary["structural_hallucination_counts"]["outside_schema"] == 0
    assert summary["generation"]["server"]["engine"] == "vllm"
    mine, theirs = (_records(tmp_path / d) for d in ("vllm", "local"))
    assert sorted(mine) == sorted(theirs) and mine
    for qa, record in mine.items():
        for key in ("seed_keys", "context_keys", "retrieved", "prompt_tokens"):
            assert record[key] == theirs[qa][key], (qa, key)


def _records(run_dir: Path) -> dict[int, dict]:
    return {r["qa_index"]: r for r in map(json.loads, (run_dir / "predictions.jsonl").read_text().splitlines())}
