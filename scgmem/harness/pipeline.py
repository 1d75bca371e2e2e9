"""One evaluation run: ingest each conversation, recall and answer each scored question, score.

The flow (docs/architecture.md, "The flow of one run")::

    for conversation: method.ingest (or load from the memory cache) -> memory/<sample_id>.json
        for chunk of questions: method.recall_batch -> protocol prompt -> llm.generate -> scores
            -> predictions.jsonl (appended, fsynced per chunk)
    -> summary.json

Each conversation is a job of a `BatchingFront` (scgmem.llm.scheduler): up to
`parallel_conversations` of them are in flight, and their LLM requests meet in shared batches
at points fixed by the programs alone, so predictions.jsonl (its lines and their order) is the
same on every rerun. With 1, conversations run one after another, as plain calls of the model.

Questions are processed in fixed chunks of `answer_batch_size` taken from the full list
of a conversation's scored questions, and each question's randomness derives from
(seed, sample_id, qa_index); so a rerun after a crash recomputes exactly the records
that are missing, with the same values an uninterrupted run would have written.

On a served model (`llm.served`), a conversation's pending chunks are recalled one after another,
as always (a method's recall may change its memory, so their order stays that of the chunks), and
then answered together: each chunk's answer is a sub-job of the batching front (`llm.map`), so the
answer calls of every chunk of every live conversation go out as one set of requests, in flight
together up to `model.max_in_flight`. Answering never touches the method, so this changes no value:
each question's prompt and seed are its own, and a server's reply to a request does not depend on
what else is in flight. The local backend keeps one chunk at a time (its batches would change).

`question_shard` "I/N" answers only the chunks whose number (within their conversation) is I mod N:
N processes with the same memory answer one conversation's questions side by side, each in its
own run directory, and `scgmem-report merge` puts them back together (the chunks are the same
fixed chunks, so the union is what one process writes). usage.jsonl keeps the question-side LLM
counts of every attempt, so a resumed run's summary counts the tokens of all its records.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from scgmem.api import Conversation, MemoryMethod
from scgmem.api.paths import path_under
from scgmem.data.locomo import scored_questions
from scgmem.harness.cache import MemoryCache, memory_key
from scgmem.harness.logger import progress_metrics
from scgmem.harness.run_plan import (INGEST, PROMPT, RECALL, SAMPLING, check_run_settings,  # noqa: F401 (re-exported)
                                     derive_seed, parse_question_shard, read_stored_predictions, rng_for)
from scgmem.harness.records import USAGE_LOG, PredictionWriter, UsageLog, add_counts, add_usage, write_json_atomic
from scgmem.harness.safe_files import check_below, open_fd
from scgmem.llm.scheduler import BatchingFront
from scgmem.scoring.metrics import evidence_recall

log = logging.getLogger(__name__)

@dataclass
class RunState:
    """What the summary needs beyond the predictions themselves."""

    ingest_s: float = 0.0
    answer_s: float = 0.0
    cache_hits: int = 0
    ingest_usage: dict = field(default_factory=dict)
    method_stats: dict = field(default_factory=dict)  # sample_id -> stats()
    ingest_stats: dict = field(default_factory=dict)  # sample_id -> stats() right after ingest
    schemas: dict = field(default_factory=dict)  # sample_id -> set of concepts (methods with keys)
    usage_log: UsageLog | None = None  # question-side usage of earlier attempts (set by Pipeline.run)
    questions_written: int = 0  # records this process wrote
    answer_deviations: dict = field(default_factory=dict)  # sample_id -> deviations answering added here


def question_usage(snapshot: dict) -> dict:
    """A usage snapshot without its ingest phase (ingest counts live with the cached memory)."""
    return {phase: counts for phase, counts in snapshot.items() if phase != "ingest"}


def deviations_added(before: dict, after: dict) -> dict[str, int]:
    """The deviation counts of stats `after` beyond those of stats `before` (what answering added)."""
    old, new = before.get("deviations") or {}, after.get("deviations") or {}
    return {k: int(n) - int(old.get(k, 0)) for k, n in new.items() if int(n) != int(old.get(k, 0))}


class Pipeline:
    """Args:
        llm, embedder, protocol: instantiated components.
        method_factory: `(llm) -> MemoryMethod`, one fresh object per conversation, built on the
            `llm` it is given (its conversation's view of the model; a factory that ignores it
            and keeps a model it closed over is not batched across conversations).
        run_dir: where predictions.jsonl, memory/ and summary.json go.
        cache: the memory cache.
        seed, answer_batch_size, answer_margin_tokens, questions_per_category, progress,
            parallel_conversations, question_shard: see config.yaml.
        on_progress: called with `logger.progress_metrics(...)` after every memory built and every
            chunk of questions written, so a tracker sees a long run move (and what a crash left).
    """

    def __init__(self, *, llm, embedder, protocol, method_factory, run_dir: Path, cache: MemoryCache,
                 seed: int, answer_batch_size: int = 8, answer_margin_tokens: int = 16,
                 questions_per_category: int | None = None, progress: bool = True,
                 parallel_conversations: int = 1, question_shard: str | None = None,
                 on_progress: Callable[[dict], None] | None = None) -> None:
        check_run_settings(answer_batch_size, parallel_conversations)
        self.question_shard = parse_question_shard(question_shard)
        self._llm, self.embedder, self.protocol = llm, embedder, protocol
        self.front = BatchingFront(llm)
        self.parallel_conversations = parallel_conversations
        self.method_factory = method_factory
        self.run_dir = Path(run_dir)
        self.cache = cache
        self.seed = seed
        self.answer_batch_size = answer_batch_size
        self.answer_margin_tokens = answer_margin_tokens
        self.questions_per_category = questions_per_category
        self.progress = progress
        self.on_progress = on_progress
        self.state = RunState()

    @property
    def llm(self):
        """The model as the current conversation sees it: its job's view inside `run`, else the model."""
        worker = self.front.current()
        return worker.llm if worker is not None else self._llm

    def clock(self) -> float:
        """Seconds for timing: inside `run`, those attributed to the current conversation (its own
        work plus its rows' share of each shared call), so per-conversation times add up to the run's."""
        worker = self.front.current()
        return worker.clock() if worker is not None else time.perf_counter()

    # ------------------------------------------------------------------ ingestion
    def build_memory(self, conv: Conversation):
        """A method object holding the memory of `conv`: from the cache, or ingested now."""
        method = self.method_factory(self.llm)
        cacheable = type(method).state_dict is not MemoryMethod.state_dict
        path = self.cache.path(method, memory_key(method, self.llm, self.seed, conv), conv.sample_id) \
            if cacheable else None
        with self.cache.lock(path):  # another job building this memory now: wait, then load it
            entry = self.cache.load(path, conv, method.memory_settings()) if path else None
            if entry is not None and not self._restore(method, entry, path):
                method, entry = self.method_factory(self.llm), None  # a half-loaded object is not reused
            if entry is not None:
                self.state.cache_hits += 1
                log.info("%s: memory of %s loaded from %s", method.name, conv.sample_id, path)
            else:
                method, entry = self._ingest(method, conv, path)
        # Counted whether built now or earlier: the memory's cost is part of the run's cost.
        self.state.ingest_s += entry["ingest_s"]
        add_usage(self.state.ingest_usage, entry["usage"])
        self.state.ingest_stats[conv.sample_id] = entry["stats"]
        exported = method.export()
        if exported is not None:
            write_json_atomic(path_under(self.run_dir / "memory", f"{conv.sample_id}.json"), exported,
                              root=self.run_dir)
            if "concepts" in exported:
                self.state.schemas[conv.sample_id] = set(exported["concepts"])
        return method

    @staticmethod
    def _restore(method, entry: dict, path: Path) -> bool:
        """Load a checked cache entry into `method`; False (with a warning: the memory is rebuilt)
        when the method's own loader still rejects its state."""
        try:
            method.load_state_dict(entry["state"])
            if "rng" in entry:
                np.random.default_rng().bit_generator.state = entry["rng"]  # a checkpoint's rng must load too
            return True
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
            log.warning("memory cache %s: the method cannot load it (%s: %s): rebuilding it", path,
                        type(e).__name__, str(e)[:200])
            return False

    def _ingest(self, method, conv: Conversation, path: Path | None) -> tuple[MemoryMethod, dict]:
        """(the method, its entry) after ingesting `conv` now; a resumable method starts after its
        last session checkpoint (`<cache entry>.partial.json`) and writes a new one after every
        session. A checkpoint the method cannot load is dropped and the method built afresh."""
        rng = rng_for(self.seed, conv.sample_id, -1, INGEST)
        partial_path = path.with_name(path.stem + ".partial.json") if path and method.resumable else None
        prior = {"ingest_s": 0.0, "usage": {}}
        partial = self.cache.load(partial_path, conv, partial=True) if partial_path else None
        if partial is not None and partial["session"] > len(conv.sessions):
            log.warning("memory cache %s: session %s of %d: rebuilding it", partial_path, partial["session"],
                        len(conv.sessions))
            partial = None
        elif partial is not None and not self._restore(method, partial, partial_path):
            partial, method = None, self.method_factory(self.llm)
        if partial is not None:
            method.resume_after_session = int(partial["session"])
            rng.bit_generator.state = partial["rng"]
            prior = partial
            log.info("%s: resuming the ingest of %s after session %d (%s)", method.name, conv.sample_id,
                     method.resume_after_session, partial_path)
        before = self.llm.usage.snapshot().get("ingest", {})
        start = self.clock()

        def spent() -> tuple[float, dict]:
            after = self.llm.usage.snapshot().get("ingest", {})
            usage = {"ingest": {k: after.get(k, 0) - before.get(k, 0) for k in after}}
            add_usage(usage, prior["usage"])
            return prior["ingest_s"] + self.clock() - start, usage

        if partial_path:
            def checkpoint(session: int) -> None:
                elapsed, usage = spent()
                self.cache.save(partial_path, {"session": session, "rng": rng.bit_generator.state,
                                               "ingest_s": elapsed, "usage": usage, "state": method.state_dict()})
            method.session_checkpoint = checkpoint
        with self.llm.usage.under("ingest"):
            method.ingest(conv, rng)
        method.session_checkpoint = None
        elapsed, usage = spent()
        entry = {"ingest_s": elapsed, "usage": usage, "stats": method.stats(), "settings": method.memory_settings()}
        if path:
            self.cache.save(path, {**entry, "state": method.state_dict()})
        if partial_path:
            partial_path.unlink(missing_ok=True)  # the whole memory is cached now
        return method, entry

    # ------------------------------------------------------------------ answering
    def run(self, conversations: list[Conversation], done_records: list[dict] | None = None) -> list[dict]:
        """Answer every scored question of `conversations` not yet in predictions.jsonl; returns all
        records. `done_records`: what `read_stored_predictions` returned (read here when None)."""
        pred_path = self.run_dir / "predictions.jsonl"
        if done_records is None:
            done_records = read_stored_predictions(self.run_dir, conversations, self.protocol, self.seed,
                                                   self.questions_per_category)
        done = {(r["sample_id"], r["qa_index"]) for r in done_records}
        if done:
            log.info("resuming: %d predictions already in %s", len(done), pred_path)
            # Their answering time was spent by the interrupted run: carry it over from the
            # records (recall + answer per question), or a resumed summary would under-report it.
            self.state.answer_s += sum(r.get("latency_s", 0.0) for r in done_records)
        writer = PredictionWriter(pred_path)
        record = getattr(self._llm, "record_requests_to", None)
        if record is not None:  # a served model with model.record_requests: requests.jsonl (the replay bound)
            # a run file like the others: no link below the run directory, none at the file, no FIFO
            record(check_below(self.run_dir, self.run_dir / "requests.jsonl"), open_fd)
        usage_log = self.state.usage_log = UsageLog(self.run_dir / USAGE_LOG, records=len(done_records))
        records = list(done_records)
        plan = [(c, self.shard_chunks(scored_questions(c, self.protocol.categories, self.questions_per_category)))
                for c in conversations]
        total = sum(len(q) for _, chunks in plan for q in chunks)
        bar = tqdm(total=total, initial=len(done), desc="questions", disable=not self.progress)
        started, memories = time.perf_counter(), [0]

        def report() -> None:
            if self.on_progress is not None:
                self.on_progress(progress_metrics(records, total, memories[0], len(plan), self._llm.usage.snapshot(),
                                                  time.perf_counter() - started))

        def conversation_job(conv, chunks):
            def job():
                method = self.build_memory(conv)
                memories[0] += 1
                report()
                pending = [c for c in chunks if not all((q.sample_id, q.index) in done for q in c)]
                for chunk, new in self._answered(method, pending):
                    new = [r for r in new if (r["sample_id"], r["qa_index"]) not in done]
                    writer.write(new)  # one job runs at a time, so lines never interleave
                    self.state.questions_written += len(new)
                    self.state.answer_deviations[conv.sample_id] = deviations_added(
                        self.state.ingest_stats.get(conv.sample_id) or {}, method.stats())
                    # running totals after the records they cover (a kill between the two writes
                    # leaves the chunk's records uncounted, never counted twice)
                    added: dict[str, int] = {}
                    for counts in self.state.answer_deviations.values():
                        add_counts(added, counts)
                    usage_log.append(self.state.questions_written, question_usage(self._llm.usage.snapshot()), added)
                    records.extend(new)
                    bar.update(len(new))
                    report()
                self.state.method_stats[conv.sample_id] = method.stats()
            return job

        try:
            self.front.run([conversation_job(conv, chunks) for conv, chunks in plan], width=self.parallel_conversations)
        finally:
            writer.close()
            bar.close()
        return records

    def shard_chunks(self, questions: list) -> list[list]:
        """A conversation's fixed chunks of `answer_batch_size` questions; with `question_shard` I/N,
        only those numbered I mod N."""
        chunks = [questions[s:s + self.answer_batch_size] for s in range(0, len(questions), self.answer_batch_size)]
        if self.question_shard is None:
            return chunks
        index, count = self.question_shard
        return [c for number, c in enumerate(chunks) if number % count == index]

    def _answered(self, method, chunks):
        """Yield (chunk, its records) in chunk order: on the local backend each chunk recalled and answered
        in turn; on a served one every chunk recalled in turn, then all answered together (module docstring)."""
        if not getattr(self._llm, "served", False) or len(chunks) <= 1:
            for chunk in chunks:
                t0 = self.clock()
                new = self.answer_chunk(method, chunk)
                self.state.answer_s += self.clock() - t0
                yield chunk, new
            return
        t0 = self.clock()
        recalled = [(chunk, self.recall_chunk(method, chunk)) for chunk in chunks]
        answered = self.llm.map(lambda cr: _outcome(self.answer_recalled, *cr), recalled)
        self.state.answer_s += self.clock() - t0
        # Nothing computed is lost: the chunks answered before a failure (a server gone mid-run) are
        # written before the first failure is raised, so the rerun recomputes only the rest.
        failure = None
        for chunk, (new, error) in zip(chunks, answered):
            if error is None:
                yield chunk, new
            elif failure is None:
                failure = error
        if failure is not None:
            raise failure

    def answer_chunk(self, method, chunk) -> list[dict]:
        """Recall, prompt, generate and score one fixed chunk of questions (same result on every rerun)."""
        return self.answer_recalled(chunk, self.recall_chunk(method, chunk))

    def recall_chunk(self, method, chunk) -> tuple[list, float]:
        """The method's recall for each question of `chunk`, and the recall seconds per question."""
        # The budget is the window minus the prompt without context, the answer, and a margin.
        empty = [self.protocol.build_prompt(q, "", rng_for(self.seed, q.sample_id, q.index, PROMPT)) for q in chunk]
        budgets = [self.llm.context_window
                   - self.llm.count_tokens(self.llm.render(p.messages, assistant_prefix=p.assistant_prefix))
                   - p.max_new_tokens - self.answer_margin_tokens for p in empty]
        t0 = self.clock()
        with self.llm.usage.under("recall"):
            recalls = method.recall_batch([q.question for q in chunk], budget_tokens=budgets,
                                          rngs=[rng_for(self.seed, q.sample_id, q.index, RECALL) for q in chunk])
        return recalls, (self.clock() - t0) / len(chunk)

    def answer_recalled(self, chunk, recalled: tuple[list, float]) -> list[dict]:
        """Prompt, generate and score one chunk whose recall is done; touches the model, never the method."""
        recalls, recall_s = recalled
        prompt_rngs = [rng_for(self.seed, q.sample_id, q.index, PROMPT) for q in chunk]
        prompts = [self.protocol.build_prompt(q, r.context, rng) for q, r, rng in zip(chunk, recalls, prompt_rngs)]
        rendered = [self.llm.render(p.messages, assistant_prefix=p.assistant_prefix) for p in prompts]
        answers: list[str] = [""] * len(chunk)
        latency = [recall_s] * len(chunk)
        prompt_tokens = [0] * len(chunk)
        # One generate call per (temperature, max_new_tokens) group: category 5 samples colder.
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault((p.temperature, p.max_new_tokens), []).append(i)
        for (temperature, max_new), idx in groups.items():
            t1 = self.clock()
            with self.llm.usage.under("answer"):
                gens = self.llm.generate(
                    [rendered[i] for i in idx], max_new_tokens=max_new, temperature=temperature,
                    seeds=[derive_seed(self.seed, chunk[i].sample_id, chunk[i].index, SAMPLING) for i in idx])
            share = (self.clock() - t1) / len(idx)
            for i, g in zip(idx, gens):
                answers[i] = g[0].text
                prompt_tokens[i] = g[0].n_prompt_tokens
                latency[i] += share
        # The answer to score: the reply itself, or its JSON field (protocol.answer_format).
        extracted = [self.protocol.extract_answer(a, p) for a, p in zip(answers, prompts)]
        answers = [a for a, _ in extracted]
        bertscores = self.protocol.bertscore_f1(chunk, answers) or [None] * len(chunk)
        records = []
        for q, r, p, answer, lat, ptoks, (_, fields), bert in zip(chunk, recalls, prompts, answers, latency,
                                                                  prompt_tokens, extracted, bertscores):
            scores = self.protocol.score(q, answer, options=p.options)
            record = {
                "sample_id": q.sample_id, "qa_index": q.index, "category": q.category,
                "question": q.question, "reference": self.protocol.reference(q), "prediction": answer,
                **scores, **fields,  # scores: the answer metrics, in the metric table's order
                **({"bertscore_f1": bert} if bert is not None else {}),
                "evidence": list(q.evidence), "retrieved": list(r.dia_ids),
                "evidence_recall": evidence_recall(q.evidence, r.dia_ids),
                "latency_s": round(lat, 4), "prompt_tokens": ptoks,
                # How much of the conversation the method handed to the answer prompt.
                "context_tokens": self.llm.count_tokens(r.context) if r.context else 0,
                "context_turns": len(r.dia_ids),
            }
            if p.options is not None:
                record["options"] = p.options
            record.update(r.extras)
            records.append(record)
        return records


def _outcome(fn, *args):
    """(fn(*args), None), or (None, the exception): one failed sub-job keeps the others' results."""
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 (re-raised by the caller after the others are written)
        return None, e
