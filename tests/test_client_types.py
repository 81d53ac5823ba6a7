"""The clients' typed answers, checked by mypy itself: tests/typecheck/check_client_types.py
passes (as `mypy .` also checks), and a wrong expectation fails, so the checks are not vacuous."""

from __future__ import annotations

import re
from pathlib import Path

import mypy.api

ROOT = Path(__file__).resolve().parent.parent

WRONG = """
from typing import assert_type
from memoryplatform.client import AsyncMemoryClient, Job, MemoryClient, MemoryDetail

def sync(client: MemoryClient) -> None:
    assert_type(client.get_memory(1), Job)  # line 6
    client.get_memory(1)["no_such_key"]  # line 7
    client.get_memory("1")  # line 8

async def not_awaited(client: AsyncMemoryClient) -> None:
    assert_type(client.get_memory(1), MemoryDetail)  # line 11
"""


def test_mypy_sees_the_types_of_both_clients_answers(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    # Strict and without the project's configuration (no Django plugin): the client's types
    # stand on their own, as in an agent that copied the file.
    out, err, status = mypy.api.run(
        [
            "--config-file=",
            "--strict",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--python-version=3.11",
            f"--cache-dir={tmp_path / 'mypy_cache'}",
            str(ROOT / "memoryplatform" / "client.py"),
            str(ROOT / "tests" / "typecheck" / "check_client_types.py"),
            str(wrong),
        ]
    )
    assert status == 1, out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert all(line.startswith(str(wrong)) for line in errors), out
    lines = {int(re.match(r".*?:(\d+): error", line).group(1)) for line in errors}
    assert lines == {6, 7, 8, 11}, out
    assert 'not "Job"' in out and '"no_such_key" is not a valid TypedDict key' in out
    assert "Coroutine[Any, Any, TypedDict(" in out  # the async client's answer is awaitable
