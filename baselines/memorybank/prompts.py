"""MemoryBank's summary prompts, after SiliconFriend's summarize_memory.py [M1].

docs/methods.md, section MemoryBank.
"""

# [M1] summarize_memory.py, English prompts; the two speakers replace "user" and "AI", and the
# companion's "response strategy" (incidental to the memory) is left out.
SYSTEM_PROMPT = "Below is a transcript of a conversation between two people, {a} and {b}."
EVENT_PROMPT = ("Please summarize the following dialogue as concisely as possible, extracting the main themes "
                "and key information. If there are multiple key events, you may summarize them separately. "
                "Dialogue content:\n{dialogue}\nSummarization:")
PERSONALITY_PROMPT = ("Based on the following dialogue, please summarize the personality traits and emotions of "
                      "{a} and of {b}. Dialogue content:\n{dialogue}\n"
                      "The personality traits and emotions of {a} and {b} are:")
OVERALL_EVENT_PROMPT = ("Please provide a highly concise summary of the following events, capturing the essential "
                        "key information as succinctly as possible. Summarize the events:\n{entries}\nSummarization:")
OVERALL_EVENT_ENTRY = "At {date}, the events are {text}"
OVERALL_PERSONALITY_PROMPT = ("The following are the personality traits and emotions {a} and {b} exhibited "
                              "throughout multiple dialogues:\n{entries}\nPlease provide a highly concise and general "
                              "summary of the personalities of {a} and {b}, summarized as:")
OVERALL_PERSONALITY_ENTRY = "At {date}, the analysis shows {text}"
