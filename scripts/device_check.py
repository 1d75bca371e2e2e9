"""The paper models' code path on a device, with random weights of their exact shapes.

    python -m scripts.device_check --out OUT_DIR [--device cuda] [--shapes ...] [--methods ...]

No weights can reach the check machine, so each shape (from the models' published
config.json) is built with random weights in bf16, saved as a Hugging Face folder with a
tokenizer trained here on the LoCoMo text (ChatML template for Qwen, Llama 3's template with
its date logic for Llama), and run through `scgmem.harness.run.evaluate` with `model=local`: the same
loading (device_map auto), templates, generation and methods as the hub models. A random
MiniLM-shaped sentence embedder stands in for the bundled one. Random weights say nothing
about accuracy: this checks that every method runs and measures its speed. Per shape and
method it writes OUT_DIR/<shape>.json: prefill and decode tokens/s (forward calls timed with
device syncs), mean rows per generate call, peak device memory, wall time. The probes of
scripts/device_probes.py (real tokenizers; on the first, largest shape: one ~26K-token
full-context batch at the config's own sizes, and batch invariance) go to OUT_DIR/probes.json
as each is measured. A method that fails or is skipped (time budget) fails the check.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

from scripts import device_probes
from scgmem.method_lists import all_methods

ROOT = Path(__file__).resolve().parents[1]

# Published config.json values (hub: Qwen/Qwen2.5-*-Instruct, meta-llama/Llama-3.2-*-Instruct).
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
SHAPES = {
    "qwen2.5-1.5b": dict(family="qwen", hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, intermediate_size=8960, vocab_size=151936, rope_theta=1e6,
                         max_position_embeddings=32768, context_window=32768),
    "qwen2.5-3b": dict(family="qwen", hidden_size=2048, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, intermediate_size=11008, vocab_size=151936, rope_theta=1e6,
                       max_position_embeddings=32768, context_window=32768),
    "llama3.2-1b": dict(family="llama", hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, intermediate_size=8192, vocab_size=128256, rope_theta=5e5,
                        max_position_embeddings=131072, context_window=131072, rope_scaling=LLAMA3_ROPE),
    "llama3.2-3b": dict(family="llama", hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                        num_key_value_heads=8, intermediate_size=8192, vocab_size=128256, rope_theta=5e5,
                        max_position_embeddings=131072, context_window=131072, rope_scaling=LLAMA3_ROPE),
    "tiny": dict(family="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=4096, rope_theta=5e5, max_position_embeddings=8192,
                 context_window=8192, rope_scaling=LLAMA3_ROPE),
}
METHODS = [m for m in all_methods() if m not in ("rag_locomo", "last_turns")]  # scgmem/method_lists.py
# Random weights never emit EOS, so every call runs to its cap: the check caps every call at
# `--cap` tokens (recorded in the JSON) to fit four shapes x seven methods in its time.
SPECIALS = {"qwen": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]}
TEMPLATES = {
    "qwen": ("{%- if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
             "You are a helpful assistant.<|im_end|>\n{%- endif %}{%- for m in messages %}<|im_start|>{{ m['role'] }}\n"
             "{{ m['content'] }}<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"),
    "llama": ("{{- bos_token }}{%- if not date_string is defined %}{%- if strftime_now is defined %}"
              "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}{%- set date_string = '26 Jul 2024' %}"
              "{%- endif %}{%- endif %}{%- if messages[0]['role'] == 'system' %}"
              "{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}"
              "{%- else %}{%- set system_message = '' %}{%- endif %}"
              "{{- '<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: '"
              " + date_string + '\n\n' + system_message + '<|eot_id|>' }}{%- for m in messages %}"
              "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content']|trim + '<|eot_id|>' }}"
              "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
              "{%- endif %}"),
}


def locomo_text(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    lines = []
    for sample in data[:3]:
        for key, turns in sample["conversation"].items():
            if isinstance(turns, list):
                lines += [f"{t.get('speaker', '')}: {t.get('text', '')}" for t in turns]
    return lines


def build_tokenizer(family: str, corpus: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = SPECIALS[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if family == "qwen":
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    else:
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                       pad_token="<|end_of_text|>")
    fast.chat_template = TEMPLATES[family]
    return fast


def build_model_dir(name: str, shape: dict, corpus: list[str], folder: Path, device: str) -> Path:
    """Random weights of `shape` in bf16 (float32 on CPU), saved with a trained tokenizer."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    shape = dict(shape)
    family, _ = shape.pop("family"), shape.pop("context_window")
    tokenizer = build_tokenizer(family, corpus, vocab=min(8000, shape["vocab_size"]))
    tokenizer.save_pretrained(folder)
    ids = {k: tokenizer.convert_tokens_to_ids(t) for k, t in (("eos_token_id", tokenizer.eos_token),
                                                              ("pad_token_id", tokenizer.pad_token))}
    cls = Qwen2Config if family == "qwen" else LlamaConfig
    extra = {"attention_bias": False} if family == "llama" else {}
    config = cls(**shape, **ids, tie_word_embeddings=True, rms_norm_eps=1e-6 if family == "qwen" else 1e-5, **extra)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():  # ids the tokenizer never makes score 0, below most real tokens
        model.get_input_embeddings().weight[len(tokenizer):] = 0
    model.generation_config.repetition_penalty = 1.05  # a hidden default the harness must neutralise
    model.save_pretrained(folder, safe_serialization=True)
    del model
    return folder


