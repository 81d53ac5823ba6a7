from __future__ import annotations

from django.apps import AppConfig


class AgentMcpConfig(AppConfig):
    name = "agentmcp"
    verbose_name = "MCP server"
