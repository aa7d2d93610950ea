"""PNG plots for the simulations (matplotlib, the optional ``sim`` extra), headless."""

from __future__ import annotations

from pathlib import Path

__all__ = ["pyplot", "PlotsUnavailable", "save"]


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable("the plots need matplotlib: pip install -e '.[sim]' (or pass --no-plots)") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, footer: str) -> str:
    """Write ``fig`` to ``path`` with ``footer`` (what the figure is a model of) under it."""
    fig.text(0.01, 0.01, footer, fontsize=7, color="#555555", ha="left", va="bottom", wrap=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return str(path)
