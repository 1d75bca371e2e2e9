"""`make bench` on the tiny configuration (BENCH_TINY=1: the tiny random Llama, a few steps, the
smallest slices): every part runs its code path end to end and writes the JSON keys its report
reads, so a signature change under any part fails here instead of in a user's `make bench`
(issue 49: the constrained_step part broke on a SchemaDecoding change and nothing noticed).

The parts run in two `make bench` processes side by side (about 35 CPU-seconds each), so the
test takes about 40 s on 2 idle cores. The numbers of a tiny run mean nothing; only the keys and
the invariants that hold at any size are checked.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Two groups of about equal CPU time (the sweep's two scgmem-run children weigh most).
GROUPS = (("sweep", "constrained_step", "constraint_host", "engine"),
          ("served", "ingest_tokens", "prefix_cache", "compute_bound", "batching"))


def make_bench(out: Path, parts: tuple[str, ...], target: str = "bench", **env) -> subprocess.Popen:
    """`make <target>` on the tiny configuration, writing its JSON into `out`."""
    env = {**os.environ, "BENCH_TINY": "1", "BENCH_OUT": str(out), "BENCH_PARTS": ",".join(parts),
           "OMP_NUM_THREADS": "1", **env}
    # its own process group: a failed test stops make and the bench under it (killing make alone
    # would leave the bench running, holding the output pipe open)
    return subprocess.Popen(["make", "-s", "-C", str(ROOT), target, f"BIN={Path(sys.executable).parent}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: int = 300) -> str:
    output, _ = proc.communicate(timeout=timeout)  # on a timeout the fixture stops the whole group
    assert proc.returncode == 0, f"make bench exited {proc.returncode}:\n{output[-4000:]}"
    return output


def written(out: Path) -> dict:
    [path] = out.glob("*-tiny.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tiny_bench(tmp_path_factory) -> dict:
    """One tiny `make bench` over every part (two processes); the merged JSON and both outputs."""
    outs = [tmp_path_factory.mktemp(f"bench{i}") for i in range(len(GROUPS))]
    procs = [make_bench(out, parts) for out, parts in zip(outs, GROUPS)]
    try:
        logs = [finish(p) for p in procs]
    finally:  # one group failed: stop the other, never leave a bench running after the test
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
    merged = {"logs": logs, "runs": [written(out) for out in outs]}
    for run in merged["runs"]:
        merged.update({part: run[part] for part in run["parts"]})
    return merged


def test_every_part_is_in_the_smoke_run():
    from scripts.bench import PARTS

    assert sorted(p for group in GROUPS for p in group) == sorted(PARTS)


def test_each_run_records_the_machine(tiny_bench):
    for run, log in zip(tiny_bench["runs"], tiny_bench["logs"]):
        assert run["scale"] == "tiny" and run["env"]["BENCH_TINY"] == "1"
        machine = run["machine"]
        assert len(machine["load_avg_start"]) == 3 and len(machine["load_avg_end"]) == 3
        assert machine["cpu_count"] >= 1 and machine["cpu"]["logical_cpus"] >= 1
        if Path("/proc/cpuinfo").is_file():  # Linux: the whole flag list, as issue 49 asks
            assert machine["cpu"]["flags"] and set(machine["cpu"]["vector_flags"]) <= set(machine["cpu"]["flags"])
        assert "written:" in log and "load average" in log  # the report read every key it prints


def test_constrained_step(tiny_bench):
    step = tiny_bench["constrained_step"]
    assert set(step["sizes"]) == {"20", "100"} and step["worst_size"] in step["sizes"]
    for size in step["sizes"].values():
        assert size["concepts"] > 0 and size["trie_nodes"] > size["concepts"]
        assert size["pairs"] >= 2 and size["constrained_median_s"] > 0 and size["mask_median_s"] > 0
        assert size["constrained_step_ratio"] == size["constrained_median_s"] / size["unconstrained_median_s"]
        low, high = size["ratio_ci95"]
        assert low <= high  # a bootstrap over the pairs (its own test: tests/scripts/test_paired_ratio.py)
    worst = max(step["sizes"].values(), key=lambda s: s["ratio_ci95"][1])
    assert step["constrained_step_ratio"] == worst["constrained_step_ratio"]
    assert step["constrained_step_ratio_ci95"] == worst["ratio_ci95"]
    assert step["mask_overhead_ratio"] > 1
    assert step["previous"] is None  # a fresh folder holds no earlier run to compare with


def test_previous_run_is_the_newest_full_one(tmp_path):
    from scripts.bench_decode_step import previous_run

    def write(name, ratio, quick=False):
        (tmp_path / name).write_text(json.dumps({"quick": quick, "constrained_step": {"constrained_step_ratio": ratio}}))
    write("20261201-000000.json", 1.5)
    write("20261202-000000.json", 1.2)
    write("20261203-000000.json", 9.0, quick=True)  # a quick run measures fewer sizes: not comparable
    write("20261204-000000-tiny.json", 9.0)
    (tmp_path / "20261204-000001-served.json").write_text("{}")
    assert previous_run(tmp_path, "20261205-000000.json")["file"] == "20261202-000000.json"
    assert previous_run(tmp_path, "20261202-000000.json")["file"] == "20261201-000000.json"


def test_constraint_host(tiny_bench):
    host = tiny_bench["constraint_host"]
    for name in ("greedy_16_rows", "beams_20_rows"):
        assert host[name]["before_ms"] > 0 and host[name]["after_ms"] > 0
        assert host[name]["host_copies_per_step"]["after"] == 1.0  # issue 40: one copy per step, at any size


def test_prefix_cache(tiny_bench):
    cache = tiny_bench["prefix_cache"]
    assert cache["prompts"] == 2 and cache["speedup"] > 0
    assert cache["identical_outputs"] == cache["prompts"]  # the cache may change the time, never the output


def test_ingest_tokens(tiny_bench):
    tokens = tiny_bench["ingest_tokens"]
    for method in ("scgmem", "amem"):
        assert tokens[method]["calls"] > 0 and tokens[method]["tokens_per_turn"] > 0
    assert tokens["ratio_scgmem_over_amem"] == tokens["scgmem"]["tokens_per_turn"] / tokens["amem"]["tokens_per_turn"]


def test_sweep(tiny_bench):
    sweep = tiny_bench["sweep"]
    assert sweep["exit_codes"] == [0, 0] and sweep["sweep_points"] == 2
    assert sweep["sweep_memory_builds"] == 1  # the second k point loads the first one's memory
    assert sweep["sweep_ratio"] > 0 and sweep["turns_per_s"] > 0 and sweep["questions_per_s"] > 0
    assert sweep["peak_rss_mb"] > 0


def test_compute_bound(tiny_bench):
    bound = tiny_bench["compute_bound"]
    assert bound["quick"] is True
    assert bound["rates_gflops_1thread_fp32"]["stack"] and bound["placement_gflops"]["decode"]
    assert "head_all_over_last" in bound["logits_over_prompt"] and "measured" in bound["bf16"]


def test_batching(tiny_bench):
    from scripts.bench_batching import METHODS

    batching = tiny_bench["batching"]
    assert batching["tiny"] is True and set(batching["methods"]) == set(METHODS)
    for method, by_width in batching["methods"].items():
        assert by_width["parallel_1"]["generate_calls"] > 0, method
        assert by_width["parallel_2"]["generate_calls"] <= by_width["parallel_1"]["generate_calls"], method


def test_served(tiny_bench):
    served = tiny_bench["served"]
    assert set(served["grammar"]) == {"10"} and served["grammar"]["10"]["grammar_bytes"] > 0
    sl = served["slice"]
    assert sl["turns"] == 2 and sl["questions"] == 1 and sl["server_requests"] > 0
    assert sl["ingest_served_over_local"] > 0 and sl["recall_served_over_local"] > 0


def test_engine(tiny_bench):
    """The engine part's tiny run: dense RAG through llama.cpp with its requests recorded and replayed."""
    engine = tiny_bench["engine"]
    assert engine["methods"] == ["rag"] and engine["local"]["rag"]["seconds"] > 0
    run = engine["engines"]["llamacpp"]["runs"]["rag"]
    assert run["run"]["requests"] > 0 and run["replay"]["tokens"] > 0
    assert 0 < run["engine_utilization"] and run["local_over_served"] > 0
    assert 0 < run["run"]["busy_share"] <= 1
    assert run["replay_causal"]["tokens"] == run["replay"]["tokens"] and run["order_cap"] > 0
    assert run["run_over_causal"] > 0 and 1 <= run["critical_path"]["requests"] <= run["run"]["requests"]
    assert "llamacpp rag: engine utilization" in tiny_bench["logs"][0]


def test_unknown_part_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scripts.bench", "--tiny", "--parts", "constrained_stp",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: BENCH_PARTS / --parts: unknown part(s) "
                                                           "['constrained_stp']")
    assert not list(tmp_path.iterdir())
