"""The batching front (scgmem.llm.scheduler) and the pipeline running conversations through it:
merged calls, fixed batch formation, exact usage, errors, and the pipeline's outputs at
run.parallel_conversations=1 (equal to calling the model directly) and >1 (same on every rerun)."""
from __future__ import annotations

import re
import threading

import pytest

from scgmem.testing.scripted import fake_pipeline
from scgmem.llm.doubles.fake import ScriptedLLM
from scgmem.llm.scheduler import BatchingFront, _apportion


class LoggingLLM(ScriptedLLM):
    """Replies are a function of the prompt alone, so batching cannot change them; logs every call."""

    def __init__(self, **kw):
        super().__init__(lambda p: "reply " + p.split()[-1], **kw)
        self.log: list[tuple[tuple, dict]] = []
        self.threads: set[int] = set()

    def generate(self, prompts, **kw):
        self.log.append((tuple(prompts), {k: v for k, v in kw.items() if k != "constraint"}))
        self.threads.add(threading.get_ident())
        return super().generate(prompts, **kw)


def chain(llm, name: str, steps: int, **kw):
    """A job that is a sequential program: each prompt depends on the previous answer."""
    def job():
        text, out = name, []
        for step in range(steps):
            [[g]] = llm().generate([f"{text} s{step}"], **kw)
            text = g.text
            out.append(text)
        return out
    return job


def run_jobs(width: int, steps=(3, 1, 2), **kw):
    real = LoggingLLM()
    front = BatchingFront(real)
    current = lambda: front.current().llm  # noqa: E731  the calling job's view of the model
    jobs = [chain(current, f"c{i}", n, **kw) for i, n in enumerate(steps)]
    return front, real, front.run(jobs, width=width)


def test_jobs_meet_in_one_call_per_round_and_results_are_unchanged():
    front, real, results = run_jobs(width=3)
    _, direct_real, direct = run_jobs(width=1)
    assert results == direct
    assert [len(prompts) for prompts, _ in real.log] == [3, 2, 1]  # jobs of 3, 1 and 2 steps
    assert [len(prompts) for prompts, _ in direct_real.log] == [1] * 6
    assert front.calls == {"other": 3} and front.rows == {"other": 6}
    assert real.threads == {threading.get_ident()}  # the model is only used by the caller of run


def test_batch_formation_is_the_same_on_every_run():
    logs = [run_jobs(width=2, steps=(2, 3, 1, 2))[1].log for _ in range(3)]
    assert logs[0] == logs[1] == logs[2]
    # width 2: jobs 0 and 1 start; job 2 takes job 0's slot once job 0 has finished (rows in job order)
    assert [p for p, _ in logs[0]] == [("c0 s0", "c1 s0"), ("reply s0 s1", "reply s0 s1"), ("reply s1 s2", "c2 s0"),
                                       ("c3 s0",), ("reply s0 s1",)]


def test_width_one_sends_every_call_unchanged():
    real = LoggingLLM()
    front = BatchingFront(real)
    calls = [(["a", "b"], {"max_new_tokens": 5}), (["c"], {"temperature": 0.5, "seeds": [7]}), (["d"], {})]

    def job():
        return [front.current().llm.generate(p, **kw) for p, kw in calls]

    assert front.run([job], width=1)[0] == [LoggingLLM().generate(p, **kw) for p, kw in calls]
    assert real.log == [(tuple(p), kw) for p, kw in calls]


def test_only_identical_settings_share_a_call_and_constrained_calls_go_alone():
    real = LoggingLLM()
    front = BatchingFront(real)
    settings = [{"max_new_tokens": 4}, {"max_new_tokens": 8}, {"max_new_tokens": 4}, {"max_new_tokens": 4},
                {"max_new_tokens": 4, "constraint": object()}, {"max_new_tokens": 4, "constraint": object()}]

    def job(i):
        return lambda: front.current().llm.generate([f"p{i}"], **settings[i])

    front.run([job(i) for i in range(len(settings))], width=len(settings))
    assert [p for p, _ in real.log] == [("p0", "p2", "p3"), ("p1",), ("p4",), ("p5",)]


