"""A Letta agent file (`.af`), as a bundle (docs/export.md, "Moving from Letta").

Letta exports an agent as one JSON document. Two shapes are read:

* the current one (2025 on): `{"agents": [...], "blocks": [...], "tools": [...], ...}`, each
  agent naming its core-memory blocks by id (`block_ids`, a block listed once at the top level,
  shared when several agents name it) or holding them (`memory_blocks`), and carrying its
  `messages`;
* the earlier one: the agent itself, its blocks in `core_memory`, its `messages` beside them.

What is memory in it comes here; what runs the agent (its system prompt, tools, model settings,
files and sources) does not:

* each line of a core-memory block (`human`, `persona`, any other label) becomes a memory of the
  agent, of the block's label as category, pinned: Letta kept the block in every prompt, so
  cleanup must not forget it. A block several agents share becomes team memories;
* the conversation (`messages`) goes to the agent's archive as ingested messages, the user's and
  the assistant's only: what the user said (the text inside MemGPT's `{"type": "user_message"}`
  envelope; its heartbeats and system alerts are not conversation), and what the assistant said
  (the `send_message` tool call's text where the agent spoke through it, its content otherwise).
  System and tool messages are the agent's runtime, not what was said.

The import then does the rest as for any bundle: embeds with this server's model, meets what is
already here (the same agent and text, the same message) instead of writing it twice, all or
nothing. The file holds no archival memory (Letta does not export passages).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC
from typing import Any

from django.conf import settings

from core.validators import AGENT_ID_RE

from .convert import checked_datetime, converted_bundle, invalid, json_document

_CATEGORY_MAX = 64
_NAME_MAX = 64  # an archive item's speaker name
# MemGPT's envelopes of a user turn that are not the user speaking.
_NOT_SAID = {"heartbeat", "login", "system_alert", "system_message"}


def letta_bundle(data: bytes, *, agent_id: str = "") -> bytes:
    """A bundle of the agent file's memory. `agent_id`: the id here of a file's only agent
    (its Letta name otherwise, which must be a valid agent id)."""
    document = _document(data)
    agents = _agents(document)
    if agent_id:
        if not re.fullmatch(AGENT_ID_RE, agent_id):
            raise invalid("agent_id", "not a valid agent id")
        if len(agents) != 1:
            raise invalid("agent_id", f"the file holds {len(agents)} agents, not one")
    ids = [agent_id or _agent_id(n, agent) for n, (agent, _) in enumerate(agents)]

    # Blocks by id, and the agents naming each: one named by several is theirs together.
    holders: dict[int, list[str]] = {}
    blocks: dict[int, dict[str, Any]] = {}
    for (_, own), here in zip(agents, ids, strict=True):
        for block in own:
            blocks[id(block)] = block
            holders.setdefault(id(block), []).append(here)
    records: list[dict[str, Any]] = []
    for key, block in blocks.items():
        records.extend(_block_memories(block, sorted(set(holders[key])), first=len(records) + 1))
    archive: list[dict[str, Any]] = []
    for (agent, _), here in zip(agents, ids, strict=True):
        archive.extend(_archive(agent, here, first=len(archive) + 1))
    return converted_bundle({"memory": records, "archive": archive})


def _document(data: bytes) -> dict[str, Any]:
    parsed = json_document(data, not_json="not JSON (a Letta agent file is one JSON document)")
    if isinstance(parsed, str):
        # Some tools hand the file over JSON-encoded once more.
        try:
            parsed = json.loads(parsed)
        except json.JSONDecodeError as exc:
            raise invalid("body", "not a Letta agent file") from exc
    if not isinstance(parsed, dict):
        raise invalid("body", "not a Letta agent file (expected a JSON object)")
    return parsed


def _list(where: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(where, "expected a list")
    return value


def _agents(document: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each agent of the file with its core-memory blocks."""
    if "agents" in document:
        by_id: dict[str, dict[str, Any]] = {}
        for n, block in enumerate(_list("blocks", document.get("blocks"))):
            if not isinstance(block, dict):
                raise invalid(f"block {n}", "not an object")
            if isinstance(block.get("id"), str):
                by_id[block["id"]] = block
        out = []
        for n, agent in enumerate(_list("agents", document["agents"])):
            if not isinstance(agent, dict):
                raise invalid(f"agent {n}", "not an object")
            own = []
            for block_id in _list(f"agent {n}: block_ids", agent.get("block_ids")):
                if not isinstance(block_id, str) or block_id not in by_id:
                    raise invalid(f"agent {n}", f"block {block_id!r} is not in the file")
                own.append(by_id[block_id])
            own.extend(_blocks(f"agent {n}: memory_blocks", agent.get("memory_blocks")))
            out.append((agent, own))
        if not out:
            raise invalid("agents", "the file holds no agent")
        return out
    if "core_memory" in document or "messages" in document:
        return [(document, _blocks("core_memory", document.get("core_memory")))]
    raise invalid(
        "body",
        'not a Letta agent file: no "agents" (the current format) nor "core_memory" (the '
        "earlier one)",
    )


