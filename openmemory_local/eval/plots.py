"""Plots as SVG (or PNG): small, deterministic figures for the local page and the evaluation.

One drawing function, :func:`plot`, takes plain data (lines and marked points over time or
over numbers) and returns the image's bytes; :func:`strength_plot` draws a lesson's strength
over time from the points :func:`openmemory_local.ui.data.strength_history` reads off the
``events`` table. ``openmemory ui`` serves them. The figures of ``openmemory eval`` (one PNG per
measure, the ``plot_*`` functions at the end) are made by the same figure and encoding code
(:func:`_new_figure`, :data:`_RC`, :func:`_encode`).

matplotlib is imported only when a figure is drawn (the ``ui`` extra installs it), through its
object API (``Figure``, no ``pyplot``: no global state, safe in a server thread), on the Agg
and SVG backends (no screen). The SVG is deterministic for the same data: no date in its
metadata, a fixed id salt, text kept as text.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
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

    with matplotlib.rc_context(_RC):
        figure = _new_figure(width, height)
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
        return _encode(figure, fmt)


#: The look every figure shares (the page's and the evaluation's): deterministic SVG (a fixed id
#: salt, text kept as text), small type, no top or right spine.
_RC = {"svg.hashsalt": "openmemory", "svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
       "axes.spines.right": False}


def _new_figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas (object API: no pyplot, no global state, no screen)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _encode(figure, fmt: str) -> bytes:
    """The figure's bytes: SVG without a date, PNG without the software stamp (the same data give
    the same bytes)."""
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format=fmt, metadata={"Date": None} if fmt == "svg" else {"Software": None})
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


# --- the provenance graph of a commons lesson (plain SVG, no matplotlib, no Graphviz) ---------------
#
# A record's chain, as the node gives it (``GET /v1/commons/{id}``: ``chain`` with ``parents`` and
# ``children``, recursively), drawn as a small layered graph: every record a box (short id, status,
# the start of its text), every ``derived_from`` link an arrow from the parent to the record derived
# from it, ancestors above, descendants below. Pure code over the chain: deterministic SVG text.

__all__ += ["chain_graph", "layered_layout", "provenance_svg", "STATUS_COLOURS"]

#: How each status is drawn: (fill, stroke).
STATUS_COLOURS = {
    "common": ("#e3f4ea", "#1e7b4f"),
    "candidate": ("#e8f0fb", "#0b5cad"),
    "faded": ("#f0f0f0", "#777777"),
    "revoked": ("#fde8e4", "#b3261e"),
    "absent": ("#ffffff", "#999999"),
}
_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _PAD = 230, 58, 24, 46, 12


def chain_graph(chain: dict) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """The records of a chain (id -> ``{id, status, text, type, truncated}``) and its edges
    ``(parent, child)``, sorted; the record the chain is of has ``focus``."""
    nodes: dict[str, dict] = {}
    edges: set[tuple[str, str]] = set()

    def add(entry: dict) -> str:
        rid = str(entry.get("id") or "")
        node = nodes.setdefault(rid, {"id": rid, "status": "absent", "text": None, "type": None})
        for key in ("status", "text", "type"):
            if entry.get(key) is not None and (node[key] in (None, "absent") or key != "status"):
                node[key] = entry[key]
        if entry.get("truncated"):
            node["truncated"] = True
        return rid

    def walk(entry: dict, name: str, depth: int = 0) -> None:
        rid = add(entry)
        if depth > 500:
            return
        for other in entry.get(name) or ():
            if not isinstance(other, dict) or not other.get("id"):
                continue
            oid = add(other)
            edges.add((oid, rid) if name == "parents" else (rid, oid))
            walk(other, name, depth + 1)

    walk(chain, "parents")
    walk(chain, "children")
    if chain.get("id"):
        nodes[str(chain["id"])]["focus"] = True
    return nodes, sorted(edges)


def layered_layout(nodes, edges) -> dict[str, tuple[int, int]]:
    """Each node's (layer, position): the layer is the longest path from a record without
    parents (a parent is always above what derives from it); within a layer, nodes are
    ordered by the mean position of their neighbours (two sweeps down and up), ties by id."""
    ids = sorted(nodes)
    parents: dict[str, list[str]] = {n: [] for n in ids}
    children: dict[str, list[str]] = {n: [] for n in ids}
    for a, b in edges:
        if a in parents and b in parents and a != b:
            parents[b].append(a)
            children[a].append(b)
    layer: dict[str, int] = {}
    state: dict[str, int] = {}  # 1 visiting, 2 done: a cycle (never in a real chain) is cut

    def depth(n: str) -> int:
        stack = [(n, iter(sorted(parents[n])))]
        state[n] = 1
        best = {n: 0}
        while stack:
            node, it = stack[-1]
            for p in it:
                if state.get(p) == 2:
                    best[node] = max(best[node], layer[p] + 1)
                elif state.get(p) is None:
                    state[p] = 1
                    best[p] = 0
                    stack.append((p, iter(sorted(parents[p]))))
                    break
            else:
                stack.pop()
                layer[node] = best[node]
                state[node] = 2
                if stack:
                    up = stack[-1][0]
                    best[up] = max(best[up], layer[node] + 1)
        return layer[n]

    for n in ids:
        if state.get(n) is None:
            depth(n)
    rows: dict[int, list[str]] = {}
    for n in ids:
        rows.setdefault(layer[n], []).append(n)
    order = {n: i for row in rows.values() for i, n in enumerate(row)}
    levels = sorted(rows)

    def arrange(level: int, neighbours: dict[str, list[str]]) -> None:
        def key(n: str) -> tuple:
            near = [order[m] for m in neighbours[n]]
            return (sum(near) / len(near) if near else order[n], n)

        rows[level].sort(key=key)
        for i, n in enumerate(rows[level]):
            order[n] = i

    for _ in range(2):
        for level in levels[1:]:
            arrange(level, parents)
        for level in levels[-2::-1]:
            arrange(level, children)
    return {n: (layer[n], order[n]) for n in ids}


def _xml(text) -> str:
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#39;"))


def _two_lines(text: str, n: int) -> list[str]:
    """``text`` wrapped in at most two lines of ``n`` characters, the second clipped."""
    import textwrap

    lines = textwrap.wrap(" ".join(str(text or "").split()), n, break_long_words=True) or [""]
    if len(lines) > 2:
        lines = [lines[0], lines[1][: n - 1] + "\u2026"]
    return lines


def provenance_svg(chain: dict, *, href=None, title: str = "provenance chain") -> bytes:
    """The chain drawn as an SVG (see the section's comment). ``href(node)`` may give a link
    for a record's box (an inline SVG follows it). Every text is escaped."""
    if not isinstance(chain, dict) or not chain.get("id"):
        raise PlotError("an empty chain: no record to draw")
    nodes, edges = chain_graph(chain)
    where = layered_layout(nodes, edges)
    widths: dict[int, int] = {}
    for layer, pos in where.values():
        widths[layer] = max(widths.get(layer, 0), pos + 1)
    columns = max(widths.values())
    width = _PAD * 2 + columns * _BOX_W + (columns - 1) * _GAP_X
    height = _PAD * 2 + len(widths) * _BOX_H + (len(widths) - 1) * _GAP_Y
    top = min(widths)

    def box(rid: str) -> tuple[float, float]:
        layer, pos = where[rid]
        span = widths[layer] * _BOX_W + (widths[layer] - 1) * _GAP_X
        x0 = (width - span) / 2
        return x0 + pos * (_BOX_W + _GAP_X), _PAD + (layer - top) * (_BOX_H + _GAP_Y)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="provenance" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{_xml(title)}" '
           'font-family="DejaVu Sans, sans-serif">',
           f"<title>{_xml(title)}</title>",
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#5b6475"/></marker></defs>']
    for parent, child in edges:
        (px, py), (cx, cy) = box(parent), box(child)
        x1, y1, x2, y2 = px + _BOX_W / 2, py + _BOX_H, cx + _BOX_W / 2, cy
        mid = (y1 + y2) / 2
        out.append(f'<g class="edge" data-from="{_xml(parent)}" data-to="{_xml(child)}"><title>{_xml(child[:16])} '
                   f'derives from {_xml(parent[:16])}</title><path d="M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f} '
                   f'{x2:.1f} {mid:.1f} {x2:.1f} {y2 - 1:.1f}" fill="none" stroke="#5b6475" stroke-width="1.4" '
                   'marker-end="url(#arrow)"/></g>')
    for rid in sorted(nodes, key=lambda n: where[n]):
        node = nodes[rid]
        x, y = box(rid)
        status = str(node.get("status") or "absent")
        fill, stroke = STATUS_COLOURS.get(status, STATUS_COLOURS["absent"])
        focus = bool(node.get("focus"))
        text = node.get("text") or ("(not held here)" if status == "absent" else f"({node.get('type') or 'record'})")
        link = href(node) if href is not None else None
        body = [f'<rect x="{x:.1f}" y="{y:.1f}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{3 if focus else 1.3}"'
                + (' stroke-dasharray="4 3"' if status == "absent" else "") + "/>",
                f'<text x="{x + 8:.1f}" y="{y + 17:.1f}" font-size="11" font-weight="700" fill="#1d2330">'
                f'{_xml(rid[:16])}</text>',
                f'<text x="{x + _BOX_W - 8:.1f}" y="{y + 17:.1f}" font-size="10" text-anchor="end" '
                f'fill="{stroke}">{_xml(status)}</text>',
                *(f'<text x="{x + 8:.1f}" y="{y + 34 + 14 * i:.1f}" font-size="10" fill="#1d2330">{_xml(line)}</text>'
                  for i, line in enumerate(_two_lines(text, 40)))]
        inner = (f"<title>{'this record: ' if focus else ''}{_xml(rid)} ({_xml(status)}): "
                 f"{_xml(node.get('text') or '')}</title>" + "".join(body))
        if link:
            inner = f'<a href="{_xml(link)}">{inner}</a>'
        out.append(f'<g class="node status-{_xml(status)}{" focus" if focus else ""}" data-id="{_xml(rid)}" '
                   f'data-status="{_xml(status)}">{inner}</g>')
    out.append("</svg>")
    return ("\n".join(out) + "\n").encode()


# --- the figures of ``openmemory eval`` (one PNG per measure) -----------------------------------------
#
# From :func:`openmemory_local.eval.measures.evaluate`'s data; each function is self-contained and named
# for what it plots; :func:`plot_evaluation` writes them all.

__all__ += ["plot_evaluation", "plot_repeat_yourself_rate", "plot_repeated_error_rate", "plot_prediction_accuracy",
           "plot_surprises_per_session", "plot_two_agent_result", "plot_retrieval_quality"]

_BLUE, _ORANGE, _GREEN, _GREY = _COLOURS[0], _COLOURS[1], _COLOURS[2], "#777777"


def _eval_figure(title: str, ylabel: str):
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig = _new_figure(7.0, 3.8)
        ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title, fontsize=11)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    return fig, ax


