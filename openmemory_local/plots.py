"""Figures of ``openmemory eval``: one PNG per measure, from :func:`openmemory_local.evaluate.evaluate`'s data.

matplotlib (the ``eval`` extra) is imported only here, and this module only when a figure is
asked for (``openmemory eval --plots DIR``): no other command imports it. The object API is used
(``Figure`` and the Agg canvas, no ``pyplot``: no global state, no screen). Each function is
self-contained and named for what it plots; :func:`plot_evaluation` writes them all.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["plot_evaluation", "plot_repeat_yourself_rate", "plot_repeated_error_rate", "plot_prediction_accuracy",
           "plot_surprises_per_session", "plot_two_agent_result", "plot_retrieval_quality"]

_BLUE, _ORANGE, _GREEN, _GREY = "#0072B2", "#D55E00", "#009E73", "#777777"


def _eval_figure(title: str, ylabel: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 3.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title, fontsize=11)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    return fig, ax


def _eval_save(fig, path: Path, empty: str | None = None) -> str:
    if empty:
        fig.axes[0].text(0.5, 0.5, empty, ha="center", va="center", transform=fig.axes[0].transAxes, color=_GREY)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
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
