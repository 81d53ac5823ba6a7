"""Token accounting of LLM calls."""

from __future__ import annotations

from pydantic import BaseModel


class Usage(BaseModel):
    """LLM tokens spent by one operation (all zero for the offline engines)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )
