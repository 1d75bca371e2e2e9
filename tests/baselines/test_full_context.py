"""Full context: newest turns within the (rounded) budget, DATE headers, shared transcripts."""
import numpy as np
import pytest

from scgmem.baselines.full_context import FullContext
from scgmem.llm.doubles.fake import ScriptedLLM
from tests.baselines import conversation

CONV = conversation([[("Caroline", f"turn {s}.{i} about hiking and pottery")
                      for i in range(1, 11)] for s in range(1, 6)])
RNG = np.random.default_rng(0)


def built(budget_step):
    method = FullContext(ScriptedLLM(["x"]), budget_step=budget_step)
    method.ingest(CONV, RNG)
    return method


def test_everything_fits_in_order_with_headers():
    recall = built(1).recall("q", budget_tokens=10_000, rng=RNG)
    assert recall.dia_ids == [t.dia_id for t in CONV.turns]
    assert recall.context.count("DATE:") == 5
    assert recall.context.index("turn 1.1 ") < recall.context.index("turn 5.10 ")


def test_oldest_turns_drop_first_and_the_budget_holds():
    method = built(1)
    recall = method.recall("q", budget_tokens=120, rng=RNG)
    assert recall.dia_ids and recall.dia_ids[-1] == "D5:10" and "D1:1" not in recall.dia_ids
    assert method.llm.count_tokens(recall.context) <= 120


def test_budget_step_gives_nearby_budgets_one_transcript():
    rounded = built(64)
    contexts = {rounded.recall("q", budget_tokens=b, rng=RNG).context for b in range(130, 192)}
    assert len(contexts) == 1  # 130..191 all round down to 128
    exact = built(1)
    assert len({exact.recall("q", budget_tokens=b, rng=RNG).context for b in range(130, 192)}) > 1
    assert rounded.recall("q", budget_tokens=191, rng=RNG).context == exact.recall("q", budget_tokens=128, rng=RNG).context


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_budget_step_is_refused(bad):
    with pytest.raises(ValueError, match="method.budget_step"):
        FullContext(ScriptedLLM(["x"]), budget_step=bad)
