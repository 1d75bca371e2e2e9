"""Moving the generation caps from the model configs into the method configs (issue 27) changed
no number: for every model file x method file, the resolved method node (what each method's
constructor receives) and the protocols' nodes (their answer caps) equal the values composed at
f9a0918, before the move, stored in tests/fixtures/resolved_caps_f9a0918.json.

The fixture keeps each method's node under the embedded model in full and, for every other model,
only the keys whose value differs from it; `resolved_table` builds the same shape from today's
configs. Regenerate only on purpose (a cap that is meant to change):
    PYTHONPATH=. python -m tests.harness.test_cap_invariant > tests/fixtures/resolved_caps_f9a0918.json
"""
from __future__ import annotations

import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
FIXTURE = ROOT / "tests" / "fixtures" / "resolved_caps_f9a0918.json"
REFERENCE_MODEL = "smollm2-135m"
# Values the model files leave required (???): any value resolves the method and protocol nodes.
REQUIRED = {"local": ["model.path=/models/any"],
            "openai_compatible": ["model.base_url=http://127.0.0.1:8000/v1", "model.model_id=any"]}


def _stems(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _node(model: str, group: str, choice: str) -> dict:
    import scgmem  # noqa: F401  (the config resolvers, as the runner has them)

    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("config", overrides=[f"model={model}", f"{group}={choice}", *REQUIRED.get(model, [])])
    return OmegaConf.to_container(cfg[group], resolve=True)


def resolved_table() -> dict:
    """{group/choice: {"reference": node under REFERENCE_MODEL, "differs": {model: {key: value}}}}."""
    table = {}
    for group in ("method", "protocol"):
        for choice in _stems(group):
            reference = _node(REFERENCE_MODEL, group, choice)
            differs = {}
            for model in _stems("model"):
                node = _node(model, group, choice)
                assert set(node) == set(reference), f"{group}={choice} under model={model}: other keys"
                changed = {k: v for k, v in node.items() if v != reference[k]}
                if changed:
                    differs[model] = changed
            table[f"{group}/{choice}"] = {"reference": reference, "differs": differs}
    return table


def _without_retired(name: str, node: dict) -> dict:
    """`node` without the settings retired since (scgmem/harness/rundir.py RETIRED: settings that never
    changed a number, such as method.dense_threshold)."""
    from scgmem.harness.rundir import RETIRED

    group = name.split("/")[0]
    return {k: v for k, v in node.items() if not f"{group}.{k}".startswith(RETIRED)}


def test_every_model_and_method_resolves_as_before_the_move():
    before = json.loads(FIXTURE.read_text())
    now = resolved_table()
    assert sorted(now) == sorted(before)
    for name in sorted(before):
        assert now[name]["reference"] == _without_retired(name, before[name]["reference"]), \
            f"{name} under {REFERENCE_MODEL}"
        assert now[name]["differs"] == before[name]["differs"], f"{name}: per-model values"


def test_the_fixture_holds_the_paper_caps():
    """The table the invariant compares against is not empty where the caps act."""
    before = json.loads(FIXTURE.read_text())
    assert before["method/amem"]["differs"]["qwen2.5-3b"]["update_tokens"] == 1000
    assert before["protocol/amem"]["differs"]["llama3.2-1b"] == {"max_new_tokens": 128}
    assert "protocol/locomo" not in {k for k, v in before.items() if v["differs"]}


if __name__ == "__main__":
    print(json.dumps(resolved_table(), indent=1, sort_keys=True))