def test_merged_sampling_calls_carry_each_prompts_seed():
    real = LoggingLLM()
    front = BatchingFront(real)
    jobs = [lambda i=i: front.current().llm.generate([f"p{i}", f"q{i}"], temperature=0.7, seeds=[i, 10 + i])
            for i in range(3)]
    front.run(jobs, width=3)
    [(prompts, kw)] = real.log
    assert prompts == ("p0", "q0", "p1", "q1", "p2", "q2") and kw["seeds"] == [0, 10, 1, 11, 2, 12]


def test_usage_is_counted_by_phase_in_the_model_and_exactly_per_job():
    real = LoggingLLM()
    front = BatchingFront(real)
    views = []

    def job(i):
        def run():
            llm = front.current().llm
            views.append(llm)
            with llm.usage.under("ingest"):
                llm.generate(["one two three " * (i + 1) + f"x{i}"] * (i + 1))
        return run

    front.run([job(i) for i in range(3)], width=3)
    assert front.calls == {"ingest": 1}
    total = real.usage.snapshot()["ingest"]
    assert total["calls"] == 6
    for i, view in enumerate(views):
        mine = view.usage.snapshot()["ingest"]
        assert mine["calls"] == i + 1
        assert mine["prompt_tokens"] == (i + 1) * (3 * (i + 1) + 1)
        assert mine["generated_tokens"] == (i + 1) * 2
    for key in total:
        assert sum(v.usage.snapshot()["ingest"][key] for v in views) == total[key]


def test_apportion_sums_to_the_total_and_favours_the_first_on_ties():
    assert _apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert _apportion(7, [0, 0]) == [4, 3]
    assert _apportion(0, [5, 2]) == [0, 0]


def test_an_error_of_a_merged_call_reaches_the_job_that_caused_it():
    def script(prompt):
        if "bad" in prompt:
            raise KeyError("bad prompt")
        return "fine"
    front = BatchingFront(ScriptedLLM(script))
    seen = {}

    def job(name):
        def run():
            try:
                return front.current().llm.generate([name])[0][0].text
            except KeyError:
                seen[name] = "raised"
                return "caught"
        return run

    assert front.run([job("good"), job("bad"), job("good too")], width=3) == ["fine", "caught", "fine"]
    assert seen == {"bad": "raised"}


def test_a_failing_job_stops_the_others_and_its_error_is_raised():
    front = BatchingFront(LoggingLLM())
    unwound = []

    def waiting_job():
        try:
            while True:
                front.current().llm.generate(["again"])
        finally:
            unwound.append(True)

    def failing_job():
        front.current().llm.generate(["once"])
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        front.run([waiting_job, failing_job, waiting_job], width=3)
    assert unwound == [True, True]  # both waiting threads ran their finally blocks
    assert front.run([lambda: 5], width=1) == [5]  # the front is usable again


def map_jobs(width: int):
    """Two jobs; each answers three independent two-step chains through `llm.map`."""
    real = LoggingLLM()
    front = BatchingFront(real)

    def job(name):
        def run():
            llm = front.current().llm
            with llm.usage.under("recall"):
                return llm, llm.map(lambda q: chain(lambda: llm, f"{name}{q}", 2)(), ["a", "b", "c"])
        return run

    out = front.run([job("x"), job("y")], width=width)
    return real, [answers for _, answers in out], [view.usage.snapshot() for view, _ in out]


