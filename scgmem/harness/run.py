"""`scgmem-run`: the Hydra app (same as `python -m scgmem.run`).

    scgmem-run                                   # SCG-Mem, SmolLM2-135M, all of LoCoMo
    scgmem-run method=full_context data.samples=[conv-26] data.questions_per_category=2
    scgmem-run -m method.k=5,10,20 hops=...      # sweeps (memory is built once and cached)

Bad input (data, overrides, missing model files) exits with code 2 and one line on stderr
naming the file/field/value and the fix; HYDRA_FULL_ERROR=1 or SCGMEM_DEBUG=1 shows the traceback.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from scgmem.api.data_source import DataError, DataSource
from scgmem.api.paths import UnsafePath
from scgmem.config_resolvers import CONFIG_DIR

from scgmem.harness.cache import MemoryCache
from scgmem.harness.gpu_sharing import claim_gpu, place_job, visible_gpus
from scgmem.harness.judging import judge_model_node, judge_options, judge_records, make_judge
from scgmem.harness.pipeline import Pipeline, check_run_settings, parse_question_shard, read_stored_predictions
from scgmem.harness.paper_settings import check_embedder_choice
from scgmem.harness.records import write_json_atomic
from scgmem.harness.run_lock import LOCK_NAME, RunDirLocked, run_dir_lock
from scgmem.harness.rundir import RunDirMismatch, check_run_dir, data_hashes, speed_changes
from scgmem.harness.safe_files import check_run_dir_links, disk_error
from scgmem.harness.untrusted import StoredFileError
from scgmem.harness.summary import build_summary
from scgmem.llm.chat_template import ChatPolicy
from scgmem.llm.served.engines.dialect import Unsupported
from scgmem.llm.served.http_client import ServerError
from scgmem.llm.loading import ModelFilesMissing
from scgmem.llm.local.oom import free_cuda_cache
from scgmem.llm.usage import UsageMeter
from scgmem.llm.protocol import make_ready
from scgmem.harness.cli_checks import method_needs, served_node

log = logging.getLogger("scgmem.run")

USER_ERRORS = (DataError, ModelFilesMissing, RunDirMismatch, ServerError, ValueError, TypeError)


class UsageError(ValueError):
    """A bad override or config value; str(e) is the one line shown to the user."""


def _debug() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("SCGMEM_DEBUG") == "1"


def _fail(message: str, run_dir: Path | None = None, fresh: bool = False) -> None:
    """Print one line and exit 2; remove the run dir if this run created it and wrote nothing else."""
    if run_dir is not None and fresh:
        for name in (".hydra", "run.log", "run.json", "wandb_run.json", "wandb", "usage.jsonl", LOCK_NAME):
            target = run_dir / name
            if target.is_symlink():  # never followed, never removed: a planted link is the user's to see
                continue
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                target.unlink()
        try:
            run_dir.rmdir()
        except OSError:
            pass
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def _instantiate(node, what: str, **kwargs):
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__ or e
        if _debug() or not isinstance(cause, USER_ERRORS):
            raise
        raise UsageError(f"{what}: {cause}") from None


# Models loaded by earlier jobs of this process: a Hydra multirun (basic launcher) runs its
# jobs one after another in one process, and a k-sweep should not reload the same weights.
# Only the weights are shared: `LLM.begin_job` drops every cache a job could see from another.
_LOADED: dict[str, tuple[str, object]] = {}


def _shared(slot: str, node, what: str):
    key = json.dumps(OmegaConf.to_container(node, resolve=True), sort_keys=True)
    if _LOADED.get(slot, (None,))[0] != key:  # keep one model and one embedder at most
        # Release the previous one before loading: two 3B models (or one per GPU share) may not fit.
        if _LOADED.pop(slot, None) is not None:
            free_cuda_cache()
        _LOADED[slot] = (key, _instantiate(node, what))
    return _LOADED[slot][1]


def _job_num() -> int:
    """Hydra's job number (0-based in a multirun; a single run has none: 0)."""
    num = HydraConfig.get().job.get("num", None)
    return int(num) if num is not None else 0


