"""The `${cap:...}` resolver of the configs: a generation cap chosen by the model's cap profile.

A method or protocol config states its cap for each profile, e.g. in configs/method/amem.yaml
`analyze_tokens: ${cap:{embedded: 96, paper: 384}}`, and a model config says which profile it
wants (`model.cap_profile`). The caps belong to the method (they size its own calls); the model
only says how it generates: `embedded` = the embedded SmolLM2-135M, which rarely stops on its own,
so every call is kept short; `paper` = instruct models that end their outputs with EOS, so a
generous cap costs nothing. A config without `model.cap_profile` (a method file loaded alone, a
judge model given as a mapping) reads `embedded`, the caps the methods had before profiles existed.

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


def register() -> None:
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, cap)