def _blocks(where: str, value: Any) -> list[dict[str, Any]]:
    blocks = _list(where, value)
    for n, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise invalid(f"{where} {n}", "not an object")
    return blocks


def _agent_id(n: int, agent: dict[str, Any]) -> str:
    name = agent.get("name")
    if not isinstance(name, str) or not re.fullmatch(AGENT_ID_RE, name):
        raise invalid(
            f"agent {n}",
            f"its name {name!r} is not a valid agent id here: give the id it should have "
            "(agent_id, for a file of one agent)",
        )
    return name


def _block_memories(
    block: dict[str, Any], agents: list[str], *, first: int
) -> list[dict[str, Any]]:
    """One memory per non-empty line of the block, of its agent (team memories for a block
    several agents hold), in the block's order."""
    label = block.get("label")
    where = f"block {label!r}"
    value = block.get("value")
    if not isinstance(label, str) or not label.strip():
        raise invalid("block", f"{block.get('id', '?')!r} has no label")
    if not isinstance(value, str):
        raise invalid(where, '"value" (its text) must be a string')
    team = len(agents) > 1
    # The earlier format dates its blocks: when the block was made and last changed.
    stamps = {
        name: _time(where, name, block[name])
        for name in ("created_at", "updated_at")
        if block.get(name) is not None
    }
    out: list[dict[str, Any]] = []
    for line, content in enumerate(s.strip() for s in value.splitlines()):
        if not content:
            continue
        if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
            raise invalid(
                where, f"line {line} is over {settings.MEMORY_MAX_CONTENT_CHARS} characters"
            )
        metadata: dict[str, Any] = {"source": "letta", "letta_block": label, "letta_line": line}
        if team:
            metadata["letta_agents"] = agents
        out.append(
            {
                "kind": "memory",
                "id": first + len(out),
                "scope": "team" if team else "personal",
                "agent_id": "" if team else agents[0],
                "content": content,
                "category": label.strip()[:_CATEGORY_MAX],
                "pinned": True,
                "metadata": metadata,
                **stamps,
            }
        )
    return out


def _archive(agent: dict[str, Any], agent_id: str, *, first: int) -> list[dict[str, Any]]:
    """The user's and the assistant's messages, as ingested archive items of the agent."""
    out: list[dict[str, Any]] = []
    for n, message in enumerate(_list(f"agent {agent_id}: messages", agent.get("messages"))):
        if not isinstance(message, dict):
            raise invalid(f"agent {agent_id}, message {n}", "not an object")
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = _text(message)
        # An agent speaking through send_message: its content is then its inner thoughts.
        text = _user_said(text) if role == "user" else _assistant_said(message) or text
        if not text:
            continue
        stamp = message.get("created_at")
        when = _time(f"agent {agent_id}, message {n}", "created_at", stamp)
        # The same message in a later export of the agent is the same item here: Letta's ids
        # in a file (`message-0`) are numbered per export.
        digest = hashlib.sha256("\0".join((agent_id, role, str(stamp), text)).encode()).hexdigest()
        record: dict[str, Any] = {
            "kind": "archive",
            "id": first + len(out),
            "agent_id": agent_id,
            "item_id": f"letta-{digest[:26]}",
            "content": text,
            "item_created_at": when,
            "reason": "ingested",
            "role": role,
        }
        name = message.get("name")
        if isinstance(name, str) and 0 < len(name) <= _NAME_MAX:
            record["name"] = name
        out.append(record)
    return out


def _time(where: str, name: str, value: Any) -> str:
    """An ISO 8601 date-time of the file, with its offset (a 400 naming it otherwise)."""
    parsed = checked_datetime(where, name, value)
    if parsed.tzinfo is None:
        # Letta keeps its times in UTC; its earlier exports wrote them without the offset.
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.isoformat()


def _text(message: dict[str, Any]) -> str:
    """A message's text parts (images, reasoning and tool parts aside), joined."""
    content = message.get("content", message.get("text"))
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = [
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(parts).strip()


def _user_said(text: str) -> str:
    """What the user said in a user message: MemGPT wrapped it in a JSON envelope, and sent
    heartbeats and alerts as user messages too (nothing said)."""
    if not text.startswith("{"):
        return text
    try:
        envelope = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(envelope, dict) or not isinstance(envelope.get("type"), str):
        return text
    if envelope["type"] in _NOT_SAID:
        return ""
    said = envelope.get("message")
    return said.strip() if envelope["type"] == "user_message" and isinstance(said, str) else text


def _assistant_said(message: dict[str, Any]) -> str:
    """What an agent speaking through the `send_message` tool said (its content is then its
    inner thoughts); "" for an agent that answers in its content."""
    said = []
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or function.get("name") != "send_message":
            continue
        arguments = function.get("arguments")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
            said.append(parsed["message"].strip())
    return "\n".join(s for s in said if s)