def _eval_save(fig, path: Path, empty: str | None = None) -> str:
    if empty:
        fig.axes[0].text(0.5, 0.5, empty, ha="center", va="center", transform=fig.axes[0].transAxes, color=_GREY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_encode(fig, "png"))
    return str(path)


def _weekly_bars(ax, weeks: list[dict], value: str, colour: str, counts: str | None = None) -> bool:
    points = [(w["week"], w.get(value)) for w in weeks if w.get(value) is not None]
    if not points:
        return False
    labels = [p[0] for p in points]
    bars = ax.bar(range(len(points)), [p[1] for p in points], color=colour, width=0.6)
    ax.set_xticks(range(len(points)), labels, rotation=30 if len(points) > 4 else 0, fontsize=8)
    ax.set_xlim(-0.5 - max(0, 3 - len(points)) / 2, len(points) - 0.5 + max(0, 3 - len(points)) / 2)
    ax.set_xlabel("week of (UTC)")
    if counts:
        for bar, w in zip(bars, [w for w in weeks if w.get(value) is not None]):
            ax.annotate(counts.format(**w), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7, color=_GREY)
    return True


def plot_repeat_yourself_rate(measure: dict, path) -> str:
    """Measure 1: corrections that restate an earlier one, as a share, per week."""
    o = measure["overall"]
    fig, ax = _eval_figure(f"Repeat-yourself rate: {o['repeats']} of {o['corrections']} corrections", "share")
    ax.set_ylim(0, 1.05)
    drawn = _weekly_bars(ax, measure["weeks"], "rate", _ORANGE, "{repeats}/{corrections}")
    return _eval_save(fig, Path(path), None if drawn else "no correction yet")


