"""The OpenAI-compatible chat client every LLM task goes through.

`get_client()` returns the client for the current settings (`LLM_BASE_URL`, `LLM_API_KEY`,
`LLM_MODEL`, `LLM_TIMEOUT_SECONDS`, `LLM_MAX_RETRIES`), or None when no LLM is configured (the
callers then use their offline rules). It is shared, so what it learns about the provider (that
it rejects JSON mode) is learnt once for all tasks, and rebuilt when the settings change.

The `openai` client's own retries (`LLM_MAX_RETRIES`, exponential backoff) cover 429, 5xx and
connection errors. When the model still cannot be reached, times out or fails, `chat_json`
raises `DomainError("LLM_UNAVAILABLE")` (503), before the caller has written anything.

Answers are requested as JSON (`response_format={"type": "json_object"}`; a provider that rejects
that parameter is asked again without it, once per client) and parsed tolerantly
(`llm.parsing.extract_json`): an answer with no usable JSON gives None and a warning, never an
exception.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings

from core.errors import DomainError, ErrorCode
from core.metrics import LLM_CALLS, LLM_TOKENS

from .parsing import extract_json
from .usage import Usage

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"

Messages = list[dict[str, str]]


def usage_of(response: Any) -> Usage:
    """The tokens a chat completion reports (zero when the provider reports none)."""
    u = getattr(response, "usage", None)
    if u is None:
        return Usage()
    prompt = int(getattr(u, "prompt_tokens", 0) or 0)
    completion = int(getattr(u, "completion_tokens", 0) or 0)
    total = int(getattr(u, "total_tokens", 0) or 0) or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


class ChatClient:
    """One OpenAI-compatible chat model, asked for JSON."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int
    ) -> None:
        from openai import OpenAI

        self.model = model
        self.name = f"llm:{model}"
        self.timeout = timeout
        self._client = OpenAI(
            base_url=base_url,
            api_key=api_key or "none",  # local servers need none; the client insists on one
            timeout=timeout,
            max_retries=max_retries,
        )
        self._json_mode = True

    def _create(self, messages: Messages, *, json_mode: bool) -> Any:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
            kwargs["temperature"] = 0
        return self._client.chat.completions.create(**kwargs)

    def chat_json(self, messages: Messages, *, what: str) -> tuple[Any | None, Usage]:
        """One completion: (the JSON in the answer or None, tokens used). `what` names the task
        in the logs. Raises DomainError("LLM_UNAVAILABLE") when the model cannot answer."""
        try:
            response = self._complete(messages, what=what)
        except DomainError:
            LLM_CALLS.labels(outcome="error").inc()
            raise
        usage = usage_of(response)
        LLM_CALLS.labels(outcome="ok").inc()
        LLM_TOKENS.labels(direction="prompt").inc(usage.prompt_tokens)
        LLM_TOKENS.labels(direction="completion").inc(usage.completion_tokens)
        choices = getattr(response, "choices", None) or []
        content = choices[0].message.content if choices else None
        data = extract_json(content or "")
        if data is None:
            logger.warning(
                "LLM %s: %s answer has no JSON, no items taken (starts with %r)",
                self.model,
                what,
                (content or "")[:200],
            )
        return data, usage

    def _complete(self, messages: Messages, *, what: str) -> Any:
        """The provider's response, or DomainError("LLM_UNAVAILABLE") saying why there is none."""
        import openai

        try:
            try:
                response = self._create(messages, json_mode=self._json_mode)
            except openai.BadRequestError as exc:
                if not self._json_mode:
                    raise
                # Some providers reject response_format/temperature; the prompt asks for JSON
                # anyway and the answer is parsed tolerantly.
                logger.warning(
                    "LLM %s rejected JSON mode (%s); retrying without it", self.model, exc
                )
                response = self._create(messages, json_mode=False)
                self._json_mode = False
        except openai.APITimeoutError as exc:
            logger.warning("LLM %s: %s timed out after %ss", self.model, what, self.timeout)
            raise DomainError(
                ErrorCode.LLM_UNAVAILABLE, f"the LLM did not answer within {self.timeout:g} s"
            ) from exc
        except openai.APIConnectionError as exc:
            logger.warning("LLM %s: %s could not connect: %s", self.model, what, exc)
            raise DomainError(ErrorCode.LLM_UNAVAILABLE, "the LLM cannot be reached") from exc
        except openai.APIStatusError as exc:
            logger.warning("LLM %s: %s answered HTTP %s", self.model, what, exc.status_code)
            raise DomainError(
                ErrorCode.LLM_UNAVAILABLE, f"the LLM answered HTTP {exc.status_code}"
            ) from exc
        except openai.OpenAIError as exc:
            logger.warning("LLM %s: %s failed: %s", self.model, what, type(exc).__name__)
            raise DomainError(
                ErrorCode.LLM_UNAVAILABLE, f"the LLM failed: {type(exc).__name__}"
            ) from exc
        return response


# --- the shared client -----------------------------------------------------------------------------

_client: ChatClient | None = None
_client_key: tuple[Any, ...] | None = None
_client_lock = threading.Lock()


def _settings_key() -> tuple[Any, ...]:
    return (
        settings.LLM_BASE_URL,
        settings.LLM_API_KEY,
        settings.LLM_MODEL,
        float(settings.LLM_TIMEOUT_SECONDS),
        int(settings.LLM_MAX_RETRIES),
    )


def _build(key: tuple[Any, ...]) -> ChatClient | None:
    base_url, api_key, model, timeout, max_retries = key
    if not base_url:
        return None
    if not model:
        logger.warning("LLM_MODEL is not set; asking %s for %s", base_url, DEFAULT_MODEL)
    return ChatClient(
        base_url=base_url,
        api_key=api_key,
        model=model or DEFAULT_MODEL,
        timeout=timeout,
        max_retries=max_retries,
    )


def get_client() -> ChatClient | None:
    """The client for the current settings (rebuilt when they change); None without an LLM."""
    global _client, _client_key
    key = _settings_key()
    with _client_lock:
        if _client_key != key:
            _client = _build(key)
            _client_key = key
        return _client


def chat_json(messages: Messages, *, what: str) -> tuple[Any | None, Usage]:
    """`ChatClient.chat_json` on the configured client; LLM_UNAVAILABLE when none is configured."""
    client = get_client()
    if client is None:
        raise DomainError(ErrorCode.LLM_UNAVAILABLE, "no LLM is configured (LLM_BASE_URL)")
    return client.chat_json(messages, what=what)
