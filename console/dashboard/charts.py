"""Small server-side SVG charts: line, stacked bar and horizontal bar, with axes and a legend.

No JavaScript and no external service: each chart is an inline <svg role="img"> with a <title>
and a <desc> (what a screen reader announces), and carries its numbers as a table (`Chart.table`)
that the template shows under a <details>. Every text written into the SVG is escaped here,
since the result is marked safe for the template.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from itertools import count

from django.utils.safestring import SafeString, mark_safe

# Colour-blind friendly (Okabe-Ito), dark enough on white for thin lines.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f7f7f", "#f0e442")

WIDTH = 640
HEIGHT = 260
MARGIN_LEFT = 48
MARGIN_RIGHT = 12
MARGIN_TOP = 14
MARGIN_BOTTOM = 48  # x labels + legend

_ids = count(1)


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]
    color: str = ""


@dataclass
class Chart:
    title: str
    svg: SafeString
    headers: list[str]
    rows: list[list[str]]
    total: float = 0
    empty: bool = field(default=False)


def axis(value: float) -> tuple[float, float]:
    """(top, step) of a readable y axis for a peak `value`: the step is 1, 2 or 5 × 10^k and at
    least 1 (the charts count things, so ticks stay whole numbers), at most five steps."""
    if value <= 0:
        return 1.0, 1.0
    raw = value / 5
    exp = math.floor(math.log10(raw)) if raw >= 1 else 0
    step = 10.0**exp
    for m in (1, 2, 5, 10):
        if m * 10**exp >= raw:
            step = float(m * 10**exp)
            break
    return step * math.ceil(value / step), step


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}"


def _colored(series: Sequence[Series]) -> list[Series]:
    return [
        s if s.color else Series(s.name, s.values, PALETTE[i % len(PALETTE)])
        for i, s in enumerate(series)
    ]


def _open(title: str, desc: str, height: int = HEIGHT) -> tuple[str, list[str]]:
    n = next(_ids)
    tid, did = f"chart-{n}-title", f"chart-{n}-desc"
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-labelledby="{tid} {did}" preserveAspectRatio="xMidYMid meet">'
        f'<title id="{tid}">{escape(title)}</title><desc id="{did}">{escape(desc)}</desc>'
    )
    return head, []


def _y_axis(parts: list[str], top: float, step: float, plot_h: float) -> None:
    x0 = MARGIN_LEFT
    ticks = round(top / step)
    for i in range(ticks + 1):
        v = step * i
        y = MARGIN_TOP + plot_h - plot_h * v / top
        parts.append(
            f'<line class="grid" x1="{x0}" y1="{y:.1f}" x2="{WIDTH - MARGIN_RIGHT}" '
            f'y2="{y:.1f}" stroke="#e4e7ec"/>'
            f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#667085">{_fmt(v)}</text>'
        )
    parts.append(
        f'<line x1="{x0}" y1="{MARGIN_TOP}" x2="{x0}" y2="{MARGIN_TOP + plot_h}" stroke="#98a2b3"/>'
    )


def _x_labels(parts: list[str], labels: Sequence[str], xs: Sequence[float], plot_h: float) -> None:
    # At most ~8 labels, always the first and the last: dates would otherwise overlap.
    n = len(labels)
    step = max(1, math.ceil(n / 8))
    y = MARGIN_TOP + plot_h
    parts.append(
        f'<line x1="{MARGIN_LEFT}" y1="{y}" x2="{WIDTH - MARGIN_RIGHT}" y2="{y}" stroke="#98a2b3"/>'
    )
    for i, (label, x) in enumerate(zip(labels, xs, strict=True)):
        if i % step and i != n - 1:
            continue
        if i == n - 1 and i % step and n - 1 - (i - i % step) < step / 2:
            continue  # too close to the previous label
        parts.append(
            f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle" font-size="11" '
            f'fill="#667085">{escape(label)}</text>'
        )


def _legend(parts: list[str], series: Sequence[Series], height: int) -> None:
    x = MARGIN_LEFT
    y = height - 10
    for s in series:
        parts.append(
            f'<g class="legend-item"><rect x="{x}" y="{y - 9}" width="10" height="10" '
            f'fill="{s.color}"/><text x="{x + 14}" y="{y}" font-size="11" fill="#1d2330">'
            f"{escape(s.name)}</text></g>"
        )
        x += 24 + 7 * len(s.name)


def _table(labels: Sequence[str], series: Sequence[Series]) -> tuple[list[str], list[list[str]]]:
    headers = ["", *(s.name for s in series)]
    rows = [[label, *(_fmt(s.values[i]) for s in series)] for i, label in enumerate(labels)]
    return headers, rows


def line_chart(
    *, title: str, labels: Sequence[str], series: Sequence[Series], desc: str = ""
) -> Chart:
    """One line per series over the labels (days), y from 0 to a readable maximum."""
    series = _colored(series)
    peak = max((max(s.values, default=0) for s in series), default=0)
    top, step = axis(peak)
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    n = len(labels)
    xs = [MARGIN_LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2) for i in range(n)]
    head, parts = _open(title, desc or f"{title}: {', '.join(s.name for s in series)}")
    _y_axis(parts, top, step, plot_h)
    _x_labels(parts, labels, xs, plot_h)
    for s in series:
        points = " ".join(
            f"{x:.1f},{MARGIN_TOP + plot_h - plot_h * v / top:.1f}"
            for x, v in zip(xs, s.values, strict=True)
        )
        parts.append(
            f'<polyline class="series" data-series="{escape(s.name)}" fill="none" '
            f'stroke="{s.color}" stroke-width="2" points="{points}"><title>{escape(s.name)}'
            f"</title></polyline>"
        )
        if n <= 31:  # a dot per day shows lines that lie on top of each other
            parts.extend(
                f'<circle cx="{x:.1f}" cy="{MARGIN_TOP + plot_h - plot_h * v / top:.1f}" r="2.2" '
                f'fill="{s.color}"><title>{escape(label)} · {escape(s.name)}: {_fmt(v)}</title>'
                f"</circle>"
                for x, v, label in zip(xs, s.values, labels, strict=True)
            )
    _legend(parts, series, HEIGHT)
    headers, rows = _table(labels, series)
    svg = head + "".join(parts) + "</svg>"
    return Chart(title, mark_safe(svg), headers, rows, peak, empty=peak == 0)  # noqa: S308


def stacked_bar_chart(
    *, title: str, labels: Sequence[str], series: Sequence[Series], desc: str = ""
) -> Chart:
    """One bar per label, the series stacked in order (bottom first)."""
    series = _colored(series)
    n = len(labels)
    totals = [sum(s.values[i] for s in series) for i in range(n)]
    peak = max(totals, default=0)
    top, step = axis(peak)
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    slot = plot_w / max(n, 1)
    bar_w = max(1.0, slot * 0.75)
    xs = [MARGIN_LEFT + slot * i + slot / 2 for i in range(n)]
    head, parts = _open(title, desc or f"{title}: {', '.join(s.name for s in series)}")
    _y_axis(parts, top, step, plot_h)
    for i, label in enumerate(labels):
        base = 0.0
        for s in series:
            v = s.values[i]
            if v <= 0:
                continue
            h = plot_h * v / top
            y = MARGIN_TOP + plot_h - plot_h * base / top - h
            parts.append(
                f'<rect class="bar" x="{xs[i] - bar_w / 2:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                f'height="{h:.1f}" fill="{s.color}"><title>{escape(label)} · '
                f"{escape(s.name)}: {_fmt(v)}</title></rect>"
            )
            base += v
    _x_labels(parts, labels, xs, plot_h)
    _legend(parts, series, HEIGHT)
    headers, rows = _table(labels, series)
    headers.append("total")
    for row, t in zip(rows, totals, strict=True):
        row.append(_fmt(t))
    svg = head + "".join(parts) + "</svg>"
    return Chart(title, mark_safe(svg), headers, rows, sum(totals), empty=peak == 0)  # noqa: S308


def bar_chart(
    *, title: str, labels: Sequence[str], values: Sequence[float], unit: str = "", desc: str = ""
) -> Chart:
    """Horizontal bars, one per label (top agents), largest first as given, values written."""
    n = len(labels)
    row_h = 22
    label_w = 150
    height = MARGIN_TOP + max(n, 1) * row_h + 10
    peak = max(values, default=0)
    top, _ = axis(peak)
    plot_w = WIDTH - label_w - MARGIN_RIGHT - 50
    head, parts = _open(title, desc or title, height)
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = MARGIN_TOP + i * row_h
        w = plot_w * v / top
        short = label if len(label) <= 22 else label[:21] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="12" '
            f'fill="#1d2330">{escape(short)}<title>{escape(label)}</title></text>'
            f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
            f'fill="{PALETTE[0]}"><title>{escape(label)}: {_fmt(v)}</title></rect>'
            f'<text x="{label_w + w + 5:.1f}" y="{y + 14}" font-size="11" fill="#667085">'
            f"{_fmt(v)}{escape(unit)}</text>"
        )
    if not n:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{MARGIN_TOP + 16}" text-anchor="middle" font-size="12" '
            f'fill="#667085">no data</text>'
        )
    svg = head + "".join(parts) + "</svg>"
    rows = [[label, _fmt(v)] for label, v in zip(labels, values, strict=True)]
    return Chart(title, mark_safe(svg), ["", title], rows, sum(values), empty=not n)  # noqa: S308
