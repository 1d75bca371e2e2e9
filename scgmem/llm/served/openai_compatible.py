"""A `LanguageModel` served over HTTP by any OpenAI-compatible server (vLLM, SGLang, TGI,
llama.cpp, `transformers serve`): `model=openai_compatible model.base_url=... model.model_id=...`.

The methods render prompts with `render` and hand the rendered strings to `generate`, exactly as
with the local backend. A chat API takes messages, not text, so `render` remembers the messages
behind each string it returns and `generate` sends those messages (the server applies its own
chat template); the rendered text itself (the local tokenizer's template under the same chat
policy) is what `count_tokens` budgets with.

With `api: completions` (vLLM, SGLang, llama.cpp, `transformers serve` all serve /v1/completions)
the prompt is instead the text rendered by the local tokenizer's chat template, primed prefix
included, and the server continues it exactly as the local backend would.

Primed assistant prefixes ('{"answer": "', MemGPT's '{"function": "') cannot be continued by a
chat API in general. With `prefill: true` (vLLM, SGLang) the prefix is sent as a final assistant
message with `continue_final_message`, and the reply continues it as locally. Otherwise the prefix
is dropped: the model answers on its own and, when its reply starts by writing the prefix itself
(whitespace aside), that echo is removed, so the caller's `prefix + reply` reads as one object;
an own JSON object that does not start so is read by the answer parser's own-object route
(scgmem/scoring/answer_format.py).

Every request states its decoding settings (temperature, top_p, max_tokens, stop, seed, n=1,
logprobs); the server's own sampling defaults can still apply to settings the API has no field
for (top_k, repetition penalty), which is why the summary records what was sent, not what ran.
Every request of the model (free text, constrained continuations, expansions, scores, id chunks) holds
one of `model.max_in_flight` slots of one limiter while it is sent (scgmem/llm/served/limiter.py);
several `generate` calls may run at once (the batching front's concurrent groups, each counted into
its own meter: `counting_into`). Results are assembled in prompt order, so a deterministic server
gives identical predictions run after run, whatever the concurrency. `model.record_requests` writes
every request into the run's requests.jsonl (scgmem/llm/served/recorder.py).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from typing import Sequence

from scgmem.llm import causal
from scgmem.config_resolvers import DEFAULT_CAP_PROFILE, check_cap_profile
from scgmem.llm.protocol import Generation, Needs, check_generate_args
from scgmem.llm.chat_template import ChatPolicy, eos_token_ids, render_messages
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.served.free_text import FreeTextCalls
from scgmem.llm.served.http_client import (JsonClient, ServerError, check_key_transport, find_tokenize_endpoint,
                                           parse_base_urls, printable, served_models, tokenize_reply)
from scgmem.llm.served import engines
from scgmem.llm.served.constrained import ConstrainedCalls
from scgmem.llm.served.engines.dialect import Unsupported
from scgmem.llm.served.transport import ServerPool, server_root
from scgmem.llm.served.recorder import RequestRecorder
from scgmem.llm.usage import SettingsLog, UsageMeter

log = logging.getLogger(__name__)

__all__ = ["OpenAICompatibleLLM", "ServerError"]


class OpenAICompatibleLLM(FreeTextCalls):
    """Args:
        base_url: the server's OpenAI root, e.g. http://127.0.0.1:8000/v1.
        model_id: the served model's name (the request's `model` field).
        name: short name in outputs (default: model_id's last path part).
        api_key_env: name of an environment variable holding the API key (never recorded).
        tokenizer: local folder or hub id of the served model's tokenizer; None = the server's
            /tokenize endpoint (vLLM, SGLang), refused when it has none.
        context_window: the served window in tokens.
        max_in_flight: requests in flight at once over every server (one limiter, fair across servers).
        max_concurrency: the former name of max_in_flight; when set, it is used instead.
        record_requests: record every request (body, token counts, times) into the run directory's
            requests.jsonl (the pipeline calls `record_requests_to`), for `scripts/bench_replay.py`.
        timeout_s / retries / backoff_s: per-request timeout; retries on 429, 5xx and dropped
            connections with exponential back-off.
        top_p / seed: sent with every request (seed: the default for greedy calls).
        prefill: send a primed assistant prefix with continue_final_message (vLLM/SGLang).
        logprobs: ask for token log-probabilities (Generation.logprob); not every server has them.
        cap_profile: which generation caps of the method configs apply ("embedded" | "paper",
            `scgmem.config_resolvers`); kept only to be reported.
        api: "chat" (messages; the server's template) or "completions" (the locally rendered text;
            needs `tokenizer`).
    """

    served = True

    def __init__(self, base_url: str, model_id: str, *, name: str | None = None, api_key_env: str | None = None,
                 tokenizer: str | None = None, context_window: int = 8192, max_in_flight: int = 16,
                 max_concurrency: int | None = None, record_requests: bool = False,
                 timeout_s: float = 300.0, retries: int = 5, backoff_s: float = 1.0, top_p: float = 1.0,
                 seed: int = 0, prefill: bool = False, logprobs: bool = False, cap_profile: str = DEFAULT_CAP_PROFILE,
                 api: str = "auto", engine: str | None = None, engine_options: dict | None = None) -> None:
        if not base_url or base_url == "???":
            raise ValueError("model.base_url is required, e.g. model.base_url=http://127.0.0.1:8000/v1")
        urls = parse_base_urls(list(base_url) if not isinstance(base_url, str) else base_url)  # parsed once, here
        base_url = urls[0]
        if not model_id or model_id == "???":
            raise ValueError("model.model_id is required: the served model's name (GET <base_url>/models lists it)")
        if api not in ("auto", "chat", "completions"):
            raise ValueError(f"model.api must be auto, chat or completions, got {api!r}")
        # With an engine, the completions API is the default: the engine is sent token ids anyway, and
        # the free-text calls then get the local rendering too, primed prefixes included (a chat API
        # would drop SCG-Mem's `Keywords:` prefix and apply the server's own template).
        api = ("completions" if engine is not None else "chat") if api == "auto" else api
        if tokenizer == "embedded":  # the embedded model's prepared folder (make install), e.g. for model=vllm
            from scgmem.llm.loading import EMBEDDED, resolve_model_dir

            tokenizer = resolve_model_dir(None, **EMBEDDED)
        if api == "completions" and not tokenizer:
            raise ValueError("model.api=completions sends the prompt rendered by the local chat template: "
                             "set model.tokenizer to the served model's folder or hub id")
        max_in_flight = max_in_flight if max_concurrency is None else max_concurrency
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"model.max_in_flight must be a positive int, got {max_in_flight!r}")
        check_cap_profile(cap_profile)
        if engine is not None:
            engines.dialect_class(engine)  # a name not registered fails here, before any request
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"model.api_key_env: environment variable {api_key_env} is not set")
        check_key_transport(urls, key is not None)
        self.base_url = base_url.rstrip("/")
        self.model_id = model_id
        self.name = name or model_id.rstrip("/").split("/")[-1]
        # The memory-cache key names the served weights, never the URL: a memory built against one
        # server is reused against another serving the same model.
        self.source = f"served:{model_id}"
        self.context_window = int(context_window)
        self.max_in_flight = self.max_concurrency = max_in_flight  # max_concurrency: the former name
        self.record_requests = bool(record_requests)
        self._local = threading.local()  # the meter this thread's calls count into (counting_into)
        self._count_lock = threading.Lock()
        self.top_p, self.seed, self.prefill, self.logprobs = float(top_p), int(seed), bool(prefill), bool(logprobs)
        self.cap_profile = cap_profile
        self.api = api
        self.client = JsonClient(self.base_url, api_key=key, timeout_s=timeout_s, retries=retries,
                                 backoff_s=backoff_s)
        # every server of model.base_url: requests spread over them, a dead one's go to the others
        self.pool = ServerPool(urls, max_in_flight=max_in_flight, api_key=key, timeout_s=timeout_s, retries=retries,
                               backoff_s=backoff_s)
        self._openai_prefix = self.base_url[len(server_root(self.base_url)):]
        self.usage = UsageMeter()
        self.settings_log = SettingsLog()
        self.chat = ChatPolicy()
        self.served_models: set[str] = set()
        self._rendered: OrderedDict[str, tuple[list[dict], str]] = OrderedDict()
        self._client_args = dict(api_key=key, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        self._checked_servers = False
        # Built without I/O: the servers are reached in `ready` (the harness's one readiness step) or,
        # for a caller that skips it, on the first call that needs them.
        self.tokenizer, self._tokenizer_identity = None, None
        self._server_tokenize, self._tokenize_field = None, "prompt"
        if tokenizer:
            from transformers import AutoTokenizer
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
            except (OSError, ValueError) as e:
                raise ValueError(f"model.tokenizer={tokenizer}: cannot load a tokenizer ({str(e).splitlines()[0]})") from None
        self.engine = engine
        self._probed = False
        self.constrained = None
        if engine is not None:
            if self.tokenizer is None:
                raise ValueError(f"model.engine={engine}: constrained decoding sends token ids and needs the "
                                 f"served model's tokenizer here (model.tokenizer=<folder or hub id>)")
            self.constrained = ConstrainedCalls(engines.make_dialect(engine, model_id, engine_options), self.pool,
                                                eos_ids=self.eos_ids)

    # ------------------------------------------------------------------ readiness
    def unmet_needs(self, needs: Needs) -> str | None:
        """What this server set-up lacks for `needs` (scgmem.llm.protocol.unmet), from its settings alone."""
        if needs.constraints:
            if self.constrained is None:
                return engines.needs_engine(needs.by)
            if self.api == "chat":
                return (f"model.api=chat: {needs.by} continues primed prefixes (`Keywords:`) that a chat API drops, "
                        "and the server's template would build another memory; use model.api=completions "
                        "(the default with model.engine)")
        return None

    def ready(self, needs: Needs = Needs()) -> None:
        """The readiness step (scgmem.llm.protocol.make_ready): every server of the pool serves
        `model_id` (one unreachable now is marked dead, its requests go to the others), the /tokenize
        endpoint is found when there is no local tokenizer, and with `needs.constraints` the engine is
        probed once. Idempotent."""
        if not self._checked_servers:
            served_models(self.client, self.model_id)
            for i, url in enumerate(self.pool.urls[1:], 1):  # every server of the pool must serve the same model
                try:
                    served_models(JsonClient(url, **self._client_args), self.model_id)
                except ServerError as e:  # unreachable now: never used, so never unchecked
                    if "unreachable" not in str(e):
                        raise
                    self.pool.dead.add(i)
                    log.warning("%s: unreachable at start; its requests go to the other server(s)", url)
            self._checked_servers = True
        if self.tokenizer is None and self._server_tokenize is None:
            self._server_tokenize = self._find_tokenize_endpoint()
        # with a grammar engine: learn once, before the first conversation, that every server can serve the
        # constrained calls (scgmem/llm/served/probe.py); a missing feature is one line naming the server flag
        if needs.constraints and self.constrained is not None and not self._probed:
            from scgmem.llm.served.probe import probe_engine

            probe_engine(self.pool, self.constrained.dialect, vocab_size=self.vocab_size)
            self._probed = True

    # ------------------------------------------------------------------ concurrency
    @contextlib.contextmanager
    def counting_into(self, meter: UsageMeter):
        """Count this thread's calls into `meter`, under its phase, instead of `self.usage`: the
        batching front runs several `generate` calls at once and shares out each one's own counts."""
        self._local.meter = meter
        try:
            yield meter
        finally:
            self._local.meter = None

    def _meter(self) -> UsageMeter:
        return getattr(self._local, "meter", None) or self.usage

    def record_requests_to(self, path, opener=None) -> None:
        """With `model.record_requests`, write every request from now on to `path` (requests.jsonl);
        `opener(path, flags) -> fd` opens it (the pipeline's follows no link: `RequestRecorder`)."""
        if self.record_requests and self.pool.recorder is None:
            self.pool.recorder = RequestRecorder(path, opener)

    # ------------------------------------------------------------------ tokens
    def _find_tokenize_endpoint(self) -> str:
        """The server's /tokenize URL (http_client.find_tokenize_endpoint); its text field is kept."""
        url, self._tokenize_field = find_tokenize_endpoint(self.client, self.base_url, self.model_id)
        return url

    def _tokenize_url(self) -> str:
        if self._server_tokenize is None:  # a caller that skipped `ready`
            self._server_tokenize = self._find_tokenize_endpoint()
        return self._server_tokenize

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        reply = self.client.post_url(self._tokenize_url(), {"model": self.model_id, self._tokenize_field: text,
                                                             "add_special_tokens": False})
        return tokenize_reply(reply, text, self._server_tokenize)

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        url = self._tokenize_url().replace("/tokenize", "/detokenize")
        reply = self.client.post_url(url, {"model": self.model_id, "tokens": list(ids)})
        text = reply.get("prompt", reply.get("content"))  # vLLM / SGLang, llama.cpp
        if not isinstance(text, str):
            raise ServerError(f"{url}: field 'prompt': {printable(repr(text), 60)}: must be a string")
        return text

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    # the vocabulary facts only constrained decoding reads; known only with a local tokenizer
    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer) if self.tokenizer is not None else 0

    @property
    def pad_id(self) -> int:
        return getattr(self.tokenizer, "pad_token_id", None) or 0

    @property
    def eos_id(self) -> int:
        return getattr(self.tokenizer, "eos_token_id", None) or 0

    @property
    def eos_ids(self) -> list[int]:
        """The ids that end a generation, read off the tokenizer as the local backend reads them."""
        return eos_token_ids(self.tokenizer) if self.tokenizer is not None else [self.eos_id]

    @property
    def applies_constraints(self) -> bool:
        """SCG-Mem's schema constraint runs here when an engine dialect is set (`model.engine`)."""
        return self.constrained is not None

    dtype = "served"  # the server's weights; part of the memory-cache key with `source`

    # ------------------------------------------------------------------ chat
    def set_chat_policy(self, policy: ChatPolicy) -> None:
        self.chat = policy

    def render(self, messages: str | list[dict], *, add_generation_prompt: bool = True,
               assistant_prefix: str = "") -> str:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        full = self.chat.with_system(list(messages))
        if self.tokenizer is not None:
            text = render_messages(self.tokenizer, list(messages), self.chat, add_generation_prompt=add_generation_prompt)
        else:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in full) + ("assistant: " if add_generation_prompt else "")
        text += assistant_prefix
        self._rendered[text] = (full, assistant_prefix)
        self._rendered.move_to_end(text)
        while len(self._rendered) > 50000:  # bounded: a prompt is generated soon after it is rendered
            self._rendered.popitem(last=False)
        return text

    @property
    def prompt_fingerprint(self) -> str:
        """The memory-cache key's part for what shapes a served run's prompts and decoding besides the
        model id (scgmem/harness/cache.py): the chat policy, the local tokenizer (`tokenizer_sha256`,
        computed once) and chat template as it renders a probe, and the engine's route. A memory
        built under another tokenizer, template or route is rebuilt, never reused."""
        import hashlib

        from scgmem.llm.chat_template import template_report, tokenizer_sha256

        template = None
        if self.tokenizer is not None:  # else the server's /tokenize and template: the model id names them
            report = template_report(self.tokenizer, self.chat)
            template = [report["template_sha256"], report["probe_sha256"]]
            self._tokenizer_identity = self._tokenizer_identity or tokenizer_sha256(self.tokenizer)
        route = None if self.constrained is None else [self.engine, self.constrained.dialect.route]
        probe = json.dumps([self.chat.as_dict(), self.model_id, self.prefill, self._tokenizer_identity, template, route],
                           sort_keys=True, default=str)
        return hashlib.sha256(probe.encode()).hexdigest()

    def generation_report(self) -> dict:
        return {"calls": self.settings_log.report(), "neutralised_model_defaults": {},
                "chat_template": {**self.chat.as_dict(), "applied_by": "server"}, "cap_profile": self.cap_profile,
                "server": {"models_reported": sorted(self.served_models), "model_id": self.model_id,
                           "api": self.api, "prefill": self.prefill, "max_in_flight": self.max_in_flight,
                           "tokenizer": "local" if self.tokenizer is not None else "server /tokenize",
                           "pool": self.pool.report(), **self._engine_report()}}

    def _engine_report(self) -> dict:
        if self.constrained is None:
            return {"engine": None}
        return {"engine": self.engine, "raw_logprobs_route": self.constrained.dialect.route,
                "constrained_requests": self.constrained.requests}

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                 seeds: Sequence[int] | None = None, constraint: KeyConstraint | None = None, num_beams: int = 1,
                 num_return_sequences: int = 1, length_penalty: float = 0.0,
                 stop: Sequence[str] = ()) -> list[list[Generation]]:
        if constraint is None and (num_beams > 1 or num_return_sequences > 1):
            raise TypeError("beam search needs token-level control: use the local backend (e.g. model=local)")
        check_generate_args(len(prompts), temperature=temperature, seeds=seeds, num_beams=num_beams,
                            num_return_sequences=num_return_sequences)
        if constraint is not None:
            return self._generate_constrained(prompts, constraint, max_new_tokens=max_new_tokens,
                                              temperature=temperature, seeds=seeds, num_beams=num_beams,
                                              num_return_sequences=num_return_sequences)
        settings = {"temperature": float(temperature), "top_p": self.top_p, "max_tokens": int(max_new_tokens),
                    "n": 1, "logprobs": self.logprobs, "prefill": self.prefill, "api": self.api}
        with self._count_lock:
            self.settings_log.record(SettingsLog.kind(self._meter().phase, temperature=temperature, num_beams=1,
                                                      processors=[]),
                                     settings, calls=len(prompts), max_new_tokens=max_new_tokens,
                                     temperature=temperature, stop=tuple(stop))
        bodies = [self._body(p, max_new_tokens, temperature, self.seed if seeds is None else int(seeds[i]), stop)
                  for i, p in enumerate(prompts)]
        if max_new_tokens <= 0:
            return [[Generation(text="", n_prompt_tokens=0)] for _ in prompts]
        # threads: one per slot is enough; the pool's limiter bounds the requests of every call at once
        # (each prompt on its own branch of the job's causal strand: scgmem/llm/causal.py)
        replies = causal.map_threads(lambda ib: self.pool.post_from(self._openai_prefix + f"/{self._endpoint}",
                                                                    ib[1][0], affinity=ib[0]), list(enumerate(bodies)),
                                     max_workers=min(self.max_in_flight, max(1, len(bodies))))
        # prompt order, whatever the order of arrival; an error names the server that replied
        return [[self._generation(reply, prefix, stop, server)] for (_, prefix), (reply, server) in zip(bodies, replies)]

    def _generate_constrained(self, prompts, constraint, *, max_new_tokens, temperature, seeds, num_beams,
                              num_return_sequences) -> list[list[Generation]]:
        """A `KeyConstraint` on the engine (scgmem/llm/served): the ids the local backend would feed
        (the end of an over-long prompt), one decoder per prompt."""
        if self.constrained is None:
            raise Unsupported(f"{self.base_url}: {engines.needs_engine('a schema-constrained call')}")
        with self._count_lock:
            self.settings_log.record(SettingsLog.kind(self._meter().phase, temperature=temperature,
                                                      num_beams=num_beams, processors=["SchemaDecoding"]),
                                     {"engine": self.engine, "num_beams": num_beams, "length_penalty": 0.0,
                                      "early_stopping": False, "temperature": float(temperature)},
                                     calls=len(prompts), max_new_tokens=max_new_tokens, temperature=temperature,
                                     stop=())
        limit = self.context_window - max_new_tokens
        encoded = [self.encode(p) for p in prompts]
        ids = [x[max(0, len(x) - limit):] for x in encoded]  # the end of an over-long prompt, as locally
        gens = self.constrained.generate(ids, constraint, max_new_tokens=max_new_tokens, temperature=temperature,
                                         seeds=seeds if seeds is not None else [self.seed] * len(prompts),
                                         num_beams=num_beams, num_return_sequences=num_return_sequences,
                                         decode=lambda t: self.tokenizer.decode(t, skip_special_tokens=True))
        self._meter().add(prompt_tokens=sum(len(x) for x in ids), calls=self.constrained.last_requests(),
                       generated_tokens=sum(len(g.token_ids) for row in gens for g in row),
                       cut=sum(g.cut for row in gens for g in row))
        return gens
