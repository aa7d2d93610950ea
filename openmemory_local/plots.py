"""Plots as SVG (or PNG): small, deterministic figures for the local page and the evaluation.

One drawing function, :func:`plot`, takes plain data (lines and marked points over time or
over numbers) and returns the image's bytes; :func:`strength_plot` draws a lesson's strength
over time from the points :func:`openmemory_local.ui.data.strength_history` reads off the
``events`` table. ``openmemory ui`` serves them; ``openmemory eval`` is meant to draw its
figures with the same :func:`plot`.

matplotlib is imported only when a figure is drawn (the ``ui`` extra installs it), through its
object API (``Figure``, no ``pyplot``: no global state, safe in a server thread), on the Agg
and SVG backends (no screen). The SVG is deterministic for the same data: no date in its
metadata, a fixed id salt, text kept as text.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

__all__ = ["Line", "Marks", "plot", "strength_plot", "PlotError", "KIND_STYLE"]

#: Colours that read on white and for most colour-blind readers (Okabe and Ito).
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")

#: How each lesson event is marked on a strength plot: (label, colour, marker).
KIND_STYLE = {
    "learned": ("learned", "#0072B2", "o"),
    "strengthened": ("strengthened", "#009E73", "^"),
    "revived": ("revived", "#56B4E9", "^"),
    "confirmed": ("prediction confirmed", "#009E73", "P"),
    "failed": ("prediction failed", "#D55E00", "X"),
    "archived": ("archived", "#777777", "s"),
    "vetoed": ("vetoed", "#000000", "x"),
    "unvetoed": ("unvetoed", "#CC79A7", "+"),
    "now": ("now", "#0072B2", "."),
}


class PlotError(ValueError):
    """Data that cannot be drawn (mismatched lengths, an unknown format)."""


@dataclass
class Line:
    """A line through points ``(x[i], y[i])``; ``step`` draws it as a staircase."""

    label: str
    x: Sequence
    y: Sequence[float]
    colour: str | None = None
    step: bool = False
    dashed: bool = False


@dataclass
class Marks:
    """Points marked without a line (events on a curve)."""

    label: str
    x: Sequence
    y: Sequence[float]
    colour: str | None = None
    marker: str = "o"


def plot(lines: Sequence[Line] = (), marks: Sequence[Marks] = (), *, title: str = "", xlabel: str = "",
         ylabel: str = "", ylim: tuple[float, float] | None = None, hlines: Sequence[tuple[float, str]] = (),
         fmt: str = "svg", width: float = 6.4, height: float = 2.6, legend: bool = True) -> bytes:
    """Draw ``lines`` and ``marks`` (x: numbers or datetimes) into one figure; ``hlines`` are
    labelled horizontal thresholds ``(y, label)``. Returns SVG (``fmt="svg"``) or PNG bytes."""
    if fmt not in ("svg", "png"):
        raise PlotError(f"unknown plot format {fmt!r}: svg or png")
    for series in (*lines, *marks):
        if len(series.x) != len(series.y):
            raise PlotError(f"{series.label!r}: {len(series.x)} x values but {len(series.y)} y values")

    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    rc = {"svg.hashsalt": "openmemory", "svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
          "axes.spines.right": False}
    with matplotlib.rc_context(rc):
        figure = Figure(figsize=(width, height), dpi=100)
        axes = figure.add_subplot()
        dated = any(isinstance(v, datetime) for s in (*lines, *marks) for v in s.x)
        for i, line in enumerate(lines):
            colour = line.colour or _COLOURS[i % len(_COLOURS)]
            style = "--" if line.dashed else "-"
            if line.step:
                axes.step(line.x, line.y, where="post", color=colour, linestyle=style, label=line.label, linewidth=1.5)
            else:
                axes.plot(line.x, line.y, color=colour, linestyle=style, label=line.label, linewidth=1.5)
        for i, mark in enumerate(marks):
            colour = mark.colour or _COLOURS[(i + len(lines)) % len(_COLOURS)]
            axes.scatter(mark.x, mark.y, color=colour, marker=mark.marker, label=mark.label, s=36, zorder=3)
        for y, label in hlines:
            axes.axhline(y, color="#999999", linewidth=0.8, linestyle=":")
            axes.annotate(label, (1.0, y), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                          fontsize=7, color="#777777")
        if ylim is not None:
            axes.set_ylim(*ylim)
        if title:
            axes.set_title(title, loc="left", fontsize=10)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        if dated:
            from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

            locator = AutoDateLocator(minticks=3, maxticks=7)
            axes.xaxis.set_major_locator(locator)
            axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        axes.grid(True, axis="y", color="#eeeeee", linewidth=0.8)
        if legend and (lines or marks):
            handles, labels = axes.get_legend_handles_labels()
            seen: dict[str, object] = {}
            for handle, label in zip(handles, labels):
                seen.setdefault(label, handle)
            axes.legend(list(seen.values()), list(seen), fontsize=7, frameon=False, loc="upper left",
                        bbox_to_anchor=(1.0, 1.0))
        figure.tight_layout()
        out = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        figure.savefig(out, format=fmt, metadata=metadata)
    return out.getvalue()


def strength_plot(points: Sequence[tuple[datetime, float, str]], *, render_min: float | None = None,
                  archive_below: float | None = None, ceiling: float | None = None, fmt: str = "svg") -> bytes:
    """A lesson's strength over time: ``points`` are ``(when, strength, event kind)``, oldest
    first (see :data:`KIND_STYLE` for the kinds); between two points the strength decayed.
    ``render_min`` and ``archive_below`` are drawn as thresholds."""
    if not points:
        raise PlotError("no strength history to draw")
    line = Line("strength", [p[0] for p in points], [p[1] for p in points], colour="#0072B2")
    by_kind: dict[str, tuple[list, list]] = {}
    for when, strength, kind in points:
        if kind in ("", "now"):  # a value on the curve only (before a change; where it stands now)
            continue
        xs, ys = by_kind.setdefault(kind, ([], []))
        xs.append(when)
        ys.append(strength)
    marks = []
    for kind, (xs, ys) in by_kind.items():
        label, colour, marker = KIND_STYLE.get(kind, (kind, "#444444", "o"))
        marks.append(Marks(label, xs, ys, colour=colour, marker=marker))
    hlines = []
    if render_min is not None:
        hlines.append((render_min, "rendered above"))
    if archive_below is not None:
        hlines.append((archive_below, "archived below"))
    top = max(max(p[1] for p in points), ceiling or 0.0, 1.0)
    return plot([line], marks, ylabel="strength", ylim=(0, top * 1.1), hlines=hlines, fmt=fmt)