def _placement(cfg: DictConfig) -> tuple[DictConfig, DictConfig, dict]:
    """The model and embedder nodes this job loads: pinned to one GPU and sized for its share of
    it when `run.pin_gpus` / `run.jobs_per_gpu` ask (`scgmem.harness.gpu_sharing`)."""
    try:
        model, embedder, report = place_job(
            OmegaConf.to_container(served_node(cfg), resolve=True), OmegaConf.to_container(cfg.embedder, resolve=True),
            job_num=_job_num(), jobs_per_gpu=cfg.run.get("jobs_per_gpu", 1), pin_gpus=cfg.run.get("pin_gpus", False),
            n_gpus=visible_gpus())
    except ValueError as e:
        raise UsageError(str(e)) from None
    claim_gpu(report)
    return OmegaConf.create(model), OmegaConf.create(embedder), report


def split_protocol(cfg: DictConfig) -> tuple[DictConfig, dict]:
    """The protocol node without `chat`, and `chat`: the chat policy (system message, date) every
    prompt of the job is rendered with. Resolved first: protocol values may read the model config
    (e.g. max_new_tokens is `${cap:...}` of model.cap_profile)."""
    node = OmegaConf.to_container(cfg.protocol, resolve=True)
    chat = node.pop("chat", None) or {}
    node.pop("judge", None)  # read by `run_judge`, not the protocol's constructor
    return OmegaConf.create(node), chat


def run_judge(cfg: DictConfig, llm, records: list[dict], run_dir: Path, categories) -> dict | None:
    """`protocol.judge` (scgmem/harness/judging.py): label every prediction into run_dir/judgements.jsonl
    and return summary.json's `judge`; None when it is off. A judge model other than the run's is
    loaded once per process (a sweep's jobs share it)."""
    try:
        options = judge_options(OmegaConf.to_container(cfg.protocol, resolve=True).get("judge"))
        if options is None:
            return None
        judge_llm = llm
        if options["model"] is not None:
            node = judge_model_node(options["model"], options["model_set"])
            judge_llm = _shared("judge", OmegaConf.create(node), "protocol.judge.model")
            judge_llm.set_chat_policy(ChatPolicy())
        judge = make_judge(options, judge_llm)
        return judge_records(judge, records, run_dir, categories, seed=cfg.seed, chunk=options["chunk"],
                             n_resamples=options["n_resamples"])
    except (ValueError, TypeError) as e:
        raise UsageError(f"protocol.judge: {e}") from None


def _make_ready(llm, cfg, what: str) -> None:
    """The one readiness hook (scgmem.llm.protocol.make_ready) before the embedder loads and before any
    conversation: a model that cannot serve the method, a server that is unreachable, does not serve
    the model or fails the engine probe, each as one line naming the model choice."""
    try:
        make_ready(llm, method_needs(cfg))
    except (ServerError, ValueError) as e:  # NotReady, EngineProbeFailed, a model id the server does not list
        if _debug():
            raise
        raise UsageError(f"{what}: {e}") from None