def plot_repeated_error_rate(measure: dict, path) -> str:
    """Measure 2: failures already described by an earlier lesson, per session, per week."""
    o = measure["overall"]
    fig, ax = _eval_figure(f"Repeated-error rate: {o['described']} of {o['failures']} failures in {o['sessions']} "
                           "sessions", "repeated errors per session")
    drawn = _weekly_bars(ax, measure["weeks"], "per_session", _ORANGE, "{described}/{sessions}")
    return _eval_save(fig, Path(path), None if drawn else "no session yet")


def plot_prediction_accuracy(measure: dict, path) -> str:
    """Measure 3: confirmed / decided, by the week predictions were decided."""
    o = measure["overall"]
    fig, ax = _eval_figure(f"Prediction accuracy: {o['confirmed']} confirmed of {o['decided']} decided "
                           f"({o['open']} open)", "confirmed / decided")
    ax.set_ylim(0, 1.05)
    drawn = _weekly_bars(ax, measure["weeks"], "accuracy", _GREEN, "{confirmed}/{failed}")
    return _eval_save(fig, Path(path), None if drawn else "no prediction decided yet")


def plot_surprises_per_session(measure: dict, path) -> str:
    """Measure 4: failures and corrections per session, per week."""
    o = measure["overall"]
    fig, ax = _eval_figure(f"Surprises per session: {o['surprises']} in {o['sessions']} sessions", "per session")
    drawn = _weekly_bars(ax, measure["weeks"], "per_session", _BLUE, "{surprises}/{sessions}")
    return _eval_save(fig, Path(path), None if drawn else "no session yet")


