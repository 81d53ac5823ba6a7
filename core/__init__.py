"""The kernel every app builds on: errors and the response envelope, base serializers, the
OpenAPI decorator, request limits, small caches, formats and validators shared by the API, and
the access policy of agent-scoped keys.

It imports no package of this project (import-linter checks it: `lint-imports`), so any app
may import it and it can never be part of an import cycle.
"""
