"""Generation caps per model family: the paper models' configs raise the methods' caps."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from scgmem.harness.run import split_protocol

CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")


def composed(*overrides):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b"])
def test_paper_models_get_generous_caps(model):
    amem = composed(f"model={model}", "method=amem").method
    assert amem.analyze_tokens == 384 and amem.update_tokens == 1000
    assert composed(f"model={model}", "method=memgpt").method.step_tokens == 512
    assert composed(f"model={model}", "method=readagent").method.gist_max_new_tokens == 384
    assert composed(f"model={model}", "method=scgmem").method.free_max_new_tokens == 48
    node, chat = split_protocol(composed(f"model={model}", "protocol=amem"))
    assert node.max_new_tokens == 128 and "chat" not in node and chat["date"] == "2024-07-26"
    assert split_protocol(composed(f"model={model}", "protocol=locomo"))[0].max_new_tokens == 32  # official


def test_the_embedded_model_keeps_the_small_caps():
    cfg = composed("model=smollm2-135m", "method=amem")
    assert cfg.method.analyze_tokens == 96 and cfg.method.update_tokens == 256
    assert split_protocol(cfg)[0].max_new_tokens == 50