def test_map_runs_independent_chains_as_sub_jobs_that_batch_with_other_jobs():
    real, answers, usage = map_jobs(width=2)
    plain_real, plain_answers, plain_usage = map_jobs(width=1)
    assert answers == plain_answers  # same answers, in item order
    assert [p for p, _ in real.log] == [("xa s0", "xb s0", "xc s0", "ya s0", "yb s0", "yc s0"),
                                        ("reply s0 s1",) * 6]
    assert [len(p) for p, _ in plain_real.log] == [1] * 12  # width 1: a plain loop, one call at a time
    assert usage == plain_usage and usage[0]["recall"]["calls"] == 6  # counted in the caller's meter


def test_width_must_be_positive():
    with pytest.raises(ValueError, match="width must be positive") as err:
        BatchingFront(LoggingLLM()).run([], width=0)
    assert "run." not in str(err.value)  # the llm layer names no harness key


def test_run_settings_checked_by_the_harness():
    from scgmem.harness.pipeline import check_run_settings
    with pytest.raises(ValueError, match="run.parallel_conversations must be a positive int"):
        check_run_settings(1, 0)


# ---------------------------------------------------------------------------- the pipeline
METHODS = ["full_context", "memorybank", "amem", "memgpt", "readagent"]


@pytest.fixture(scope="module")
def three_conversations(locomo_path):
    from scgmem.data.locomo import load_locomo, select

    conversations, _ = load_locomo(locomo_path)
    return select(conversations, ["conv-26", "conv-30", "conv-41"], max_sessions=1)


LATENCY = re.compile(rb'"latency_s": [0-9.e-]+')


def without_latency(records):
    return [{k: v for k, v in r.items() if k != "latency_s"} for r in records]


@pytest.mark.parametrize("method", METHODS)
def test_parallel_one_equals_calling_the_model_directly(method, three_conversations, tmp_path):
    """The reference is the pipeline's own steps run one conversation after another on the
    model itself, outside the front: what the harness did before the front existed."""
    from scgmem.data.locomo import scored_questions

    direct = fake_pipeline(method, tmp_path / "direct", parallel=1)
    expected = []
    for conv in three_conversations:
        memory = direct.build_memory(conv)
        questions = scored_questions(conv, direct.protocol.categories, 2)
        for start in range(0, len(questions), 8):
            expected += direct.answer_chunk(memory, questions[start:start + 8])

    batched = fake_pipeline(method, tmp_path / "front", parallel=1)
    records = batched.run(three_conversations)
    assert without_latency(records) == without_latency(expected)
    assert batched._llm.prompts == direct._llm.prompts  # the same calls, in the same order
    assert batched._llm.usage.snapshot() == direct._llm.usage.snapshot()
    assert batched.state.ingest_usage == direct.state.ingest_usage
    assert sum(batched.front.rows.values()) == sum(v["calls"] for v in direct._llm.usage.snapshot().values())


@pytest.mark.parametrize("method", METHODS)
def test_parallel_three_gives_identical_files_on_every_run(method, three_conversations, tmp_path):
    runs = []
    for name in ("a", "b"):
        pipeline = fake_pipeline(method, tmp_path / name, parallel=3)
        records = pipeline.run(three_conversations)
        runs.append(((tmp_path / name / "predictions.jsonl").read_bytes(), pipeline))
    (first, p1), (second, p2) = runs
    # Byte for byte, lines and their order, except the one field that is a wall time.
    assert LATENCY.sub(b"", first) == LATENCY.sub(b"", second) and first.count(b"latency_s") == 12
    assert p1.front.calls == p2.front.calls and p1.state.ingest_usage == p2.state.ingest_usage
    # Same answers as one conversation at a time (this fake's replies ignore batch composition),
    # and fewer, fuller model calls.
    sequential = fake_pipeline(method, tmp_path / "seq", parallel=1)
    assert sorted(map(str, without_latency(sequential.run(three_conversations)))) == \
        sorted(map(str, without_latency(records)))
    assert sequential.state.ingest_usage == p1.state.ingest_usage
    assert sum(p1.front.calls.values()) < sum(sequential.front.calls.values())
    assert sum(p1.front.rows.values()) == sum(sequential.front.rows.values())
