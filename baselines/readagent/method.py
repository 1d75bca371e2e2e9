"""ReadAgent (Lee et al. 2024, arXiv 2402.09727): episode pagination, gist memory, look-up.

Our reimplementation after the authors' demo notebook [R1] (read_agent_demo.ipynb:
`quality_pagination`, `prompt_shorten_template`, the QuALITY "prompts used in the paper"),
docs/methods.md, section ReadAgent. The three steps:

1. Pagination (one LLM call per page, sequential: each prompt shows the previous page;
   `baselines/readagent/pagination.py`): the model names the label where pausing is most
   natural.
2. Gisting (one call per page, all pages of a conversation in one `generate` list).
3. Look-up at question time: ReadAgent-P (one call listing up to `max_lookup_pages` pages in
   brackets) or ReadAgent-S (`lookup="sequential"`: one page or STOP per call, up to N calls).
   The chosen pages' gists are replaced by the raw pages, in place.

LoCoMo adaptations: a paragraph is one rendered turn, plus a `DATE: {date}` paragraph at each
session start; the whole conversation is one document; each page is shown as
`<Page p> [dates]` followed by its gist or raw text, the header built without the LLM (page
numbers are 0-based, as in the demo). The QuALITY prompts are used with "article" read as
"conversation" and without multiple-choice options.

Tiny-LLM behaviour. Every fallback is counted in `deviations`, by kind, whether or not it is
the reference's own behaviour:

- `break_point_parse_failure` / `break_point_out_of_range`: no `<n>` in the reply, or n <= i or
  n > j: the page ends at j, a fixed ~`word_limit`-word page (the reference's
  `allow_fallback_to_last`, so faithful, but reported).
- `gist_repeated_lines`: lines repeating an earlier line of the same gist are dropped (a tiny
  model decoding greedily loops on one line until the token cap); a deviation, on by default
  (`gist_strip_repeats`), applied before the next check.
- `gist_replaced`: an empty gist, or one of >= `gist_max_ratio` x the page's words, is replaced
  by the first `fallback_gist_words` words of each turn (a deviation).
- `lookup_lenient_parse`: no usable page list between the first `[` and `]`; integers after
  "page" were used instead (a deviation).
- `lookup_parse_failure`: nothing usable at all: nothing is expanded (the reference's
  behaviour), or with `lookup_fallback="embed"` the top-N pages by cosine similarity to the
  question are expanded (`lookup_embed_fallback`, a deviation).
- `lookup_capped`: the model listed more than N pages; only the first N are read.

`stats()` also returns the call counts, so parse-failure rates are failures / calls.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np

from scgmem.baselines.greedy_calls import greedy_generations, greedy_texts, strip_repeated_lines
from scgmem.baselines.locomo_text import render_turn_line
from scgmem.baselines.readagent.pagination import count_words, paginate
from scgmem.baselines.readagent.prompts import (GIST_PROMPT, LOOKUP_EXAMPLES, LOOKUP_PROMPT, PROMPT_VERSION,
                                         SEQUENTIAL_PROMPT, parse_break_point, parse_lookup_brackets,
                                         parse_lookup_lenient, parse_sequential)
from scgmem.api import Conversation, MemoryMethod, Recall, dia_order
from scgmem.api.settings import check_choice, check_embedder, check_int, check_positive, check_range
from scgmem.llm.embedder import cosine_top_k

log = logging.getLogger(__name__)


def first_words(text: str, n: int) -> str:
    """The first `n` whitespace-separated words of `text`."""
    return " ".join(text.split()[:n])


class ReadAgent(MemoryMethod):
    """ReadAgent-P (default) or -S over one LoCoMo conversation.

    Args:
        llm: the shared LLM (or `ScriptedLLM`).
        embedder: needed only for `lookup_fallback="embed"`.
        word_limit / start_threshold / last_page_words: pagination thresholds in words
            (600 / 280 / 350, `quality_pagination` [R1]; same in the port [R2]).
        max_lookup_pages: N, pages that may be re-read per question (5, QuALITY prompt [R1]).
        lookup: "parallel" (ReadAgent-P, one call) or "sequential" (ReadAgent-S, <= N calls).
        lookup_fallback: "none" (reference: expand nothing when the reply does not parse) or
            "embed" (deviation: the top-N pages by cosine similarity to the question).
        gist_max_new_tokens: cap on a gist (192: the movie-script prompt asks for <= 128 tokens).
        pagination_max_new_tokens / lookup_max_new_tokens: caps on replies of which only a label
            or a page list is read (the demo decodes up to 512; the label comes first).
        gist_max_ratio: a gist with >= this x the page's words is replaced (0.8).
        fallback_gist_words: words kept per turn in a replacement gist (12).
        gist_strip_repeats: drop repeated lines from gists (counted deviation; False = as generated).
        retrieved_ids: "expanded" (default: only the re-read pages count as
            retrieved) or "context" (every turn whose raw text or gist is in the context; every
            page's gist is always shown, so evidence recall is ~1 by construction).
    """

    name = "readagent"

    def __init__(self, llm, embedder=None, *, word_limit: int = 600, start_threshold: int = 280,
                 last_page_words: int = 350, max_lookup_pages: int = 5, lookup: str = "parallel",
                 lookup_fallback: str = "none", gist_max_new_tokens: int = 192,
                 pagination_max_new_tokens: int = 32, lookup_max_new_tokens: int = 48,
                 gist_max_ratio: float = 0.8, fallback_gist_words: int = 12,
                 gist_strip_repeats: bool = True, retrieved_ids: str = "expanded") -> None:
        super().__init__(llm, embedder)
        check_int("word_limit", word_limit)
        check_range("start_threshold", start_threshold, 0, word_limit, high_name="word_limit")
        check_range("last_page_words", last_page_words, 0, word_limit, high_name="word_limit")
        check_choice("lookup", lookup, ("parallel", "sequential"))
        check_choice("lookup_fallback", lookup_fallback, ("none", "embed"))
        if lookup_fallback == "embed":
            check_embedder("readagent with method.lookup_fallback=embed", embedder)
        check_choice("retrieved_ids", retrieved_ids, ("context", "expanded"))
        check_positive("gist_max_ratio", gist_max_ratio)
        for arg, value in (("max_lookup_pages", max_lookup_pages), ("gist_max_new_tokens", gist_max_new_tokens),
                           ("pagination_max_new_tokens", pagination_max_new_tokens),
                           ("lookup_max_new_tokens", lookup_max_new_tokens),
                           ("fallback_gist_words", fallback_gist_words)):
            check_int(arg, value)
        self.word_limit = word_limit
        self.start_threshold = start_threshold
        self.last_page_words = last_page_words
        self.max_lookup_pages = max_lookup_pages
        self.lookup = lookup
        self.lookup_fallback = lookup_fallback
        self.gist_max_new_tokens = gist_max_new_tokens
        self.pagination_max_new_tokens = pagination_max_new_tokens
        self.lookup_max_new_tokens = lookup_max_new_tokens
        self.gist_max_ratio = gist_max_ratio
        self.fallback_gist_words = fallback_gist_words
        self.gist_strip_repeats = gist_strip_repeats
        self.retrieved_ids = retrieved_ids
        # Built memory (see state_dict): paragraphs [text, dia_id | None, date, speaker, turn text].
        self.paragraphs: list[list[Any]] = []
        self.pages: list[tuple[int, int]] = []  # [start, end) paragraph ranges
        self.gists: list[str] = []
        self.gist_sources: list[str] = []  # "llm" | "fallback"
        self._unit_tokens: dict[tuple[int, bool], int] = {}
        self._page_vectors: np.ndarray | None = None

    # ------------------------------------------------------------------ settings and state
    def memory_settings(self) -> dict[str, Any]:
        return {"word_limit": self.word_limit, "start_threshold": self.start_threshold,
                "last_page_words": self.last_page_words, "gist_max_new_tokens": self.gist_max_new_tokens,
                "pagination_max_new_tokens": self.pagination_max_new_tokens,
                "gist_max_ratio": self.gist_max_ratio, "fallback_gist_words": self.fallback_gist_words,
                "gist_strip_repeats": self.gist_strip_repeats, "prompt_version": PROMPT_VERSION}

    def state_dict(self) -> dict[str, Any]:
        return {"paragraphs": self.paragraphs, "pages": [list(p) for p in self.pages],
                "gists": self.gists, "gist_sources": self.gist_sources,
                "counters": dict(self.counters), "deviations": dict(self.deviations)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.paragraphs = [list(p) for p in state["paragraphs"]]
        self.pages = [(int(s), int(e)) for s, e in state["pages"]]
        self.gists = list(state["gists"])
        self.gist_sources = list(state["gist_sources"])
        self.counters = Counter({k: int(v) for k, v in state["counters"].items()})
        self.deviations.clear()
        self.deviations.update({k: int(v) for k, v in state["deviations"].items()})
        self._unit_tokens, self._page_vectors = {}, None

    def export(self) -> dict[str, Any]:
        return {"pages": [{"page": p, "dates": self._page_dates(p), "dia_ids": self._page_dia_ids(p),
                           "words": sum(count_words(t[0]) for t in self.paragraphs[s:e]),
                           "gist": self.gists[p], "gist_source": self.gist_sources[p]}
                          for p, (s, e) in enumerate(self.pages)]}

    def stats(self) -> dict[str, Any]:
        words = sum(count_words(p[0]) for p in self.paragraphs)
        gist_words = sum(count_words(g) for g in self.gists)
        return {"deviations": dict(self.deviations), "lookup": self.lookup,
                "lookup_fallback": self.lookup_fallback, "retrieved_ids": self.retrieved_ids,
                "paragraphs": len(self.paragraphs),
                "pages": len(self.pages), "words": words, "gist_words": gist_words, **self.counters}

    # ------------------------------------------------------------------ ingest
    def ingest(self, conversation: Conversation, rng: np.random.Generator) -> None:
        """Paginate the conversation with LLM-chosen break points, then gist every page."""
        self.paragraphs = []
        for session in conversation.sessions:
            self.paragraphs.append([f"DATE: {session.date_time}", None, session.date_time, None, None])
            for turn in session.turns:
                caption = f" [shares {turn.caption}]" if turn.caption else ""
                self.paragraphs.append([render_turn_line(turn), turn.dia_id, session.date_time,
                                        turn.speaker, turn.text + caption])
        self.pages = self._paginate()
        self.gists, self.gist_sources = self._gist_pages()
        self._unit_tokens, self._page_vectors = {}, None
        calls = max(1, self.counters.get("pagination_calls", 0))
        log.info("readagent %s: %d paragraphs -> %d pages; break-point parse failures %d/%d (%.0f%%), "
                 "out of range %d; gists replaced %d/%d", conversation.sample_id, len(self.paragraphs),
                 len(self.pages), self.deviations["break_point_parse_failure"], calls,
                 100 * self.deviations["break_point_parse_failure"] / calls,
                 self.deviations["break_point_out_of_range"], self.deviations["gist_replaced"], len(self.pages))

    def _paginate(self) -> list[tuple[int, int]]:
        """`quality_pagination` [R1] over the paragraphs; returns [start, end) ranges."""
        return paginate([p[0] for p in self.paragraphs], word_limit=self.word_limit,
                        start_threshold=self.start_threshold, last_page_words=self.last_page_words,
                        break_point=self._break_point)

    def _break_point(self, prompt: str, i: int, j: int) -> int:
        """The model's break point for the page starting at paragraph i; j (a full page) when unusable."""
        [reply] = greedy_texts(self.llm, [self.llm.render(prompt)], self.pagination_max_new_tokens)
        self.count("pagination_calls")
        pause = parse_break_point(reply)
        if pause is None:
            log.debug("break point not parsed from %r", reply[:200])
            self.deviations["break_point_parse_failure"] += 1
            return j  # allow_fallback_to_last [R1]
        if pause <= i or pause > j:
            self.deviations["break_point_out_of_range"] += 1
            return j
        self.count("break_points_parsed")
        return pause

    def _gist_pages(self) -> tuple[list[str], list[str]]:
        """One gist per page, all pages in one generate call; bad gists are replaced (counted)."""
        page_texts = [self._raw_page(p) for p in range(len(self.pages))]
        prompts = [self.llm.render(GIST_PROMPT.format(page=t).strip()) for t in page_texts]
        generations = greedy_generations(self.llm, prompts, self.gist_max_new_tokens)
        self.count("gist_calls", len(prompts))
        gists, sources = [], []
        for p, (text, generation) in enumerate(zip(page_texts, generations)):
            gist = generation.text.strip()
            if len(generation.token_ids) >= self.gist_max_new_tokens:
                self.count("gists_at_token_cap")  # cut off (or an echo of the page): kept, but reported
            if self.gist_strip_repeats:
                gist, dropped = strip_repeated_lines(gist)
                if dropped:
                    self.deviations["gist_repeated_lines"] += 1
            if not gist:
                self.count("gists_empty")
            elif count_words(gist) >= self.gist_max_ratio * count_words(text):
                self.count("gists_too_long")
            else:
                gists.append(gist)
                sources.append("llm")
                continue
            self.deviations["gist_replaced"] += 1
            s, e = self.pages[p]
            lines = [f"{par[3]}: {first_words(par[4], self.fallback_gist_words)}"
                     for par in self.paragraphs[s:e] if par[1] is not None]
            gists.append("\n".join(lines))
            sources.append("fallback")
        return gists, sources

    # ------------------------------------------------------------------ pages
    def _raw_page(self, p: int) -> str:
        s, e = self.pages[p]
        return "\n".join(par[0] for par in self.paragraphs[s:e])

    def _page_dates(self, p: int) -> list[str]:
        s, e = self.pages[p]
        return list(dict.fromkeys(par[2] for par in self.paragraphs[s:e]))

    def _page_dia_ids(self, p: int) -> list[str]:
        s, e = self.pages[p]
        return [par[1] for par in self.paragraphs[s:e] if par[1] is not None]

    def _unit(self, p: int, expanded: bool) -> str:
        """A page as it appears in the memory: `<Page p> [dates]` then its raw text or its gist."""
        header = f"<Page {p}> [{'; '.join(self._page_dates(p))}]"
        return f"{header}\n{self._raw_page(p) if expanded else self.gists[p]}"

    def _tokens(self, p: int, expanded: bool) -> int:
        key = (p, expanded)
        if key not in self._unit_tokens:
            self._unit_tokens[key] = self.llm.count_tokens(self._unit(p, expanded))
        return self._unit_tokens[key]

    def _article(self, expanded: list[int]) -> str:
        """The gist memory with the pages in `expanded` replaced by their raw text, in page order."""
        return "\n".join(self._unit(p, p in expanded) for p in range(len(self.pages)))

    # ------------------------------------------------------------------ look-up
    def _lookup_parallel(self, questions: list[str]) -> list[tuple[list[int], bool]]:
        """ReadAgent-P: one call per question (all in one generate list) -> (pages, parse failed)."""
        gists = self._article([])
        examples = "\n".join(line for size, line in LOOKUP_EXAMPLES if size <= self.max_lookup_pages)
        prompts = [self.llm.render(LOOKUP_PROMPT.format(n=self.max_lookup_pages, examples=examples,
                                                        gists=gists, question=q).strip()) for q in questions]
        replies = greedy_texts(self.llm, prompts, self.lookup_max_new_tokens)
        self.count("lookup_calls", len(prompts))
        out = []
        for reply in replies:
            pages = parse_lookup_brackets(reply, len(self.pages))
            if not pages:
                pages = parse_lookup_lenient(reply, len(self.pages))
                if pages:
                    self.deviations["lookup_lenient_parse"] += 1
            if len(pages) > self.max_lookup_pages:
                self.deviations["lookup_capped"] += 1
                pages = pages[:self.max_lookup_pages]
            if not pages:
                log.debug("look-up pages not parsed from %r", reply[:200])
                self.deviations["lookup_parse_failure"] += 1
            out.append((pages, not pages))
        return out

    def _lookup_sequential(self, questions: list[str]) -> list[tuple[list[int], bool]]:
        """ReadAgent-S: one page (or STOP) per call, re-read pages expanded in the next prompt."""
        chosen: list[list[int]] = [[] for _ in questions]
        failed = [False] * len(questions)
        active = list(range(len(questions)))
        for _ in range(self.max_lookup_pages):
            if not active:
                break
            prompts = [self.llm.render(SEQUENTIAL_PROMPT.format(
                gists=self._article(chosen[q]), question=questions[q],
                past=", ".join(map(str, chosen[q])) or "None").strip()) for q in active]
            replies = greedy_texts(self.llm, prompts, self.lookup_max_new_tokens)
            self.count("lookup_calls", len(prompts))
            still = []
            for q, reply in zip(active, replies):
                kind, page = parse_sequential(reply, len(self.pages))
                if kind == "lenient":
                    self.deviations["lookup_lenient_parse"] += 1
                if kind == "stop":
                    continue
                if kind == "fail" or page in chosen[q]:
                    self.deviations["lookup_parse_failure"] += 1
                    failed[q] = not chosen[q]
                    continue
                chosen[q].append(page)
                still.append(q)
            active = still
        return list(zip(chosen, failed))

    def _embed_pages(self, questions: list[str]) -> list[list[int]]:
        """Deviation `lookup_fallback=embed`: top-N raw pages by cosine similarity to each question."""
        if self._page_vectors is None:
            self._page_vectors = self.embedder.encode([self._raw_page(p) for p in range(len(self.pages))])
        q_vectors = self.embedder.encode(questions)
        return [cosine_top_k(v, self._page_vectors, self.max_lookup_pages) for v in q_vectors]

    # ------------------------------------------------------------------ recall
    def recall_batch(self, questions: list[str], *, budget_tokens: list[int],
                     rngs: list[np.random.Generator]) -> list[Recall]:
        """Look up pages for every question (one batched generate call per look-up step)."""
        if not self.pages:
            return [Recall("", [], {}) for _ in questions]
        lookups = (self._lookup_parallel if self.lookup == "parallel" else self._lookup_sequential)(questions)
        if self.lookup_fallback == "embed":
            need = [i for i, (_, failed) in enumerate(lookups) if failed]
            for i, pages in zip(need, self._embed_pages([questions[i] for i in need]) if need else []):
                self.deviations["lookup_embed_fallback"] += 1
                lookups[i] = (pages, True)
        self.count("questions", len(questions))
        for pages, _ in lookups:
            self.count("pages_expanded", len(pages))
        return [self._assemble(pages, budget) for (pages, _), budget in zip(lookups, budget_tokens)]

    def _assemble(self, expanded: list[int], budget_tokens: int) -> Recall:
        """Gists and re-read pages in page order, trimmed to the budget.

        Over budget: the oldest gists go first, then the re-read page
        listed last by the model.
        """
        kept = set(range(len(self.pages)))
        order = list(expanded)  # trimming order of the re-read pages: last listed first

        def total() -> int:  # per-unit counts + one token per "\n" separator
            return sum(self._tokens(p, p in expanded) for p in kept) + max(0, len(kept) - 1)

        def drop_one() -> None:
            gists = [p for p in kept if p not in expanded]
            if gists:
                kept.discard(min(gists))
            else:
                kept.discard(order.pop())

        while kept and total() > budget_tokens:
            drop_one()
        context = "\n".join(self._unit(p, p in expanded) for p in sorted(kept))
        while kept and self.llm.count_tokens(context) > budget_tokens:  # tokens can merge at joins
            drop_one()
            context = "\n".join(self._unit(p, p in expanded) for p in sorted(kept))
        if not kept:
            context = ""
        shown = sorted(kept) if self.retrieved_ids == "context" else [p for p in sorted(kept) if p in expanded]
        ids = sorted((d for p in shown for d in self._page_dia_ids(p)), key=dia_order)
        return Recall(context, ids, {})
