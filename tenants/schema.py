"""OpenAPI description of the HMAC headers (drf-spectacular extension)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class HmacAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.HmacAuthentication"
    name = ["ApiKey", "Timestamp", "Signature"]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {
                "type": "apiKey",
                "in": "header",
                "name": "X-API-Key",
                "description": "The public key id issued to the team (create_api_key).",
            },
            {
                "type": "apiKey",
                "in": "header",
                "name": "X-Timestamp",
                "description": "Unix seconds; must be within ±300 s of server time.",
            },
            {
                "type": "apiKey",
                "in": "header",
                "name": "X-Signature",
                "description": "Lower-case hex HMAC-SHA256 with the key's secret over "
                "str(timestamp) (GET/DELETE) or str(timestamp) + raw body bytes "
                "(POST/PUT).",
            },
        ]
