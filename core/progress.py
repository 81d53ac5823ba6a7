"""Progress of a long management command: tqdm's bar on a terminal, plain lines otherwise (a log
file or CI gets one line per 10 % instead of carriage returns)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, TypeVar

from tqdm import tqdm


class Progress:
    """`advance(n)` as work gets done, `close()` at the end (or use it as a context manager)."""

    def __init__(self, total: int, *, label: str, stream: Any = None) -> None:
        self.total = total
        self.label = label
        # A command's self.stderr (Django's OutputWrapper) adds a newline to every write, which
        # would break the bar's carriage returns: write to the stream it wraps.
        self.stream: IO[str] = getattr(stream, "_out", stream) or sys.stderr
        self.done = 0
        self._started = time.monotonic()
        self._next_line = 0.1
        self._bar: Any = None
        if total and self.stream.isatty():
            self._bar = tqdm(total=total, desc=label, file=self.stream, unit="item")

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.total and self.done / self.total >= self._next_line:
            while self._next_line <= self.done / self.total:
                self._next_line += 0.1
            rate = self.done / max(time.monotonic() - self._started, 1e-6)
            self.stream.write(
                f"{self.label}: {self.done}/{self.total} "
                f"({100 * self.done // self.total} %), {rate:.0f}/s\n"
            )
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


T = TypeVar("T")


def in_batches(
    ids: Sequence[T],
    work: Callable[[list[T]], int],
    *,
    batch_size: int,
    label: str,
    stream: Any = None,
) -> int:
    """Runs `work` over `ids` a batch at a time with a progress bar; the sum of what it returns
    (how many it changed: a batch may skip some)."""
    done = 0
    with Progress(len(ids), label=label, stream=stream) as progress:
        for start in range(0, len(ids), batch_size):
            batch = list(ids[start : start + batch_size])
            done += work(batch)
            progress.advance(len(batch))
    return done
