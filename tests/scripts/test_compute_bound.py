"""The FLOP count of a run, the CPU flag parser and the compute_bound bench part (quick shapes)."""
from __future__ import annotations

import importlib
import json

import pytest

from scgmem.report.flops import ModelShape, PhaseTokens, parse_cpuinfo, phase_flops, run_flops

# hidden 4, 2 query heads of width 2, 1 KV head: per layer q 16 + k 8 + v 8 + o 16 + MLP 3 * 32 = 144
SMALL = ModelShape(hidden=4, intermediate=8, layers=2, heads=2, kv_heads=1, head_dim=2, vocab=10)


def load_bench():
    # imported by name (not from a file spec): the 2-process measurement spawns workers that import it
    return importlib.import_module("scripts.bench_compute_bound")


def test_parameter_counts_of_a_small_config():
    assert SMALL.body_params == 2 * 144
    assert SMALL.head_params == 40
    assert SMALL.attention_width == 4


def test_flops_by_hand():
    # 2 calls, mean prompt 10, mean generation 2; 4 * layers * A = 32 FLOPs per (query, key) pair
    got = phase_flops(SMALL, PhaseTokens(calls=2, prompt_tokens=20, generated_tokens=4))
    assert got["body_prefill"] == 2 * 288 * 20          # 11520
    assert got["body_decode"] == 2 * 288 * 4            # 2304
    assert got["head"] == 2 * 40 * 4                    # 320: logits only where a token is chosen
    assert got["attention_prefill"] == 2 * 32 * 100 / 2  # 3200: half the prompt on average
    assert got["attention_decode"] == 2 * 32 * (2 * 10 + 4 / 2)  # 1408
    assert got["total"] == 18752


def test_flops_skip_cached_prefixes_and_memo_hits():
    # 4 calls, 2 from the memo (no work); the 2 computed ones had 3 of their 10 prompt tokens cached
    got = phase_flops(SMALL, PhaseTokens(calls=4, prompt_tokens=40, generated_tokens=8,
                                         cached_prompt_tokens=6, memo_hits=2))
    assert got["prompt_tokens"] == 14 and got["generated_tokens"] == 4
    assert got["body_prefill"] == 2 * 288 * 14
    assert got["attention_prefill"] == 2 * 32 * (100 - 9) / 2
    assert got["total"] == 8064 + 2304 + 320 + 2912 + 1408


def test_run_flops_reads_every_phase_and_names_a_bad_field():
    summary = {"tokens": {"ingest": {"calls": 2, "prompt_tokens": 20, "generated_tokens": 4}, "answer": {}}}
    assert set(run_flops(SMALL, summary)) == {"ingest"}
    with pytest.raises(ValueError, match="tokens.ingest: missing field 'generated_tokens'"):
        run_flops(SMALL, {"tokens": {"ingest": {"calls": 1, "prompt_tokens": 3}}}, "run/summary.json")
    with pytest.raises(ValueError, match="run/summary.json: field 'tokens' missing"):
        run_flops(SMALL, {}, "run/summary.json")


