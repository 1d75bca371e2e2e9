"""Float32 logits for the calls whose scores a method records and ranks (issue 26, item 3).

On a bf16 model the logits leave `lm_head` in bf16 and transformers casts them to float32
only afterwards. At real instruct models' logit sizes (8-64) the bf16 step is 0.06-0.25, so
SCG-Mem's recorded key log-probs (scgmem/llm/local/schema_processor.py `RawLogprobs`), its quantile
thresholds and its beam scores would carry that rounding: a CPU comparison gave 91 concepts
in bf16 against 71 in fp32 on the same conversation.

`ScoreHead` keeps the model's own head and, while `float32()` is active, computes the head
in float32 instead: the final hidden states cast to float32 times a float32 copy of the
head's weight (exact: it is the bf16 weight widened), accumulated in float32. The body of
the model stays in its dtype; only the head's rounding goes. The copy is made on the first
float32 call (a 151,936 x 2,048 head is 1.2 GB in float32), so runs that never score pay
nothing. On a float32 model it does nothing.

The head's `forward` is replaced on the instance (not the module), so parameter names,
tied weights and `save_pretrained` are unchanged.

Under torch.compile (`model.compile`, scgmem/llm/local/static_decode.py) the replaced `forward` is traced
into the decode graph, and dynamo guards on every Python value it reads. So it reads only `_on`
(two graphs per shape: scored and not) and the float32 copy, made in `float32()` before the first
forward; the call counter is kept there too (issue 40, item 1: a counter bumped inside `forward`
was a new guard value at every step, so every step compiled a new graph until dynamo's recompile
limit sent the model back to eager). Under `device_map=auto` the head may sit on another GPU than
the last layer: accelerate's hook, which moves the input, is bypassed here, so the hidden state is
moved to the copy's device (item 6).
"""
from __future__ import annotations

import contextlib
import types

import torch

SCORE_DTYPES = ("float32", "model")  # model.score_dtype: float32 head for scored calls, or the model's dtype


class ScoreHead:
    """Switches a model's output head to float32 inside `float32()`.

    Args:
        model: a transformers causal LM (its `get_output_embeddings()` is a Linear).
        score_dtype: "float32" (scored calls get float32 logits) or "model" (the model's dtype).
    """

    def __init__(self, model, score_dtype: str = "float32") -> None:
        if score_dtype not in SCORE_DTYPES:
            raise ValueError(f"model.score_dtype={score_dtype!r} is not one of {list(SCORE_DTYPES)}")
        self.model_dtype = next(model.parameters()).dtype
        self.head = model.get_output_embeddings()
        self.active = score_dtype == "float32" and self.model_dtype != torch.float32 and self.head is not None
        self.dtype = "float32" if (score_dtype == "float32" or self.model_dtype == torch.float32) else (
            str(self.model_dtype).removeprefix("torch."))
        self._on = False
        self._weight: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None
        self.calls = 0  # scored calls (`float32()` blocks that switched the head), never counted per forward
        if self.active:
            original = self.head.forward

            def forward(module, hidden: torch.Tensor) -> torch.Tensor:
                if not self._on:
                    return original(hidden)
                weight = self._weight
                return torch.nn.functional.linear(hidden.to(weight.device).float(), weight, self._bias)

            self.head.forward = types.MethodType(forward, self.head)

    @property
    def copy_bytes(self) -> int:
        """Bytes the float32 copy of the head takes once made (0 when the head never switches):
        151,936 x 2,048 x 4 = 1.2 GB for Qwen2.5-3B. A memory plan counts it (`scgmem.llm.local.static_decode`)."""
        if not self.active:
            return 0
        return self.head.weight.numel() * 4 + (0 if getattr(self.head, "bias", None) is None else self.head.bias.numel() * 4)

    def _float_params(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight = self.head.weight
        if self._weight is None or self._weight.device != weight.device:
            self._weight = weight.detach().float()
            bias = getattr(self.head, "bias", None)
            self._bias = None if bias is None else bias.detach().float()
        return self._weight, self._bias

    @contextlib.contextmanager
    def float32(self, on: bool = True):
        """Inside: the head computes in float32 (when `on`, the model is not float32 and the
        score dtype is float32)."""
        switch = on and self.active and not self._on
        if switch:
            self._float_params()  # outside any compiled forward: the copy's creation is no guard there
            self.calls += 1
        previous, self._on = self._on, self._on or (on and self.active)
        try:
            yield
        finally:
            self._on = previous

    def report(self) -> str:
        """The dtype of the logits that scored calls record and rank (for summary.json)."""
        return self.dtype