def plot_two_agent_result(measure: dict, path) -> str:
    """Measure 5: agent B's repeated-error rate on A-only errors by day, per arm."""
    fig, ax = _eval_figure("Two agents: B's repeated-error rate on errors only A had met", "rate")
    drawn = False
    for colour, (name, arm) in zip((_BLUE, _ORANGE, _GREEN), (measure.get("arms") or {}).items()):
        days = [(d.get("day"), d.get("rate")) for d in arm.get("by_day") or [] if d.get("rate") is not None]
        if days:
            ax.plot([d for d, _ in days], [r for _, r in days], marker="o", markersize=3, color=colour, label=name)
            drawn = True
    if drawn:
        ax.set_xlabel("day")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8)
    return _eval_save(fig, Path(path), None if drawn else measure.get("status", "no experiment"))


def plot_retrieval_quality(measure: dict, path) -> str:
    """Measure 6: recall@1/3/10 and MRR per method."""
    overall = {m: s for m, s in measure["overall"].items() if s.get("queries")}
    queries = max((s["queries"] for s in overall.values()), default=0)
    fig, ax = _eval_figure(f"Retrieval quality: finding the lesson's evidence ({queries} failures)", "score")
    ax.set_ylim(0, 1.05)
    keys = ("recall@1", "recall@3", "recall@10", "mrr")
    width = 0.8 / max(len(overall), 1)
    for n, (method, s) in enumerate(overall.items()):
        xs = [k + n * width for k in range(len(keys))]
        ax.bar(xs, [s[k] or 0 for k in keys], width=width, label=method,
               color=(_BLUE, _GREY, _GREEN, _ORANGE, "#CC79A7")[n % 5])
    if overall:
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], list(keys))
        ax.legend(fontsize=8)
    return _eval_save(fig, Path(path), None if overall else "no failure yet that an earlier lesson described")


def plot_evaluation(result: dict, folder) -> list[str]:
    """Every figure of an evaluation into ``folder``; the files written."""
    folder = Path(folder)
    m = result["measures"]
    suffix = "-split" if result.get("split") else ""
    return [
        plot_repeat_yourself_rate(m["repeat_yourself"], folder / f"1-repeat-yourself-rate{suffix}.png"),
        plot_repeated_error_rate(m["repeated_errors"], folder / f"2-repeated-error-rate{suffix}.png"),
        plot_prediction_accuracy(m["prediction_accuracy"], folder / f"3-prediction-accuracy{suffix}.png"),
        plot_surprises_per_session(m["surprises_per_session"], folder / f"4-surprises-per-session{suffix}.png"),
        plot_two_agent_result(m["two_agents"], folder / f"5-two-agents{suffix}.png"),
        plot_retrieval_quality(m["retrieval"], folder / f"6-retrieval-quality{suffix}.png"),
    ]
