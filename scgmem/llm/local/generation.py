"""Every decoding setting of a generate call, stated explicitly, and the stopping rules.

transformers fills each setting a call leaves unset from the model's `generation_config`
(generation_config.json of the checkpoint). Qwen2.5-Instruct's sets repetition_penalty=1.05,
top_k=20, top_p=0.8, temperature=0.7: applied under the harness, the penalty would change
every answer and every log-probability SCG-Mem records. So the backend

- replaces the model's generation_config by a neutral one that keeps only the special-token
  ids (`neutralise`; what it dropped is reported in the summary), and
- passes a complete `GenerationConfig` to every call (`explicit_config`): greedy or beam
  search, no penalties, no n-gram blocking, no warpers. Sampling is the backend's own seeded
  Gumbel-max processor inside greedy decoding, so `do_sample` is always False.

What each kind of call ran with is recorded by `scgmem.llm.usage.SettingsLog` (every backend's).
"""
from __future__ import annotations

from transformers import GenerationConfig

SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
BOOKKEEPING_KEYS = ("transformers_version", "_from_model_config", "use_cache", "output_attentions", "output_hidden_states")

# The settings that change which tokens come out, at their neutral values.
NEUTRAL = {
    "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "min_p": None,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "min_length": 0,
    "min_new_tokens": None, "renormalize_logits": False, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "remove_invalid_values": False, "exponential_decay_length_penalty": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "sequence_bias": None, "diversity_penalty": 0.0, "num_beam_groups": 1,
    "guidance_scale": None, "stop_strings": None, "max_length": None, "max_time": None,
}


def neutralise(model) -> dict:
    """Replace `model.generation_config` by a neutral one with the same special-token ids.

    Returns the settings it dropped (the checkpoint's own decoding defaults), for the summary.
    """
    own = model.generation_config.to_diff_dict() if model.generation_config is not None else {}
    keep = {k: own[k] for k in SPECIAL_TOKEN_KEYS if own.get(k) is not None}
    model.generation_config = GenerationConfig(**keep)
    return {k: v for k, v in sorted(own.items()) if k not in SPECIAL_TOKEN_KEYS and k not in BOOKKEEPING_KEYS}


def explicit_config(*, max_new_tokens: int, num_beams: int, num_return_sequences: int, length_penalty: float,
                    eos_token_ids: list[int], pad_token_id: int) -> GenerationConfig:
    """The complete configuration of one generate call (nothing left for transformers to fill)."""
    beams = num_beams > 1
    return GenerationConfig(
        **NEUTRAL, max_new_tokens=max_new_tokens, num_beams=num_beams, num_return_sequences=num_return_sequences,
        # early_stopping=False: beam search stops when no running beam can beat the worst finished
        # one (exact with length_penalty=0, where scores only fall); True stops at the first
        # num_beams finished hypotheses, which need not be the best num_beams.
        length_penalty=length_penalty if beams else 1.0, early_stopping=False,
        eos_token_id=list(eos_token_ids), pad_token_id=pad_token_id, use_cache=True,
        return_dict_in_generate=True, output_scores=beams)


def effective_settings(config: GenerationConfig) -> dict:
    """The token-choosing settings of `config`, as recorded in the summary."""
    values = config.to_dict()
    keys = ("do_sample", "num_beams", "length_penalty", "early_stopping", *NEUTRAL)
    return {k: values.get(k) for k in sorted(set(keys)) if k not in ("max_length", "stop_strings")}
