"""The MCP server for agents (docs/mcp.md): streamable HTTP at /mcp and `manage.py mcp_stdio`."""
