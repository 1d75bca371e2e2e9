"""How prompts are put into a model's chat template: an explicit system message and a fixed date.

Chat templates carry hidden choices. Qwen2.5's inserts "You are Qwen, created by Alibaba
Cloud..." when a conversation has no system message, SmolLM2's inserts its own, and Llama 3.2's
writes "Today Date: <the day of the run>" from the clock (`strftime_now`), so the same run on
another day gets another prompt, with a current date beside LoCoMo's temporal questions.

A `ChatPolicy` removes both: every conversation without a system message gets
`system_prompt` (the same text for every model), and templates that read the date get
`date` (as `date_string`, Llama's variable, and through `strftime_now`, whose clock reads
that date while a prompt is rendered: transformers turns callables handed to a template into
inert placeholders, so the clock itself is frozen). The protocol chooses the policy (configs/protocol/*.yaml);
`probe_sha256` hashes a rendered probe conversation, so the summary shows whether two runs
rendered prompts alike.

Example::

    policy = ChatPolicy(system_prompt="You are a helpful assistant.", date="2024-07-26")
    text = render_messages(tokenizer, [{"role": "user", "content": "hi"}], policy)
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass

from transformers.utils import chat_template_utils

# One neutral sentence for every model (Qwen2.5's default ends with it). It stands where a local
# template would otherwise insert its own: LoCoMo's code sends no system message to its API model,
# and A-MEM's sends its own ("You must respond with a JSON object"), which protocol=amem with
# answer_format=json passes as the conversation's system message, so this default is not added.
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
# Llama 3.2's template falls back to this date when it has no clock; LoCoMo's sessions lie in 2022-2023.
DEFAULT_DATE = "2024-07-26"
DATE_STRING_FORMAT = "%d %b %Y"  # Llama 3.x templates: strftime_now("%d %b %Y") -> "26 Jul 2024"

PROBE = [{"role": "user", "content": "When did Caroline go to the LGBTQ support group?"}]


@dataclass(frozen=True)
class ChatPolicy:
    """Args:
        system_prompt: the system message of every conversation that has none; None keeps
            the template's own behaviour (not recommended: it differs between models).
        date: ISO date (YYYY-MM-DD) shown to templates that read the date.
    """

    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    date: str = DEFAULT_DATE

    def __post_init__(self) -> None:
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise ValueError(f"protocol.system_prompt must be a string or null, got {self.system_prompt!r}")
        try:
            dt.date.fromisoformat(str(self.date))
        except ValueError:
            raise ValueError(f"protocol.date must be an ISO date (YYYY-MM-DD), got {self.date!r}") from None

    @property
    def day(self) -> dt.date:
        return dt.date.fromisoformat(str(self.date))

    def template_kwargs(self) -> dict:
        """Variables handed to the template (Llama 3.x reads `date_string` before its clock)."""
        return {"date_string": self.day.strftime(DATE_STRING_FORMAT)}

    def with_system(self, messages: list[dict]) -> list[dict]:
        if self.system_prompt is None or (messages and messages[0].get("role") == "system"):
            return messages
        return [{"role": "system", "content": self.system_prompt}, *messages]

    def as_dict(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def frozen_clock(day: dt.date):
    """While rendering, the templates' `strftime_now` (datetime.now() in transformers'
    chat_template_utils) reads `day` at midnight."""
    real = getattr(chat_template_utils, "datetime", None)
    if real is None:  # another transformers layout: only `date_string` fixes the date there
        yield
        return

    class Frozen(real):
        @classmethod
        def now(cls, tz=None):
            return cls.combine(day, dt.time(0, 0), tzinfo=tz)

    chat_template_utils.datetime = Frozen
    try:
        yield
    finally:
        chat_template_utils.datetime = real


def render_messages(tokenizer, messages: list[dict], policy: ChatPolicy, *,
                    add_generation_prompt: bool = True) -> str:
    """`messages` rendered with the tokenizer's chat template under `policy` (a readable
    "role: content" transcript for tokenizers without a template)."""
    messages = policy.with_system(messages)
    if tokenizer.chat_template:
        with frozen_clock(policy.day):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                 **policy.template_kwargs())
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + ("assistant: " if add_generation_prompt else "")


def template_report(tokenizer, policy: ChatPolicy) -> dict:
    """For summary.json: the policy, a hash of the template source and of a rendered probe."""
    template = tokenizer.chat_template or ""
    if isinstance(template, dict):  # several named templates
        template = "\n".join(f"{k}:{v}" for k, v in sorted(template.items()))
    probe = render_messages(tokenizer, list(PROBE), policy)
    return {**policy.as_dict(),
            "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
            "probe_sha256": hashlib.sha256(probe.encode()).hexdigest(),
            "probe": probe}


def tokenizer_sha256(tokenizer) -> str:
    """sha256 of a tokenizer as it tokenizes: a fast tokenizer's whole serialisation (vocabulary,
    merges, normaliser, added tokens), else its vocabulary and special tokens. A served run's
    memory-cache key holds it: the model id alone does not say which tokenizer built the prompts."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(
        [sorted(tokenizer.get_vocab().items()), tokenizer.all_special_tokens], default=str)
    return hashlib.sha256(text.encode()).hexdigest()


END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>")


def eos_token_ids(tokenizer, generation_eos=None) -> list[int]:
    """Every id that ends a generation: the tokenizer's EOS, the generation config's, and the chat
    end tokens the vocabulary has. The local and the served backend read it alike, so a beam
    search keeps as many candidates on either (transformers keeps `max(2, 1 + n_eos) * b`)."""
    ids = {tokenizer.eos_token_id}
    ids.update(generation_eos if isinstance(generation_eos, list) else [generation_eos])
    for tok in END_TOKENS:
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid is not None:
            ids.add(tid)
    return sorted(i for i in ids if i is not None)
