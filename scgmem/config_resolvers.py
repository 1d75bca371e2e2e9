"""The `${cap:...}` resolver of the configs: a generation cap chosen by the model's cap profile.

A method or protocol config states its cap for each profile, e.g. in configs/method/amem.yaml
`analyze_tokens: ${cap:{embedded: 96, paper: 384}}`, and a model config says which profile it
wants (`model.cap_profile`). The caps belong to the method (they size its own calls); the model
only says how it generates: `embedded` = the embedded SmolLM2-135M, which rarely stops on its own,
so every call is kept short; `paper` = instruct models that end their outputs with EOS, so a
generous cap costs nothing. A config without `model.cap_profile` (a method file loaded alone, a
judge model given as a mapping) reads `embedded`, the caps the methods had before profiles existed.

Two more resolvers serve the `backend` group (configs/backend/): `${model_source:}`, the model
config's weights as a server or a tokenizer takes them (model.path: a hub id or a folder; the
embedded model: `embedded`, its prepared folder), and `${model_folder:<model>,<backend>}`, a run's
folder name (configs/hydra/default.yaml): the model's, with `@<backend>` when it is served, so local
and served runs of one model never share a folder (and local runs keep their folders of before).

Registered when `scgmem` is imported (scgmem/__init__.py), so every composition that resolves a
config (the runner, the tests, the report's reading of .hydra/config.yaml) has it.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

# The Hydra config folder (configs/ at the repository root): scgmem-run's and the judge's.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

CAP_PROFILES = ("embedded", "paper")
DEFAULT_CAP_PROFILE = "embedded"
RESOLVER = "cap"


def check_cap_profile(profile) -> str:
    if profile not in CAP_PROFILES:
        raise ValueError(f"model.cap_profile={profile!r} is not one of {', '.join(CAP_PROFILES)}")
    return profile


def cap(table, *, _root_: DictConfig):
    """The entry of `table` ({profile: cap}, one per profile) for the root config's model.cap_profile."""
    if not isinstance(table, Mapping) or sorted(table) != sorted(CAP_PROFILES):
        raise ValueError(f"${{{RESOLVER}:...}} needs one cap per profile ({', '.join(CAP_PROFILES)}), got {table!r}")
    return table[check_cap_profile(OmegaConf.select(_root_, "model.cap_profile", default=DEFAULT_CAP_PROFILE))]


def capped_keys(node: DictConfig) -> list[str]:
    """The keys of a config node (unresolved) whose value is a `${cap:...}` of a profile."""
    raw = OmegaConf.to_container(node, resolve=False)
    return sorted(k for k, v in raw.items() if isinstance(v, str) and v.startswith(f"${{{RESOLVER}:"))


class NoModelSource(ValueError):
    """A model config that names no weights: str(e) is one line naming the model and the field."""


def model_source(*, _root_: DictConfig) -> str:
    """The root config's model as a hub id or folder (`model.path`), or `embedded` for the
    embedded GGUF model (its de-quantised folder, scgmem/llm/loading.py); one line otherwise."""
    model = _root_.get("model") or {}
    path = OmegaConf.select(_root_, "model.path", default=None, throw_on_missing=False) \
        if not OmegaConf.is_missing(model, "path") else None
    if isinstance(path, str) and path.strip():
        return path
    if model.get("gguf_package"):
        return "embedded"
    raise NoModelSource(f"model={model.get('name', '?')}: the model config names no hub id or folder "
                        "(set model.path, e.g. model.path=Qwen/Qwen2.5-3B-Instruct or a model folder)")


def model_folder(model: str, backend: str | None = None) -> str:
    """A run's folder name: `qwen2.5-3b` on the local backend, `qwen2.5-3b@vllm` served."""
    return model if backend in (None, "", "local") else f"{model}@{backend}"


def standin(name: str) -> str:
    """The folder of a paper model's stand-in (`make standins`; scgmem/llm/doubles/tiny_real_models.py)."""
    return str(CONFIG_DIR.parent / ".cache" / "standins" / name)


RESOLVERS = {RESOLVER: cap, "model_source": model_source, "model_folder": model_folder, "standin": standin}


def register() -> None:
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
