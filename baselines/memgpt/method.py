"""MemGPT (Packer et al., 2023): a bounded main context paged by the LLM through function calls.

docs/methods.md, section MemGPT; after MemGPT [G1] (paper-era commit and tag 0.3.25). The main
context holds the system prompt (with the function listing), a metadata line, the core
memory blocks and the FIFO queue; the whole transcript sits in recall storage and the
agent's own notes in archival storage (`scgmem.baselines.memgpt.functions`).

Loop: each step is one greedy call primed with ``{"function": "`` (the chatml wrapper's
prefix); the reply is parsed (shared `clean_json`, then a regex per field), executed, and
appended with its function return. Another step follows if request_heartbeat is set, if
the call failed, or (MemGPT's local-LLM `heartbeat_correction`) if the previous message
was a user message and the function is not send_message; at most `ingest_steps` steps
during ingest and `qa_steps` at QA.

Memory pressure: past `warning_frac`*W a one-time alert asks the agent to save facts; on
overflow the oldest messages holding `summary_frac` of the queue's tokens are replaced by
a recursive first-person summary (<= 100 words), keeping the last `keep_last` messages
and never starting the queue with a function return. Evicted turns stay in recall.

Ingest (adaptation): every turn goes into recall and into the queue as
``[{date}] {speaker}: {text}``. ``per_turn`` (faithful) runs the agent after every turn;
``per_session`` (the default here, a counted deviation, ~20x cheaper: 5,882 turns at 1-3
calls each is days of CPU for the embedded model) appends a whole session, then runs the
agent once on a "session ended" alert.

Questions: each starts from the post-ingest snapshot (questions are independent), gets
``Question: {q}`` and runs until send_message or the step cap; the context is core memory,
the summary, this loop's search results and the FIFO tail. Questions run one after the
other, each its whole heartbeat chain (see `recall_batch` for why not in lock-step).
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from scgmem.baselines.memgpt.context import AgentState, answer_context
from scgmem.baselines.memgpt.functions import (SEARCH_FUNCTIONS, ArchivalStorage, CoreMemory, RecallStorage, Toolbox,
                                        ToolResult, function_block)
from scgmem.baselines.memgpt.prompts import (FAILED_HEARTBEAT, HUMAN, PERSONA, PREFIX, PROMPT_VERSION, REQ_HEARTBEAT, ROLE,
                                      SESSION_END, SUMMARY_SYSTEM, SYSTEM_PROMPT, USER_MESSAGES, WARNING,
                                      longest_content_word, parse_call, turn_line)
from scgmem.api import Conversation, MemoryMethod, Recall
from scgmem.api.settings import check_choice, check_embedder, check_int, check_range

log = logging.getLogger(__name__)


class MemGPT(MemoryMethod):
    """MemGPT on one conversation.

    Args:
        llm, embedder: the shared LLM and embedder (the embedder serves archival memory).
        window: W, the main context in tokens (LLM_MAX_TOKENS["DEFAULT"] = 8192), capped at the
            LLM's own window.
        core_char_limit: characters per core block (CORE_MEMORY_*_CHAR_LIMIT = 2000).
        warning_frac: alert threshold as a fraction of W (MESSAGE_SUMMARY_WARNING_FRAC = 0.75).
        summary_frac: share of queue tokens summarised on overflow (MESSAGE_SUMMARY_TRUNC_TOKEN_FRAC).
        keep_last: messages never summarised (MESSAGE_SUMMARY_TRUNC_KEEP_N_LAST = 3).
        ingest_steps / qa_steps: step caps of a heartbeat chain (3 and 5).
        ingest_mode: "per_session" (deviation, default) or "per_turn" (faithful).
        page_size: search results per page (RETRIEVAL_QUERY_DEFAULT_PAGE_SIZE = 5).
        function_return_char_limit: FUNCTION_RETURN_CHAR_LIMIT = 3000.
        chunk_tokens: archival chunk size (embedding_chunk_size = 300).
        step_tokens / summary_tokens: generation caps of a step and of a summary.
        search_any_keyword: OR the words of a conversation_search query (counted deviation).
    """

    name = "memgpt"
    resumable = True  # checkpoints after every session (per-turn ingest is days of CPU)

    def __init__(self, llm, embedder, window: int = 8192, core_char_limit: int = 2000, warning_frac: float = 0.75,
                 summary_frac: float = 0.75, keep_last: int = 3, ingest_steps: int = 3, qa_steps: int = 5,
                 ingest_mode: str = "per_session", page_size: int = 5, function_return_char_limit: int = 3000,
                 chunk_tokens: int = 300, step_tokens: int = 160, summary_tokens: int = 160,
                 search_any_keyword: bool = False) -> None:
        super().__init__(llm, embedder)
        check_embedder("memgpt", embedder, "for archival memory")
        check_choice("ingest_mode", ingest_mode, ("per_turn", "per_session"))
        for arg, value in (("warning_frac", warning_frac), ("summary_frac", summary_frac)):
            check_range(arg, value, 0, 1, open_low=True, open_high=True)
        for arg, value in (("window", window), ("core_char_limit", core_char_limit), ("ingest_steps", ingest_steps),
                           ("qa_steps", qa_steps), ("page_size", page_size), ("chunk_tokens", chunk_tokens),
                           ("step_tokens", step_tokens), ("keep_last", keep_last)):
            check_int(arg, value)
        llm_window = llm.context_window
        if window > llm_window:
            log.warning("MemGPT window %d exceeds the LLM's context window %d; using %d",
                        window, llm_window, llm_window)
        self.window = min(window, llm_window)
        self.core_char_limit = core_char_limit
        self.warning_frac, self.summary_frac, self.keep_last = warning_frac, summary_frac, keep_last
        self.ingest_steps, self.qa_steps, self.ingest_mode = ingest_steps, qa_steps, ingest_mode
        self.page_size, self.function_return_char_limit = page_size, function_return_char_limit
        self.chunk_tokens, self.step_tokens, self.summary_tokens = chunk_tokens, step_tokens, summary_tokens
        self.search_any_keyword = search_any_keyword
        self.speakers = ("A", "B")
        self.recall_store = RecallStorage()
        self.toolbox = self._toolbox()
        self.snapshot = self._fresh_state()

    # ------------------------------------------------------------------ setup
    def _toolbox(self) -> Toolbox:
        return Toolbox(self.recall_store, self.page_size, self.function_return_char_limit, self.search_any_keyword)

    def _fresh_state(self) -> AgentState:
        a, b = self.speakers
        core = CoreMemory(PERSONA, HUMAN.format(a=a, b=b), self.core_char_limit)
        return AgentState(core, ArchivalStorage(self.embedder, self.llm.count_tokens, self.chunk_tokens))

    # ------------------------------------------------------------------ main context
    def _system(self, state: AgentState) -> str:
        a, b = self.speakers
        metadata = (f"### Memory\n{len(self.recall_store.entries)} previous messages are stored in recall memory "
                    f"(use functions to access them)\n{len(state.archival.passages)} total memories you created are "
                    "stored in archival memory (use functions to access them)\n\nCore memory shown below (limited in "
                    "size, additional information stored in archival / recall memory):")
        return "\n".join([SYSTEM_PROMPT.format(a=a, b=b), function_block(), "", metadata, state.core.render()])

    def _prompt(self, state: AgentState) -> str:
        messages = [{"role": "system", "content": self._system(state)}]
        messages += [{"role": ROLE[m["kind"]], "content": m["content"]} for m in state.queue]
        return self.llm.render(messages, assistant_prefix=PREFIX)

    def _append(self, state: AgentState, kind: str, content: str, dia_id: str | None = None) -> None:
        state.queue.append({"kind": kind, "content": content, **({"dia_id": dia_id} if dia_id else {})})
        state.messages_total += 1

    def _prepare(self, state: AgentState) -> str:
        """The step's prompt, after the memory-pressure alert and any overflow summaries."""
        prompt = self._prompt(state)
        if not state.alerted and self.llm.count_tokens(prompt) > self.warning_frac * self.window:
            self._append(state, "alert", WARNING)
            state.alerted = True
            self.count("pressure_alerts")
            prompt = self._prompt(state)
        while self.llm.count_tokens(prompt) + self.step_tokens > self.window:
            if not self.summarize(state):
                if len(state.queue) <= 1:
                    break  # one message longer than W: the backend keeps the prompt's end
                state.queue.pop(0)  # cannot summarise (too few messages): evict unsummarised
                self.deviations["overflow_drop"] += 1
            prompt = self._prompt(state)
        return prompt

    def summarize(self, state: AgentState) -> bool:
        """agent.py::summarize_messages_inplace on the queue; False if nothing can be summarised."""
        queue = state.queue
        if len(queue) <= self.keep_last:
            return False
        counts = [self.llm.count_tokens(m["content"]) for m in queue]
        target = int(sum(counts) * self.summary_frac)
        cutoff, seen = 0, 0
        for i in range(len(queue) - self.keep_last):
            cutoff, seen = i, seen + counts[i]
            if seen > target:
                break
        cutoff += 1
        if cutoff < len(queue) and ROLE[queue[cutoff]["kind"]] == "user":
            cutoff += 1  # MemGPT: try to make an assistant message come after the cutoff
        while cutoff < len(queue) and queue[cutoff]["kind"] == "result":
            cutoff += 1  # never start the queue with a function return
        limit = len(queue) - self.keep_last
        if cutoff > limit:  # the last keep_last stay; keep a return with its call
            cutoff = limit
            while cutoff > 0 and queue[cutoff]["kind"] == "result":
                cutoff -= 1
        evicted = queue[:cutoff]
        if len(evicted) <= 1:
            return False  # MemGPT refuses too: it would summarise the same message over and over
        transcript = "\n".join(f"{ROLE[m['kind']]}: {m['content']}" for m in evicted)  # includes the old summary
        prompt = self.llm.render([{"role": "system", "content": SUMMARY_SYSTEM},
                                  {"role": "user", "content": transcript}])
        [[gen]] = self.llm.generate([prompt], max_new_tokens=self.summary_tokens, temperature=0.0)
        summary = gen.text.strip()
        if not summary:
            self.deviations["empty_summary"] += 1
            summary = "(no summary)"
        hidden = state.messages_total - (len(queue) - cutoff)
        content = (f"Note: prior messages ({hidden} of {state.messages_total} total messages) have been hidden from "
                   f"view due to conversation memory constraints.\nThe following is a summary of the previous "
                   f"{len(evicted)} messages:\n {summary}")
        state.queue = [{"kind": "summary", "content": content}] + queue[cutoff:]
        state.alerted = False
        self.count("summaries")
        return True

    # ------------------------------------------------------------------ steps
    def _apply(self, state: AgentState, text: str) -> tuple[bool, str | None, dict[str, Any], ToolResult]:
        """Parse, execute and record one reply; returns (heartbeat, function, params, result)."""
        raw = PREFIX + text
        call, how = parse_call(raw)
        self.count(f"call_{how}")
        if how == "regex":
            self.deviations["regex_function_call"] += 1
        previous_was_user = bool(state.queue) and state.queue[-1]["kind"] in USER_MESSAGES
        if call is None:
            self._append(state, "call", raw)
            name, params, requested = None, {}, False
            result = ToolResult(False, f"Could not parse a JSON function call from the output: {raw[:300]}")
        else:
            name, params = call["function"], dict(call["params"])
            inner = params.pop("inner_thoughts", None)
            flag = params.pop("request_heartbeat", None)
            requested = flag is True or (isinstance(flag, str) and flag.strip().lower() == "true")
            if name == "send_message":
                requested = False  # chatml.py::_clean_function_args strips it
            self._append(state, "call", json.dumps({"function": name, "params": {"inner_thoughts": inner, **params}},
                                                   ensure_ascii=False))
            result = self.toolbox.call(name, params, state.core, state.archival, state.now, state.since_insert)
            if name == "archival_memory_insert" and result.ok:
                state.since_insert = []
            if name == "conversation_search" and self.search_any_keyword and result.ok:
                self.deviations["keyword_or_search"] += 1
        self.count(f"fn_{name or 'unparsed'}")
        if not result.ok:
            self.count("failed_calls")
        body = json.dumps({"status": "OK" if result.ok else "Failed", "message": result.message}, ensure_ascii=False)
        self._append(state, "result", "FUNCTION RETURN:\n" + body)
        heartbeat = requested or not result.ok or (previous_was_user and name not in (None, "send_message"))
        return heartbeat, name, params, result

    def _run(self, state: AgentState, cap: int) -> list[tuple[str | None, dict, ToolResult]]:
        """One heartbeat chain: steps until no heartbeat is asked for or `cap` steps ran."""
        outcomes: list[tuple[str | None, dict, ToolResult]] = []
        for step in range(cap):
            [[gen]] = self.llm.generate([self._prepare(state)], max_new_tokens=self.step_tokens, temperature=0.0)
            heartbeat, name, params, result = self._apply(state, gen.text)
            outcomes.append((name, params, result))
            if not heartbeat:
                break
            if step + 1 == cap:
                self.count("step_cap_hit")
                break
            self._append(state, "heartbeat", REQ_HEARTBEAT if result.ok else FAILED_HEARTBEAT)
        return outcomes

    # ------------------------------------------------------------------ ingest
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        self.speakers = (conversation.speaker_a, conversation.speaker_b)
        if self.resume_after_session:  # load_state_dict gave the state after that session
            state = self.snapshot
        else:
            self.recall_store = RecallStorage()
            self.toolbox = self._toolbox()
            state = self._fresh_state()
        # state_dict saves self.snapshot; every step below mutates this one object in place, so
        # each session checkpoint (session_done) and the final state see it without reassigning.
        self.snapshot = state
        bar = tqdm(self.sessions_to_ingest(conversation), desc=f"MemGPT {conversation.sample_id}", unit="session",
                   leave=False, mininterval=5)
        for session in bar:
            for turn in session.turns:
                self.recall_store.add(turn.dia_id, turn.date_time, turn.speaker,
                                      turn.text + (f" [shares {turn.caption}]" if turn.caption else ""))
                self._append(state, "turn", turn_line(turn), turn.dia_id)
                state.since_insert.append(turn.dia_id)
                state.now = turn.date_time
                if self.ingest_mode == "per_turn":
                    self._run(state, self.ingest_steps)
            if self.ingest_mode == "per_session" and session.turns:
                self._append(state, "alert", SESSION_END)
                self._run(state, self.ingest_steps)
                self.deviations["ingest_per_session"] += 1
            log.info("MemGPT %s session %d: queue %d msgs, %d archival passages, %d summaries",
                     conversation.sample_id, session.index, len(state.queue), len(state.archival.passages),
                     self.counters.get("summaries", 0))
            self.session_done(session.index)

    # ------------------------------------------------------------------ questions
    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        states = [self.snapshot.clone() for _ in questions]  # every question starts post-ingest
        for state, q in zip(states, questions):
            self._append(state, "question", f"Question: {q}")
        # One chain after the other, not in lock-step: post-ingest prompts of ~7K tokens make
        # every batch one row anyway (model.max_batch_tokens), and interleaved chains evict each
        # other from the prefix cache (it holds about two such prompts). One at a time, a step's
        # prompt extends the previous step's, the newest cache entry. Decoding, not prefill, is
        # most of a step (py-spy on conv-26: ~83% vs ~16%), so 8 questions still took ~34 min.
        # Under the batching front with run.parallel_conversations > 1, `llm.map` runs the chains
        # (independent: each has its own state) as sub-jobs whose steps share calls.
        run_chains = getattr(self.llm, "map", None) or (lambda fn, items: [fn(x) for x in items])
        outcomes = run_chains(lambda state: self._run(state, self.qa_steps), states)
        out = []
        for q, state, steps, budget in zip(questions, states, outcomes, budget_tokens):
            results = [r for name, _, r in steps if name in SEARCH_FUNCTIONS and r.ok]
            fallback = not results
            extras = {"fallback_used": fallback, "qa_steps": len(steps)}
            if fallback:  # a tiny LLM ran no search: search for it (counted)
                self.deviations["qa_search_fallback"] += 1
                extras["fallback_query"] = longest_content_word(q, self.speakers)
                for name, args in (("archival_memory_search", {"query": q}),
                                   ("conversation_search", {"query": extras["fallback_query"]})):
                    results.append(self.toolbox.call(name, args, state.core, state.archival, state.now, []))
            drafts = [p.get("message") for name, p, r in steps if name == "send_message" and r.ok]
            context, ids = answer_context(self.llm, state, results, budget)
            if drafts and isinstance(drafts[-1], str):
                extras["draft"] = drafts[-1][:500]
            out.append(Recall(context, ids, extras))
        return out

    # ------------------------------------------------------------------ caching and reporting
    def memory_settings(self) -> dict[str, Any]:
        return {"method": self.name, "prompt_version": PROMPT_VERSION, "window": self.window,
                "core_char_limit": self.core_char_limit, "warning_frac": self.warning_frac,
                "summary_frac": self.summary_frac, "keep_last": self.keep_last, "ingest_steps": self.ingest_steps,
                "ingest_mode": self.ingest_mode, "page_size": self.page_size,
                "function_return_char_limit": self.function_return_char_limit, "chunk_tokens": self.chunk_tokens,
                "step_tokens": self.step_tokens, "summary_tokens": self.summary_tokens,
                "search_any_keyword": self.search_any_keyword,
                "embedder": getattr(self.embedder, "name", type(self.embedder).__name__)}

    def state_dict(self) -> dict[str, Any]:
        s = self.snapshot
        return {"speakers": list(self.speakers), "core": dict(s.core.blocks), "queue": [dict(m) for m in s.queue],
                "alerted": s.alerted, "messages_total": s.messages_total, "since_insert": list(s.since_insert),
                "now": s.now, "recall": [dict(e) for e in self.recall_store.entries],
                "archival": [dict(p) for p in s.archival.passages], "counters": dict(self.counters),
                "deviations": dict(self.deviations)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.speakers = tuple(state["speakers"])
        self.recall_store = RecallStorage(state["recall"])
        self.toolbox = self._toolbox()
        core = CoreMemory(state["core"]["persona"], state["core"]["human"], self.core_char_limit)
        # Embeddings are recomputed from the passage texts (never pickled).
        archival = ArchivalStorage(self.embedder, self.llm.count_tokens, self.chunk_tokens, state["archival"])
        self.snapshot = AgentState(core, archival, [dict(m) for m in state["queue"]], bool(state["alerted"]),
                                   int(state["messages_total"]), list(state["since_insert"]), state["now"])
        self.counters = Counter(state.get("counters", {}))
        self.deviations.clear()
        self.deviations.update(state.get("deviations", {}))

    def export(self) -> dict[str, Any]:
        s = self.snapshot
        return {"core": dict(s.core.blocks), "archival": s.archival.passages,
                "queue": [m["content"] for m in s.queue], "recall_entries": len(self.recall_store.entries)}

    def stats(self) -> dict[str, Any]:
        return {"deviations": dict(self.deviations), "parse": dict(self.counters),
                "archival_passages": len(self.snapshot.archival.passages),
                "core_chars": {k: len(v) for k, v in self.snapshot.core.blocks.items()}}
