"""The platform's LLM access, shared by the lifecycle and the graph: the OpenAI-compatible chat
client (`get_client`, `ChatClient.chat_json`), token accounting (`Usage`), tolerant reading of
answers (`extract_json`, `item_list`, `validate_items`) and the prompt pieces every task shares
(`SYSTEM_PROMPT`, `data_block`, `chat_messages`).

A plain package, not a Django app: no models; it reads its settings from django.conf.settings.
It imports nothing of the apps, so any app may import it (the tasks and their schemas stay in the
app that asks them).
"""

from __future__ import annotations

from .client import DEFAULT_MODEL, ChatClient, Messages, chat_json, get_client, usage_of
from .parsing import extract_json, item_list, short_error, validate_items
from .prompts import SYSTEM_PROMPT, chat_messages, cut, data_block
from .usage import Usage

__all__ = [
    "DEFAULT_MODEL",
    "SYSTEM_PROMPT",
    "ChatClient",
    "Messages",
    "Usage",
    "chat_json",
    "chat_messages",
    "cut",
    "data_block",
    "extract_json",
    "get_client",
    "item_list",
    "short_error",
    "usage_of",
    "validate_items",
]
