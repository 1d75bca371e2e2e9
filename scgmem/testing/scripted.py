"""A pipeline over a method's own config on the scripted model: the whole harness without a
model, for the batching benchmark (scripts/bench_batching.py) and the tests."""
from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from scgmem.harness.cache import MemoryCache
from scgmem.harness.pipeline import Pipeline
from scgmem.llm.doubles.fake import BagEmbedder, ScriptedLLM, echo_reply
from scgmem.scoring.protocols import AmemProtocol

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def fake_pipeline(method: str, run_dir: Path, parallel: int, answer_batch_size: int = 8, llm=None,
                  questions_per_category: int | None = 2) -> Pipeline:
    """A pipeline over `method` (its config file's values) on the scripted `echo_reply` model
    (or `llm`), a bag-of-words embedder and no memory cache."""
    run_dir.mkdir(parents=True, exist_ok=True)
    llm, embedder = llm or ScriptedLLM(echo_reply), BagEmbedder()
    node = OmegaConf.load(CONFIG_DIR / "method" / f"{method}.yaml")
    return Pipeline(llm=llm, embedder=embedder, protocol=AmemProtocol({1: "multi_hop", 2: "temporal", 4: "single_hop",
                                                                       5: "adversarial"}),
                    method_factory=lambda view: instantiate(node, llm=view, embedder=embedder),
                    run_dir=run_dir, cache=MemoryCache(run_dir / "cache", enabled=False), seed=0,
                    answer_batch_size=answer_batch_size, questions_per_category=questions_per_category,
                    progress=False, parallel_conversations=parallel)
