"""Live tracking: progress logged while a run answers, and a resumed run directory continuing the
same wandb run (its id kept in <run dir>/wandb_run.json). Real wandb, offline."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.harness.logger import RUN_ID_FILE, NullLogger, WandbLogger, progress_metrics, run_id_for
from tests.report import rec, write_run
from tests.scoring.test_answer_format import _conversation_with_questions
from tests.scoring.test_protocols import CATS


def test_run_id_is_made_once_and_read_back(tmp_path):
    first = run_id_for(tmp_path)
    assert json.loads((tmp_path / RUN_ID_FILE).read_text()) == {"id": first}
    assert run_id_for(tmp_path) == first  # a resumed job gets the same id
    assert run_id_for(tmp_path / "other") != first  # another run directory: another wandb run
    (tmp_path / RUN_ID_FILE).write_text('{"run": "x"}')
    with pytest.raises(ValueError, match=r"wandb_run.json: field 'id'"):
        run_id_for(tmp_path)


def test_progress_metrics_are_running_means_in_percent():
    records = [{"f1": 1.0, "bleu1": 0.5}, {"f1": 0.0, "bleu1": 0.0}, {"f1": 0.5, "bleu1": None}]
    usage = {"answer": {"prompt_tokens": 300, "generated_tokens": 12, "note": "x"}}
    got = progress_metrics(records, total=12, memories_ready=1, conversations=2, usage=usage, elapsed_s=1.23456)
    assert got["progress/answered"] == 3 and got["progress/total"] == 12 and got["progress/fraction"] == 0.25
    assert got["running/f1"] == pytest.approx(50.0) and got["running/bleu1"] == pytest.approx(25.0)
    assert got["progress/memories_ready"] == 1 and got["progress/conversations"] == 2
    assert got["tokens/answer/prompt_tokens"] == 300 and "tokens/answer/note" not in got
    assert got["progress/elapsed_s"] == 1.235
    empty = progress_metrics([], total=0, memories_ready=0, conversations=0, usage={}, elapsed_s=0)
    assert "running/f1" not in empty and empty["progress/fraction"] == 1.0


def _pipeline(run_dir: Path, events: list):
    from scgmem.harness.cache import MemoryCache
    from scgmem.harness.pipeline import Pipeline
    from scgmem.harness.run import CONFIG_DIR
    from scgmem.llm.doubles.fake import ScriptedLLM
    from scgmem.scoring.protocols import AmemProtocol

    node = OmegaConf.load(CONFIG_DIR / "method" / "full_context.yaml")
    return Pipeline(llm=ScriptedLLM('7 May 2023"}'), embedder=None,
                    protocol=AmemProtocol(CATS, temperature=0),
                    method_factory=lambda view: instantiate(node, llm=view, embedder=None), run_dir=run_dir,
                    cache=MemoryCache(run_dir / "cache", enabled=False), seed=0, progress=False,
                    answer_batch_size=1, on_progress=events.append)


def test_pipeline_reports_after_the_memory_and_every_chunk(tmp_path):
    events: list[dict] = []
    _pipeline(tmp_path, events).run([_conversation_with_questions()])
    # one memory built, then one chunk per question (answer_batch_size=1), before the run ends
    assert [(e["progress/memories_ready"], e["progress/answered"]) for e in events] == [(1, 0), (1, 1), (1, 2)]
    assert all(e["progress/total"] == 2 for e in events)
    # the running F1 after n chunks is the mean of the first n records written, in %
    f1s = [json.loads(line)["f1"] for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert f1s[0] != f1s[1], "the two answers must score differently, or a running mean is not tested"
    assert events[1]["running/f1"] == pytest.approx(100.0 * f1s[0])
    assert events[2]["running/f1"] == pytest.approx(50.0 * (f1s[0] + f1s[1]))
    assert events[2]["tokens/answer/prompt_tokens"] > events[1]["tokens/answer/prompt_tokens"] > 0
    # a rerun resumes: the questions already answered count from the start, none is answered again
    resumed: list[dict] = []
    _pipeline(tmp_path, resumed).run([_conversation_with_questions()])
    assert [e["progress/answered"] for e in resumed] == [2]


def test_null_logger_accepts_the_whole_protocol(tmp_path):
    logger = NullLogger()
    logger.start({}, tmp_path, name="m/x")
    logger.log_progress({"progress/answered": 1})
    logger.abort()
    assert not (tmp_path / RUN_ID_FILE).exists()  # no tracking, no id file


def _offline_runs(root: Path) -> list[Path]:
    return sorted((root / "wandb").glob("offline-run-*"))


def _wait_for(path_glob, keys: tuple[bytes, ...]) -> bytes:
    """The .wandb file's bytes once all `keys` are in it: wandb's service process writes it
    asynchronously, even after finish() (bounded wait)."""
    deadline = time.time() + 60
    while True:
        files = list(path_glob())
        data = files[0].read_bytes() if files else b""
        if all(k in data for k in keys) or time.time() > deadline:
            return data
        time.sleep(0.5)


def test_a_resumed_run_directory_continues_the_same_wandb_run(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline by default
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    (tmp_path / "wb").mkdir()
    run_dir = tmp_path / "runs" / "multirun" / "table1" / "m" / "scgmem" / "k=5"
    run_dir.mkdir(parents=True)
    config = {"model": {"name": "m"}, "method": {"k": 5}, "seed": 0}

    crashed = WandbLogger()
    crashed.start(config, run_dir, name="m/scgmem")
    crashed.log_progress(progress_metrics([{"f1": 1.0, "bleu1": 1.0}], 4, 1, 1, {}, 1.0))
    crashed.abort()  # the job died: what it logged stays
    run_id = json.loads((run_dir / RUN_ID_FILE).read_text())["id"]
    first = _offline_runs(tmp_path / "wb")
    assert len(first) == 1 and first[0].name.endswith(run_id)
    data = _wait_for(lambda: first[0].glob("run-*.wandb"), (b"progress/answered", b"running/f1"))
    assert b"progress/answered" in data and b"running/f1" in data  # logged before any summary existed

    resumed = WandbLogger()
    resumed.start(config, run_dir, name="m/scgmem")
    resumed.log_progress(progress_metrics([rec("conv-1", i, 1, 0.5) for i in range(4)], 4, 1, 1, {}, 2.0))
    write_run(run_dir, model="m", method="scgmem", records=[rec("conv-1", i, 1, 0.5) for i in range(4)])
    resumed.log_run(config, json.loads((run_dir / "summary.json").read_text()), run_dir)
    runs = _offline_runs(tmp_path / "wb")
    assert len(runs) == 2
    # the same wandb run id: `wandb sync` appends the second part to the first run
    assert all(r.name.split("-", 3)[3].startswith(run_id) for r in runs), [r.name for r in runs]
    second = [r for r in runs if r != first[0]][0]
    data = _wait_for(lambda: second.glob("run-*.wandb"), (b"average/f1", run_id.encode()))
    assert b"average/f1" in data and run_id.encode() in data


@pytest.mark.slow
def test_scgmem_run_logs_progress_and_a_rerun_continues_the_run(tmp_path):
    """The runner's wiring, end to end on the embedded model (about 25 s a run)."""
    from tests.harness.test_run_e2e import FAST, scgmem_run

    env = {"WANDB_DIR": str(tmp_path / "wb"), "WANDB_MODE": "offline"}
    args = (*FAST, "data.questions_per_category=1", "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}")
    scgmem_run(*args, env=env)
    run_id = json.loads((tmp_path / "run" / RUN_ID_FILE).read_text())["id"]
    first = _offline_runs(tmp_path / "wb")
    assert [r.name.endswith(run_id) for r in first] == [True]
    data = _wait_for(lambda: first[0].glob("run-*.wandb"), (b"progress/answered", b"running/f1", b"average/f1"))
    for key in (b"progress/answered", b"progress/memories_ready", b"running/f1", b"average/f1"):
        assert key in data, key
    scgmem_run(*args, env=env)  # the same command again: the run directory resumes, so does its wandb run
    runs = _offline_runs(tmp_path / "wb")
    assert len(runs) == 2 and all(run_id in r.name for r in runs), [r.name for r in runs]