def build_embedder_dir(corpus: list[str], folder: Path) -> Path:
    """A MiniLM-L6-shaped sentence embedder (hidden 384, 6 layers) with random weights."""
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer

    tokenizer = build_tokenizer("qwen", corpus, vocab=4000)
    raw = folder / "bert"
    tokenizer.save_pretrained(raw)
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536, max_position_embeddings=512,
                         pad_token_id=tokenizer.pad_token_id)).save_pretrained(raw)
    word = Transformer(str(raw), max_seq_length=256)
    SentenceTransformer(modules=[word, Pooling(384, "mean")]).save(str(folder / "st"))
    return folder / "st"


class ForwardMeter:
    """Times the model's forward calls (device-synchronised): prefill = calls feeding more than one
    position per row, decode = one position per row; counts rows per generate call."""

    def __init__(self, model, device: str) -> None:
        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        self.reset()
        model.register_forward_pre_hook(self._before, with_kwargs=True)
        model.register_forward_hook(self._after, with_kwargs=True)
        generate = model.generate

        def counted_generate(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.generate_calls += 1
            self.generate_rows += int(ids.shape[0])
            return generate(*args, **kwargs)

        model.generate = counted_generate

    def reset(self) -> None:
        self.prefill_tokens = self.decode_tokens = self.generate_calls = self.generate_rows = 0
        self.prefill_s = self.decode_s = 0.0
        self._t0 = 0.0

    def _before(self, module, args, kwargs):
        self.sync()
        self._t0 = time.perf_counter()

    def _after(self, module, args, kwargs, output):
        self.sync()
        ids = kwargs.get("input_ids", args[0] if args else None)
        elapsed = time.perf_counter() - self._t0
        if ids is None:
            return
        if ids.shape[1] > 1:
            self.prefill_tokens += int(ids.numel())
            self.prefill_s += elapsed
        else:
            self.decode_tokens += int(ids.shape[0])
            self.decode_s += elapsed

    def report(self) -> dict:
        return {"prefill_tokens": self.prefill_tokens, "prefill_s": round(self.prefill_s, 3),
                "prefill_tokens_per_s": round(self.prefill_tokens / self.prefill_s, 1) if self.prefill_s else None,
                "decode_tokens": self.decode_tokens, "decode_s": round(self.decode_s, 3),
                "decode_tokens_per_s": round(self.decode_tokens / self.decode_s, 1) if self.decode_s else None,
                "generate_calls": self.generate_calls,
                "mean_rows_per_generate": round(self.generate_rows / self.generate_calls, 2)
                if self.generate_calls else None}


def run_method(cfg_overrides: list[str], run_dir: Path) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from scgmem.harness import run as runner

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[*cfg_overrides, f"hydra.run.dir={run_dir}"], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        HydraConfig.instance().set_config(cfg)
        return runner.evaluate(cfg)


def cap_overrides(cap: int, method: str) -> list[str]:
    """`cap` for every call the configs cap per profile (a `${cap:...}` value, scgmem/config_resolvers.py):
    the answers of the default protocol (amem) and `method`'s own calls; MemoryBank's summaries too."""
    if cap <= 0:
        return []
    from omegaconf import OmegaConf

    from scgmem.config_resolvers import capped_keys

    out = [f"protocol.{key}={cap}" for key in capped_keys(OmegaConf.load(ROOT / "configs" / "protocol" / "amem.yaml"))]
    out += [f"method.{key}={cap}" for key in capped_keys(OmegaConf.load(ROOT / "configs" / "method" / f"{method}.yaml"))]
    return out + ([f"method.summary_max_new_tokens={cap}"] if method == "memorybank" else [])


def run_probe(name: str, probes: dict, write_probes, fn, *a, **kw) -> None:
    """One probe into `probes` (its failure recorded, not raised), written at once."""
    start = time.perf_counter()
    try:
        probes[name] = fn(*a, **kw)
    except Exception as e:  # a probe's failure (e.g. out of memory) must not hide the methods
        probes[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    probes[name]["probe_s"] = round(time.perf_counter() - start, 2)
    write_probes()
    print(f"[device_check] probe {name}: ok={probes[name].get('ok')} {probes[name]['probe_s']} s", flush=True)


def check_shape(name: str, args, corpus: list[str], embedder_dir: Path, deadline: float, write,
                probes: dict | None = None, write_probes=None) -> dict:
    from hydra import compose, initialize_config_dir

    from scgmem.harness import run as runner

    shape = SHAPES[name]
    work = Path(args.work) / name
    start = time.perf_counter()
    build_model_dir(name, shape, corpus, work / "model", args.device)
    result = {"shape": name, **{k: v for k, v in shape.items() if k != "rope_scaling"}, "device": args.device,
              "cap": args.cap or None, "build_s": round(time.perf_counter() - start, 1), "methods": {}}
    model_choice = "local" if name == "tiny" else name
    base = [f"model={model_choice}", f"model.path={work / 'model'}", "data.samples=[conv-26]",
            f"data.max_sessions={args.sessions}", f"data.questions_per_category={args.questions}",
            "run.progress=false", "run.use_memory_cache=false", f"run.cache_dir={work / 'cache'}", "logger=none",
            "embedder.package=null", f"++embedder.path={embedder_dir}", "embedder.name=random-minilm",
            f"embedder.device={'cuda' if args.device.startswith('cuda') else 'cpu'}"]
    if name == "tiny":
        base.append(f"model.context_window={shape['context_window']}")
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        # the jobs' model node (the caps are method and protocol values), so that every job reuses this one load
        model_cfg = compose("config", overrides=base).model
    start = time.perf_counter()
    llm = runner._shared("model", model_cfg, f"model={model_choice}")  # the jobs below reuse this load
    result["load_s"] = round(time.perf_counter() - start, 1)
    meter = ForwardMeter(llm.model, args.device)
    cuda = args.device.startswith("cuda")
    if probes is not None:  # the largest shape: its long-context memory is the open question
        if "long" in args.probes:
            run_probe("long_context", probes, write_probes, device_probes.long_context_probe, llm, corpus, meter,
                      args.device, tokens=args.long_tokens)
            probes["long_context"]["shape"] = name
        if "invariance" in args.probes:
            run_probe("batch_invariance", probes, write_probes, device_probes.batch_invariance_probe, llm, corpus)
            probes["batch_invariance"]["shape"] = name
        write_probes()
        llm.begin_job()
    for method in args.methods:
        if time.perf_counter() > deadline:
            result["methods"][method] = {"ok": None, "skipped": "time budget of the check spent"}
            continue
        meter.reset()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            summary = run_method([*base, f"method={method}", *cap_overrides(args.cap, method)], work / "runs" / method)
            entry = {"ok": True, "n_questions": summary["n_questions"], "outputs_cut_at_cap": summary["outputs_cut_at_cap"],
                     "tokens": summary["tokens"], "timing": summary["timing"],
                     "repetition_penalty": sorted({c["settings"]["repetition_penalty"]
                                                   for c in summary["generation"]["calls"].values()}),
                     "chat_probe_sha256": summary["generation"]["chat_template"]["probe_sha256"]}
        except Exception as e:  # one method's failure must not hide the others'
            entry = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        entry["wall_s"] = round(time.perf_counter() - start, 2)
        entry.update(meter.report())
        entry["same_model"] = runner._LOADED["model"][1] is llm  # the meter watched the model the job used
        if cuda:
            entry["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["methods"][method] = entry
        write(result)  # after every method: a check stopped at its time limit keeps what it measured
        print(f"[device_check] {name} {method}: ok={entry['ok']} {entry['wall_s']} s "
              f"prefill {entry['prefill_tokens_per_s']} tok/s decode {entry['decode_tokens_per_s']} tok/s "
              f"rows/call {entry['mean_rows_per_generate']}", flush=True)
    runner._LOADED.pop("model", None)
    del llm, meter
    if cuda:
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="llama3.2-3b,qwen2.5-3b,qwen2.5-1.5b,llama3.2-1b", help="largest first")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--questions", type=int, default=1, help="questions per category")
    parser.add_argument("--budget-s", type=float, default=400, help="no new method starts after this")
    parser.add_argument("--cap", type=int, default=32, help="max_new_tokens of every call (0 = the configs' caps)")
    parser.add_argument("--work", default="/tmp/scgmem-device-check")
    parser.add_argument("--probes", default="real,long,invariance", help="device_probes.py probes to run")
    parser.add_argument("--long-tokens", type=int, default=26000, help="prompt tokens of the long-context probe")
    args = parser.parse_args(argv)
    args.probes = [p for p in args.probes.split(",") if p]
    args.methods = [m for m in args.methods.split(",") if m]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + args.budget_s
    import transformers

    environment = {"torch": torch.__version__, "transformers": transformers.__version__, "device": args.device,
                   "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None}
    corpus = locomo_text(ROOT / "data" / "locomo10.json")
    probes: dict = {"environment": environment}

    def write_probes():
        (out / "probes.json").write_text(json.dumps(probes, indent=2))

    if "real" in args.probes:
        run_probe("real_tokenizers", probes, write_probes, device_probes.real_tokenizer_probe, args.device,
                  Path(args.work) / "real")
    embedder_dir = build_embedder_dir(corpus, Path(args.work) / "embedder")
    failed = sum(1 for k, p in probes.items() if k != "environment" and p.get("ok") is not True)
    for i, name in enumerate(args.shapes.split(",")):
        def write(result, name=name):
            (out / f"{name}.json").write_text(json.dumps({"environment": environment, **result}, indent=2))

        if time.perf_counter() > deadline:
            write({"shape": name, "skipped": "time budget of the check spent", "methods": {}})
            failed += 1  # a shape not checked fails the check
            continue
        result = check_shape(name, args, corpus, embedder_dir, deadline, write,
                             *((probes, write_probes) if i == 0 else ()))
        write(result)
        failed += sum(1 for m in result["methods"].values() if m["ok"] is not True)  # failed or skipped
        failed += sum(1 for k in ("long_context", "batch_invariance")
                      if i == 0 and k in probes and probes[k].get("ok") is not True)
    print(f"[device_check] wrote {out}; {failed} method run(s), shape(s) or probe(s) failed or skipped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
