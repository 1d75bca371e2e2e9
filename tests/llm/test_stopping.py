"""Stop strings end generation while it runs; outputs cut at their cap are counted."""
from scgmem.llm import LLM


def test_stop_string_stops_generation_early(tiny_llm):
    prompt = tiny_llm.render("Caroline went hiking")
    [[free]] = tiny_llm.generate([prompt], max_new_tokens=16)
    assert len(free.token_ids) >= 6, "the tiny model should ramble past 6 tokens"
    head = tiny_llm.tokenizer.decode(free.token_ids[:4])
    stop = head[-2:] if len(head.strip()) >= 2 else head
    [[stopped]] = tiny_llm.generate([prompt], max_new_tokens=16, stop=[stop])
    assert len(stopped.token_ids) < len(free.token_ids)  # stopped during generation, not cut after
    assert stop not in stopped.text and not stopped.cut


def test_cut_outputs_are_counted(tiny_model_dir):
    llm = LLM(name="tiny", path=str(tiny_model_dir), context_window=512, memo_entries=4)
    prompts = [llm.render(p) for p in ["Caroline went hiking", "coffee"]]
    with llm.usage.under("probe"):
        gens = llm.generate(prompts, max_new_tokens=3)
        llm.generate(prompts, max_new_tokens=3)  # memo hits count their cuts too
    cut = sum(g[0].cut for g in gens)
    assert cut == sum(len(g[0].token_ids) == 3 for g in gens) and cut > 0
    assert llm.usage.snapshot()["probe"]["cut_at_cap"] == 2 * cut
