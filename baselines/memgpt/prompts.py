"""What the MemGPT agent reads and writes: its prompts, alerts and the parser of its replies.

docs/methods.md, section MemGPT; after MemGPT [G1]:
`memgpt/prompts/system/memgpt_chat.txt` (the system prompt, adapted to silent observation of
a two-person chat), `memgpt/constants.py` (alert strings), `memgpt/prompts/gpt_summarize.py`
(the summariser, verbatim), `memgpt/local_llm/llm_chat_completion_wrappers/chatml.py` (the
``{"function":`` prefix and function returns as assistant messages), and our regex
fallback for replies that no JSON repair can save.
"""
from __future__ import annotations

import json
import re
from typing import Any

from scgmem.baselines.json_repair import clean_json
from scgmem.api import Turn

PROMPT_VERSION = "memgpt-2"  # bump when a prompt changes: it is part of the cache key
# chatml.py's assistant_prefix_extra, compacted, and carried on to the opening quote of the name:
# a prefix ending in its lone space would end on a token that Llama-3, Qwen2 and SmolLM2 never
# produce there (in running text the space and the quote are one token, ' "'); see
# tests/llm/test_primed_prefixes.py.
PREFIX = '{"function": "'
NON_USER = "[This is an automated system message hidden from the user] "  # constants.NON_USER_MSG_PREFIX

SYSTEM_PROMPT = """You are MemGPT, a memory agent. You silently observe a multi-session chat between {a} and {b}; \
you will be questioned about it later.
Your context is limited, so you manage your own memory:
- Core memory (below) is always visible. Keep key facts about both people in <human>; \
edit it with core_memory_append and core_memory_replace.
- Recall memory holds the whole transcript. Search it with conversation_search (text) and conversation_search_date.
- Archival memory holds the facts you insert with archival_memory_insert; search it with archival_memory_search.
Old messages leave your context when it is full; they stay in recall memory.
Think in at most 50 words (inner_thoughts). Emit exactly one JSON function call per step:
{{"function": "<name>", "params": {{"inner_thoughts": "...", "<argument>": "...", "request_heartbeat": true}}}}
When asked a question, search your memory first, then answer with send_message."""

PERSONA = ("I am a silent observer with a perfect memory system. "
           "I track facts, events and dates about the people I observe.")
HUMAN = "{a} and {b}, two friends who chat over many sessions."

WARNING = NON_USER + ("The conversation history will soon reach its maximum length and be trimmed. If there is any "
                      "important new information you would like to save, you should save it immediately by calling "
                      "function core_memory_append, core_memory_replace, or archival_memory_insert.")
SESSION_END = NON_USER + ("The chat session has ended. Store what matters from it now by calling core_memory_append, "
                          "core_memory_replace, or archival_memory_insert.")
REQ_HEARTBEAT = NON_USER + "Function called using request_heartbeat=true, returning control"
FAILED_HEARTBEAT = NON_USER + "Function call failed, returning control"

# memgpt/prompts/gpt_summarize.py (WORD_LIMIT = 100), verbatim.
SUMMARY_SYSTEM = """Your job is to summarize a history of previous messages in a conversation between an AI persona \
and a human.
The conversation you are given is a from a fixed context window and may not be complete.
Messages sent by the AI are marked with the 'assistant' role.
The AI 'assistant' can also make calls to functions, whose outputs can be seen in messages with the 'function' role.
Things the AI says in the message content are considered inner monologue and are not seen by the user.
The only AI messages seen by the user are from when the AI uses 'send_message'.
Messages the user sends are in the 'user' role.
The 'user' role is also used for important system events, such as login events and heartbeat events \
(heartbeats run the AI's program without user action, allowing the AI to act without prompting from the user \
sending them a message).
Summarize what happened in the conversation from the perspective of the AI (use the first person).
Keep your summary less than 100 words, do NOT exceed this word limit.
Only output the summary, do NOT include anything else in your output."""

# Queue message kinds -> chat roles (chatml.py: function returns go out as assistant
# messages prefixed "FUNCTION RETURN:", since the function role is disallowed).
ROLE = {"turn": "user", "question": "user", "alert": "user", "heartbeat": "user", "summary": "user",
        "call": "assistant", "result": "assistant"}
USER_MESSAGES = ("turn", "question")  # type "user_message" for heartbeat_correction
ARGS = ("message", "name", "content", "old_content", "new_content", "query", "page", "start_date", "end_date",
        "inner_thoughts")
_NAME = re.compile(r"\w+")  # a function name; prose after the primed quote is no call
QUESTION_STOP = set("what when where who whom why how which did does do is are was were the a an of to in on for "
                    "and or with has have had would could should likely about from that this their they she he "
                    "her his its it be been by at as".split())


def parse_call(raw: str) -> tuple[dict[str, Any] | None, str]:
    """A function call from the primed reply -> ({"function", "params"}, how).

    how: "json" (clean_json), "regex" (our tiny-LLM fallback: `"function": "name"` and one
    regex per argument), or "none".
    """
    data = clean_json(raw)
    if data is not None and isinstance(data.get("function"), dict):  # nested: the prefix was repeated
        data = data["function"]
    if data is not None and isinstance(data.get("function"), str) and _NAME.fullmatch(data["function"].strip()):
        params = data.get("params")
        if not isinstance(params, dict):  # arguments at top level
            params = {k: v for k, v in data.items() if k not in ("function", "params")}
        return {"function": data["function"].strip(), "params": dict(params)}, "json"
    match = re.search(r'"function"\s*:\s*"(\w+)"', raw)
    if not match:
        return None, "none"
    params: dict[str, Any] = {}
    for arg in ARGS + ("request_heartbeat",):
        text = re.search(rf'"{arg}"\s*:\s*"((?:[^"\\]|\\.)*)"?', raw)
        if text:
            try:
                params[arg] = json.loads(f'"{text.group(1)}"')
            except json.JSONDecodeError:
                params[arg] = text.group(1)
            continue
        literal = re.search(rf'"{arg}"\s*:\s*(true|false|-?\d+)', raw)
        if literal:
            params[arg] = json.loads(literal.group(1))
    return {"function": match.group(1), "params": params}, "regex"


def longest_content_word(question: str, names: tuple[str, ...] = ()) -> str:
    """The fallback conversation_search query: the question's longest non-stop word that is not a name.

    Recall entries are matched as "speaker - text", so a speaker's name (or "Caroline's") matches
    every turn of that speaker and the search returns their oldest turns: names are skipped.
    With no word left the query is the question itself (a sentence-long substring: no results).
    """
    skip = QUESTION_STOP | {n.lower() for n in names}
    words = [w for w in re.findall(r"[A-Za-z0-9']+", question)
             if w.lower() not in skip and re.sub(r"'s?$", "", w.lower()) not in skip]
    return max(words, key=len) if words else question.strip()


def turn_line(turn: Turn) -> str:
    """A turn as it enters the FIFO queue: `[{date}] {speaker}: {text}` (+ ` [shares {caption}]`)."""
    shares = f" [shares {turn.caption}]" if turn.caption else ""
    return f"[{turn.date_time}] {turn.speaker}: {turn.text}{shares}"