def test_shape_from_a_config_names_a_missing_field():
    config = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "vocab_size": 49152}
    shape = ModelShape.from_config(config)
    assert (shape.head_dim, shape.attention_width) == (64, 576)
    assert shape.body_params == 30 * (576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536)
    with pytest.raises(ValueError, match="cfg.json: missing field 'vocab_size'"):
        ModelShape.from_config({k: v for k, v in config.items() if k != "vocab_size"}, source="cfg.json")


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 fma avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 fma avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile
"""


def test_cpuinfo_parser():
    info = parse_cpuinfo(CPUINFO)
    assert info["model_name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["logical_cpus"] == 2
    assert info["vector_flags"] == ["sse4_2", "fma", "avx", "avx2", "avx512f", "avx512bw", "avx512_vnni",
                                    "avx512_bf16", "amx_tile", "amx_bf16"]
    assert info["native_bf16"] is True
    avx2_only = parse_cpuinfo(CPUINFO.replace(" avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile", ""))
    assert avx2_only["vector_flags"] == ["sse4_2", "fma", "avx", "avx2"] and avx2_only["native_bf16"] is False


def test_interpolation_is_log_linear_and_clamped():
    bench = load_bench()
    grid = {1: 1.0, 100: 3.0}
    assert bench.interpolate(grid, 10) == pytest.approx(2.0)
    assert bench.interpolate(grid, 0.5) == 1.0 and bench.interpolate(grid, 1000) == 3.0


def test_bench_part_runs_in_quick_mode(tmp_path):
    bench = load_bench()
    run = tmp_path / "run"
    run.mkdir()
    summary = {"method": "scgmem", "timing": {"ingest_s": 10.0, "answer_s": 20.0},
               "config": {"model": {"batch_size": 4, "max_batch_tokens": 4096}},
               "tokens": {"ingest": {"calls": 6, "prompt_tokens": 300, "generated_tokens": 60},
                          "recall": {"calls": 2, "prompt_tokens": 40, "generated_tokens": 8},
                          "answer": {"calls": 2, "prompt_tokens": 400, "generated_tokens": 10,
                                     "cached_prompt_tokens": 100}}}
    (run / "summary.json").write_text(json.dumps(summary))
    result = bench.bench_compute_bound(run, quick=True)
    assert result["quick"] and result["cpu"]["logical_cpus"] >= 1
    assert all(r["cpu"] > 0 and r["wall"] > 0 for r in result["rates_gflops_1thread_fp32"]["stack"].values())
    placement = result["placement_gflops"]
    assert set(placement) == {"decode", "prefill"}
    assert all(row[p]["capacity"] > 0 for row in placement.values() for p in ("1thread", "2threads", "2procs"))
    assert all(1 <= row["best_2core_gain"] <= 2 for row in placement.values())
    assert result["bf16"]["measured"] == result["cpu"]["native_bf16"]
    assert result["logits_over_prompt"]["head_all_over_last"] > 1
    clocks = result["run"]["clocks"]
    assert set(clocks) == {"ingest_s", "answer_s"} and clocks["answer_s"]["wall_s"] == 20.0
    assert result["wall_s"] == 30.0
    assert result["efficiency"] == pytest.approx(result["compute_bound_s"] / 30.0)
    phases = result["run"]["phases"]
    assert phases["answer"]["flops"]["prompt_tokens"] == 300  # the cached prefix is not recomputed
    assert result["compute_bound_s"] == pytest.approx(sum(p["bound_s"]["total"] for p in phases.values()))
    assert result["compute_bound_s"] <= result["run"]["compute_bound_1core_s"]  # 2 cores never slower
    peak = max(r["cpu"] for r in result["rates_gflops_1thread_fp32"]["stack"].values()) * 1e9 \
        * placement["prefill"]["best_2core_gain"]
    assert result["run"]["compute_bound_peak_s"] == pytest.approx(result["run"]["flops_total"] / peak)


def test_shards_count_only_the_work_their_processes_did(tmp_path):
    bench = load_bench()
    entry = tmp_path / "cache" / "conv-1.json"  # a memory built by an earlier process
    entry.parent.mkdir()
    entry.write_text(json.dumps({"ingest_s": 4.0, "usage": {"ingest": {"calls": 2, "prompt_tokens": 100,
                                                                       "generated_tokens": 20, "cut_at_cap": 1}}}))
    for name, ingest, log in (("a", (5, 250, 50), f"[t][x][INFO] scgmem: memory of conv-1 loaded from {entry}\n"
                                                  "[t][x][INFO] resuming: 1 predictions already in a/predictions.jsonl\n"),
                              ("b", (1, 10, 2), "")):
        run = tmp_path / name
        run.mkdir()
        calls, prompt, generated = ingest
        (run / "summary.json").write_text(json.dumps({
            "method": "scgmem", "n_questions": 3, "timing": {"ingest_s": 9.0, "answer_s": 2.0},
            "tokens": {"ingest": {"calls": calls, "prompt_tokens": prompt, "generated_tokens": generated,
                                  "cut_at_cap": 1},
                       "answer": {"calls": 3, "prompt_tokens": 30, "generated_tokens": 6}}}))
        (run / "run.log").write_text(log)
        (run / "predictions.jsonl").write_text('{"latency_s": 1.5}\n{"latency_s": 0.5}\n')
    work = bench.work_done_here([tmp_path / "a", tmp_path / "b"])
    assert work["tokens"]["ingest"] == {"calls": 4, "prompt_tokens": 160, "generated_tokens": 32, "cut_at_cap": 1}
    assert work["tokens"]["answer"]["calls"] == 6 and work["n_questions"] == 6
    assert work["timing"] == {"ingest_s": 14.0, "answer_s": 2.5}  # a's first answer came from an earlier process
    assert list(work["cached_ingest_subtracted"]) == ["a/answers written by an earlier process", "a/conv-1"]
    entry.unlink()
    with pytest.raises(FileNotFoundError, match="conv-1.json: memory named in .*run.log is gone"):
        bench.work_done_here([tmp_path / "a"])


def test_bench_part_names_a_missing_summary(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary.json: no run summary"):
        load_bench().load_run(tmp_path)


def test_profile_summary_counts_self_and_total_frames():
    from experiments.pyspy_summary import frame_key, summarize

    raw = ["process 1:\"python\";main (run.py:10);generate (backend.py:200);forward (linear.py:5) 6",
           "process 1:\"python\";main (run.py:10);generate (backend.py:210) 3",
           "main (run.py:11) 1", "not a stack line"]
    got = summarize(raw, [("decode", "forward ("), ("generation", "generate")])
    assert got["samples"] == 10
    assert got["groups"] == {"decode": 6, "generation": 3, "rest": 1}
    assert got["self"]["forward (linear.py)"] == 6 and got["self"]["generate (backend.py)"] == 3
    assert got["total"]["generate (backend.py)"] == 9 and got["total"]["main (run.py)"] == 10
    assert frame_key("f (/x/.venv/lib/python3.11/site-packages/torch/a.py:3)") == "f (torch/a.py)"


def test_phase_shapes_and_bound_arithmetic():
    bench = load_bench()
    shapes = bench.phase_shapes({"calls": 3, "mean_prompt": 100.0, "mean_cached": 20.0, "mean_generated": 10.0},
                                batch_size=8, max_batch_tokens=16384)
    assert shapes == {"rows": 3, "m_prefill": 240.0, "m_decode": 3, "prefill_len": 80, "prefill_ctx": 100,
                      "decode_ctx": 105}
    flops = {"body_prefill": 100.0, "body_decode": 10.0, "head": 4.0, "attention_prefill": 6.0,
             "attention_decode": 3.0}
    rates = {"stack": {8: {"cpu": 5.0}, 64: {"cpu": 50.0}}, "head": {8: {"cpu": 2.0}, 64: {"cpu": 20.0}},
             "sdpa_prefill": {"cpu": 3.0}, "sdpa_decode": {"cpu": 1.0}}
    # prefill kinds get the prefill gain (2), decode kinds the decode gain (1)
    got = bench.bound_seconds(flops, {"m_prefill": 64, "m_decode": 8}, rates, gain_prefill=2.0, gain_decode=1.0)
    assert got == {"body_prefill": 1.0, "body_decode": 2.0, "head": 2.0, "attention_prefill": 1.0,
                   "attention_decode": 3.0, "total": 9.0}
