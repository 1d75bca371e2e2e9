"""Generation caps per cap profile: each method and protocol config states its caps for the
embedded model and for the paper models; a model config only names its profile (model.cap_profile)."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from scgmem.config_resolvers import CAP_PROFILES, capped_keys
from scgmem.harness.run import split_protocol

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PAPER_MODELS = ["qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b"]


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_paper_models_get_generous_caps(model):
    assert composed(f"model={model}").model.cap_profile == "paper"
    amem = composed(f"model={model}", "method=amem").method
    assert amem.analyze_tokens == 384 and amem.update_tokens == 1000
    assert composed(f"model={model}", "method=memgpt").method.step_tokens == 512
    assert composed(f"model={model}", "method=readagent").method.gist_max_new_tokens == 384
    assert composed(f"model={model}", "method=scgmem").method.free_max_new_tokens == 48
    node, chat = split_protocol(composed(f"model={model}", "protocol=amem"))
    assert node.max_new_tokens == 128 and "chat" not in node and chat["date"] == "2024-07-26"
    assert split_protocol(composed(f"model={model}", "protocol=locomo"))[0].max_new_tokens == 32  # official


@pytest.mark.parametrize("model", ["smollm2-135m", "local", "openai_compatible"])
def test_the_embedded_model_and_unknown_models_keep_the_small_caps(model):
    cfg = composed(f"model={model}", "method=amem")
    assert cfg.model.cap_profile == "embedded"
    assert cfg.method.analyze_tokens == 96 and cfg.method.update_tokens == 256
    assert split_protocol(cfg)[0].max_new_tokens == 50


def test_a_user_model_takes_the_paper_caps_by_its_profile():
    cfg = composed("model=local", "model.path=/models/qwen", "model.cap_profile=paper", "method=memgpt")
    assert cfg.method.step_tokens == 512 and split_protocol(cfg)[0].max_new_tokens == 128


def test_an_unknown_profile_is_refused_naming_the_field():
    cfg = composed("model.cap_profile=large", "method=scgmem")
    with pytest.raises(Exception, match="model.cap_profile='large' is not one of embedded, paper"):
        OmegaConf.to_container(cfg.method, resolve=True)


def test_a_cap_table_must_name_every_profile():
    node = OmegaConf.create({"model": {"cap_profile": "paper"}, "m": {"a": "${cap:{paper: 9}}"}})
    with pytest.raises(Exception, match="one cap per profile"):
        _ = node.m.a


def test_model_configs_name_no_method_internals():
    """No model file holds a cap of a method: the `caps` block is gone and no model key is a capped key."""
    capped = {key for group in ("method", "protocol") for path in (CONFIGS / group).glob("*.yaml")
              for key in capped_keys(OmegaConf.load(path))}
    assert {"analyze_tokens", "step_tokens", "gist_max_new_tokens", "max_new_tokens"} <= capped
    for path in sorted((CONFIGS / "model").rglob("*.yaml")):
        node = OmegaConf.load(path)
        assert "caps" not in node and not capped & set(node), path.name
        assert node.get("cap_profile", "paper") in CAP_PROFILES, path.name  # the paper files inherit it


def test_a_served_model_refuses_an_unknown_profile():
    from scgmem.llm.served.openai_compatible import OpenAICompatibleLLM

    with pytest.raises(ValueError, match="model.cap_profile='big'"):  # before any request to the server
        OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m", cap_profile="big")


def test_the_local_backend_reports_its_profile_and_refuses_an_unknown_one(tiny_model_dir):
    from scgmem.llm import LLM

    report = LLM(name="tiny", path=str(tiny_model_dir), cap_profile="paper").generation_report()
    assert report["cap_profile"] == "paper" and "caps" not in report  # summary.json "generation"
    with pytest.raises(ValueError, match="model.cap_profile='big'"):
        LLM(name="tiny", path=str(tiny_model_dir), cap_profile="big")
