"""A served run's memory-cache key holds what shapes the memory besides the model id (issue 58):
the local tokenizer and its chat template. `scgmem-run` against a scripted server on 127.0.0.1 with
one cache folder: the same settings reuse the memory, another tokenizer or template rebuilds it."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.harness.test_run_e2e import scgmem_run
from tests.llm.servers import ScriptedServer

SMALL = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
         "model.retries=0", "method=memorybank", "model.api=completions"]


def reply(body):
    return 200, {"choices": [{"text": "They talked about hiking.", "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 5, "completion_tokens": 4}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The embedded tokenizer, and two copies: one with another chat template, one with a token added."""
    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    source = resolve_model_dir(None, **EMBEDDED)
    root = tmp_path_factory.mktemp("tokenizers")
    out = {"same": source}
    for name in ("template", "vocab"):
        folder = root / name
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.safetensors"))
        out[name] = str(folder)
    (root / "template" / "chat_template.jinja").write_text(
        (root / "template" / "chat_template.jinja").read_text().replace("<|im_start|>", "<|im_start|> ", 1))
    spec = json.loads((root / "vocab" / "tokenizer.json").read_text())
    spec["added_tokens"].append({"id": max(t["id"] for t in spec["added_tokens"]) + 100000, "content": "<|h58|>",
                                 "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": True})
    (root / "vocab" / "tokenizer.json").write_text(json.dumps(spec))
    return out


def requests_of_a_run(server, tokenizer, run_dir, cache) -> int:
    before = len(server.bodies)
    scgmem_run("model=openai_compatible", f"model.base_url={server.url}", f"model.model_id={server.model}",
               f"model.tokenizer={tokenizer}", *SMALL, f"run.cache_dir={cache}", f"hydra.run.dir={run_dir}")
    return len(server.bodies) - before


@pytest.mark.slow  # five runs of the CLI (about 2.5 min on 2 busy cores)
def test_another_tokenizer_or_template_rebuilds_the_memory(tmp_path, folders):
    cache = tmp_path / "cache"
    with ScriptedServer(reply) as server:
        built = requests_of_a_run(server, folders["same"], tmp_path / "a", cache)
        reused = requests_of_a_run(server, folders["same"], tmp_path / "b", cache)
        assert reused < built  # the same settings load the memory: answers only
        for name in ("template", "vocab"):
            assert requests_of_a_run(server, folders[name], tmp_path / name, cache) == built, name