def evaluate(cfg: DictConfig) -> dict:
    """Run one configuration end to end; returns the summary (also written to summary.json)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    choices = HydraConfig.get().runtime.choices
    data = _instantiate(cfg.data, f"data={choices.get('data')}")
    if not isinstance(data, DataSource):
        raise UsageError(f"data={choices.get('data')}: {type(data).__name__} is not a DataSource "
                         "(scgmem/api/data_source.py: scored, questions_per_category, load, summary_info)")
    conversations, load_report = data.load()
    categories = data.scored
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool) or cfg.seed < 0:  # every seed derives from it
        raise UsageError(f"seed={cfg.seed!r}: must be an integer >= 0")
    parallel = cfg.run.get("parallel_conversations", 1)
    try:
        check_run_settings(cfg.run.answer_batch_size, parallel)
        parse_question_shard(cfg.run.get("question_shard"))
    except ValueError as e:
        raise UsageError(str(e)) from None
    problem = check_embedder_choice(list(HydraConfig.get().overrides.task), choices, cfg.embedder.get("name"))
    if problem:
        raise UsageError(problem)
    logger = _instantiate(cfg.logger, f"logger={choices.get('logger')}")  # a bad logger fails before the model loads
    protocol_node, chat = split_protocol(cfg)
    protocol = _instantiate(protocol_node, "protocol", categories=categories)
    done: list[dict] = []

    def read_done() -> None:  # the stored records, checked against the data before run.json is rewritten
        done.extend(read_stored_predictions(run_dir, conversations, protocol, cfg.seed, data.questions_per_category))

    check_run_dir(run_dir, cfg, data_hashes(data), before_write=read_done)
    model_node, embedder_node, placement = _placement(cfg)
    start = time.perf_counter()
    llm = _shared("model", model_node, f"model={choices.get('model')}")
    _make_ready(llm, cfg, f"model={choices.get('model')}")
    if hasattr(llm, "begin_job"):
        llm.begin_job()  # nothing an earlier job of this process computed can reach this one
    else:
        llm.usage = UsageMeter()  # counts of this job only
    try:
        llm.set_chat_policy(ChatPolicy(**chat))
    except TypeError as e:
        raise UsageError(f"protocol.chat: {e}") from None
    load_s = time.perf_counter() - start
    embedder = _shared("embedder", embedder_node, f"embedder={choices.get('embedder')}")
    method_name = choices.get("method") or "method"
    _instantiate(cfg.method, f"method={method_name}", llm=llm, embedder=embedder)  # fail fast on bad values
    pipeline = Pipeline(
        llm=llm, embedder=embedder, protocol=protocol,
        method_factory=lambda conversation_llm: instantiate(cfg.method, llm=conversation_llm, embedder=embedder),
        run_dir=run_dir, cache=MemoryCache(Path(cfg.run.cache_dir), cfg.run.use_memory_cache), seed=cfg.seed,
        answer_batch_size=cfg.run.answer_batch_size, answer_margin_tokens=cfg.run.answer_margin_tokens,
        questions_per_category=data.questions_per_category, progress=cfg.run.progress,
        parallel_conversations=parallel, question_shard=cfg.run.get("question_shard"),
        on_progress=logger.log_progress,
    )
    config = OmegaConf.to_container(cfg, resolve=True)
    logger.start(config, run_dir, name=f"{choices.get('model')}/{method_name}")
    try:
        records = pipeline.run(conversations, done_records=done)
    except BaseException:  # a crash, a kill signal Python sees, Ctrl-C: keep what was logged, marked failed
        logger.abort()
        raise
    judged = run_judge(cfg, llm, records, run_dir, categories)
    summary = build_summary(
        records=records, state=pipeline.state, method_name=method_name, model_name=llm.name, protocol=protocol,
        categories=categories, seed=cfg.seed,
        data_info=data.summary_info(conversations, load_report),
        llm_usage=llm.usage.snapshot(), config=config,
        model_load_s=load_s, generation=llm.generation_report(),
        oom=llm.oom.report() if hasattr(llm, "oom") else None,
    )
    if judged is not None:
        summary["judge"] = judged
    summary["backend"] = cfg.get("backend", {}).get("name", "local")  # beside summary["model"]: both choices
    summary["placement"] = placement
    summary["speed_changes"] = speed_changes(run_dir)  # batching changed on a resume (rundir.py)
    write_json_atomic(run_dir / "summary.json", summary)
    logger.log_run(config, summary, run_dir)
    avg = summary["average"]
    log.info("%s on %s: %d questions, average F1 %.2f BLEU-1 %.2f -> %s", method_name, llm.name,
             summary["n_questions"], avg["f1"] or 0.0, avg["bleu1"] or 0.0, run_dir / "summary.json")
    return summary


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def task(cfg: DictConfig):
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    fresh = not (run_dir / "predictions.jsonl").exists()
    try:
        check_run_dir_links(run_dir)  # before anything is read or written (Hydra's own files: run_log.py)
        with run_dir_lock(run_dir):
            summary = evaluate(cfg)
    except RunDirLocked as e:  # the directory is another run's: remove nothing
        _fail(str(e))
    except (UsageError, DataError, ModelFilesMissing, RunDirMismatch, UnsafePath, ServerError, Unsupported,
            StoredFileError) as e:
        # ServerError: the server stopped answering; predictions are kept and a rerun resumes
        # Unsupported: the engine lacks a feature, found by the probe before the run (EngineProbeFailed)
        # or when a server stops honouring one mid-run (vLLM's logprob_token_ids)
        # StoredFileError: a file read back (run.json, predictions, usage, a link) is not what the harness writes
        if _debug():
            raise
        _fail(str(e), run_dir, fresh and not (run_dir / "predictions.jsonl").exists())
    except OSError as e:  # a full disk: what was written is kept (appends roll back, temp files removed)
        if _debug() or disk_error(e) is None:
            raise
        _fail(disk_error(e), run_dir, fresh and not (run_dir / "predictions.jsonl").exists())
    return summary["average"]["f1"]


def main() -> None:
    from scgmem.harness.cli_checks import check_keys, check_overrides

    problem = check_overrides(sys.argv[1:], CONFIG_DIR) or check_keys(sys.argv[1:], CONFIG_DIR)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    task()


if __name__ == "__main__":
    main()
