"""Engine refusals and pools through the whole `scgmem-run` command (issue 58), against hostile fake
servers on 127.0.0.1:

* the engine probe's refusal, and a vLLM server that stops honouring `logprob_token_ids` mid-run,
  are one line and exit 2 (they were tracebacks with exit 1);
* a pool fails over from a server answering HTTP 500 as from a dropped connection, and an error
  line names the server that sent the bad reply, not the pool's first."""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.harness.test_run_e2e import records, scgmem_run
from tests.llm.servers import ScriptedServer, completion

SMALL = ["data.samples=[conv-26]", "data.max_sessions=1", "data.questions_per_category=1", "run.progress=false",
         "model.retries=0", "run.use_memory_cache=false"]
MODEL = "fake-vllm"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from scgmem.llm.loading import EMBEDDED, resolve_model_dir

    folder = resolve_model_dir(None, **EMBEDDED)
    return folder, AutoTokenizer.from_pretrained(folder)


class FakeVLLM:
    """vLLM's /v1/completions (and llama.cpp's /completion) as the probe and the client read them. `grammar_ok=False`: continuations
    ignore the grammar (the probe refuses). `honour_ids`: how many logprob_token_ids requests are
    answered in full; later ones list one id only (a server that stopped honouring the field)."""

    def __init__(self, tokenizer, *, grammar_ok: bool = True, honour_ids: int = 10**9) -> None:
        self.tok, self.grammar_ok, self.honour_ids, self.next_asked = tokenizer, grammar_ok, honour_ids, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, payload):
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"data": [{"id": MODEL}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send(outer.native(body) if self.path == "/completion" else outer.answer(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def native(self, body: dict) -> dict:
        """llama.cpp's /completion, whose continuations carry log-probs: here renormalised by the
        grammar (0 for a forced token), not the raw values its next-token list gives."""
        if "grammar" in body:
            ids = [int(t) for t in re.findall(r"<\[(\d+)\]>", body["grammar"])][:2]
            return {"tokens": ids, "stop_type": "eos",
                    "completion_probabilities": [{"id": t, "logprob": 0.0, "top_logprobs": []} for t in ids]}
        return {"tokens": [1001], "completion_probabilities": [{"id": 1001, "logprob": -0.5, "top_logprobs": [
            {"id": 1001, "logprob": -0.5}, {"id": 1000, "logprob": -0.6}]}]}

    def answer(self, body: dict) -> dict:
        if "structured_outputs" in body:  # a continuation under a grammar: its token-id terminals in order
            ids = [int(t) for t in re.findall(r"<\[(\d+)\]>", body["structured_outputs"]["grammar"])]
            ids = ids[:2] if self.grammar_ok else [7, 7]
            return {"choices": [{"token_ids": ids, "finish_reason": "stop", "logprobs": None}]}
        if "logprob_token_ids" in body:
            self.next_asked += 1
            ids = body["logprob_token_ids"] if self.next_asked <= self.honour_ids else body["logprob_token_ids"][:1]
            return {"choices": [{"finish_reason": "length",
                                 "logprobs": {"top_logprobs": [{f"token_id:{t}": -0.5 for t in ids}]}}]}
        if "prompt_logprobs" in body:
            n = len(body["prompt"])
            entries = [None] + [{str(t): {"logprob": -0.5}} for t in body["prompt"][1:]]
            return {"choices": [{"prompt_logprobs": entries[:n], "finish_reason": "length"}]}
        # free text (accommodation): the message's own longer words, so that they are grounded keys
        message = self.tok.decode(body["prompt"]).split("Message:")[-1]
        words = list(dict.fromkeys(w for w in re.findall(r"[A-Za-z]{5,}", message)))[:4]
        return {"choices": [{"text": " " + ", ".join(words), "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5}}

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def vllm_args(url: str, folder) -> list[str]:
    return ["model=openai_compatible", "model.engine=vllm", f"model.base_url={url}", f"model.model_id={MODEL}",
            f"model.tokenizer={folder}"]


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith("error: "), proc.stderr[-3000:]
    return lines[-1]


def test_a_probe_refusal_is_one_line_and_exit_2(tmp_path, tokenizer):
    folder, tok = tokenizer
    with FakeVLLM(tok, grammar_ok=False) as server:
        proc = scgmem_run(*vllm_args(server.url, folder), "method=scgmem", *SMALL,
                          f"hydra.run.dir={tmp_path / 'run'}", check=False)
    line = one_error_line(proc)
    assert "cannot serve SCG-Mem's constrained calls" in line and "guidance" in line


def test_non_raw_log_probs_in_continuations_are_refused_by_the_probe(tmp_path, tokenizer):
    folder, tok = tokenizer
    with FakeVLLM(tok) as server:
        args = vllm_args(server.url, folder)
        args[1] = "model.engine=llamacpp"
        proc = scgmem_run(*args, "method=scgmem", *SMALL, f"hydra.run.dir={tmp_path / 'run'}", check=False)
    line = one_error_line(proc)
    assert "not raw" in line and server.url in line


def test_a_server_that_stops_honouring_logprob_token_ids_mid_run_is_one_line(tmp_path, tokenizer):
    """The probe's next-token request is answered in full; recall's beam search then meets a server
    that lists one of the ids it named (the ablation without evolution ingests by free text only)."""
    folder, tok = tokenizer
    with FakeVLLM(tok, honour_ids=1) as server:
        proc = scgmem_run(*vllm_args(server.url, folder), "method=scgmem", "method.evolution=false", *SMALL,
                          f"hydra.run.dir={tmp_path / 'run'}", check=False)
    line = one_error_line(proc)
    assert "logprob_token_ids" in line and server.url.removesuffix("/v1") in line
    assert server.next_asked >= 2  # the refusal came mid-run, after the probe


def served_pool(urls, folder) -> list[str]:
    return ["model=openai_compatible", f"model.base_url=[{','.join(urls)}]", "model.model_id=tiny-served",
            f"model.tokenizer={folder}", "method=full_context"]


def test_a_pool_fails_over_from_a_server_answering_500(tmp_path, tokenizer):
    folder, _ = tokenizer
    good = lambda body: (200, completion('{"answer": "yes"}'))  # noqa: E731
    with ScriptedServer(lambda body: (500, {"error": "broken"})) as bad, ScriptedServer(good) as ok:
        run_dir = tmp_path / "run"
        proc = scgmem_run(*served_pool([bad.url, ok.url], folder), *SMALL, "run.answer_batch_size=1",
                          f"hydra.run.dir={run_dir}", check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {r["prediction"] for r in records(run_dir)} == {"yes"} and len(records(run_dir)) == 2
    pool = json.loads((run_dir / "summary.json").read_text())["generation"]["server"]["pool"]
    assert pool["dead"] == [bad.url]


def test_an_error_line_names_the_server_that_sent_the_bad_reply(tmp_path, tokenizer):
    folder, _ = tokenizer
    good = lambda body: (200, completion('{"answer": "yes"}'))  # noqa: E731
    with ScriptedServer(good) as ok, ScriptedServer(lambda body: (200, {"choices": []})) as liar:
        proc = scgmem_run(*served_pool([ok.url, liar.url], folder), *SMALL, "run.answer_batch_size=2",
                          f"hydra.run.dir={tmp_path / 'run'}", check=False)
    line = one_error_line(proc)
    assert liar.url in line and ok.url not in line
