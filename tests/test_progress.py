"""Long commands report progress: a bar on a terminal, one plain line per 10 % otherwise."""

from __future__ import annotations

from io import StringIO

from core.progress import Progress


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal():
    out = StringIO()
    with Progress(200, label="re-embedded", stream=out) as progress:
        for _ in range(200):
            progress.advance()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in out.getvalue()
    assert lines[0].startswith("re-embedded: 20/200 (10 %)")
    assert lines[-1].startswith("re-embedded: 200/200 (100 %)")


def test_a_bar_on_a_terminal():
    out = Terminal()
    with Progress(50, label="re-embedded", stream=out) as progress:
        progress.advance(50)
    assert "\r" in out.getvalue() and "50/50" in out.getvalue()


def test_nothing_to_do_prints_nothing():
    out = StringIO()
    Progress(0, label="x", stream=out).close()
    assert out.getvalue() == ""
