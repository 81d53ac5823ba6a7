"""Identifier formats of the API, shared by the models, the serializers and the stores."""

from __future__ import annotations

from django.core.validators import RegexValidator

TEAM_ID_RE = r"^[A-Za-z0-9_-]{1,64}$"
AGENT_ID_RE = r"^[A-Za-z0-9_.:@-]{1,64}$"

AGENT_ID_MESSAGE = "Must match [A-Za-z0-9_.:@-]{1,64}."
# The validator of every `agent_id` the API accepts (body field or query parameter).
AGENT_ID = RegexValidator(AGENT_ID_RE, AGENT_ID_MESSAGE)
