"""openmemory_local.eval.plots: figures as SVG or PNG, deterministic, with clear errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from openmemory_local.eval.plots import Line, Marks, PlotError, plot, strength_plot

T0 = datetime(2026, 2, 11, 23, 59, 59, tzinfo=timezone.utc)
POINTS = [(T0, 1.0, "learned"), (T0 + timedelta(days=1), 1.0, ""), (T0 + timedelta(days=1), 1.5, "strengthened"),
          (T0 + timedelta(days=1), 2.0, "confirmed"), (T0 + timedelta(days=20), 1.5, "failed"),
          (T0 + timedelta(days=21), 1.5, "vetoed"), (T0 + timedelta(days=22), 1.45, "now")]


def test_a_strength_plot_is_a_deterministic_svg():
    svg = strength_plot(POINTS, render_min=0.5, archive_below=0.15, ceiling=5.0)
    text = svg.decode()
    assert text.startswith("<?xml") and "<svg" in text and text.rstrip().endswith("</svg>")
    for label in ("learned", "strengthened", "prediction confirmed", "prediction failed", "vetoed", "rendered above",
                  "archived below", "strength"):
        assert label in text, label
    assert "now" not in [line.strip() for line in text.splitlines()]  # where it stands is on the line, unmarked
    assert strength_plot(POINTS, render_min=0.5, archive_below=0.15, ceiling=5.0) == svg  # same data, same bytes


def test_png_and_numbers():
    png = plot([Line("recall@5", [1, 2, 3], [0.2, 0.5, 0.7], step=True)], [Marks("baseline", [2], [0.4])],
               title="a figure", xlabel="night", ylabel="share", fmt="png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("call, message", [
    (lambda: plot([Line("a", [1, 2], [1.0])]), "2 x values but 1 y values"),
    (lambda: plot([], fmt="pdf"), "unknown plot format"),
    (lambda: strength_plot([]), "no strength history"),
])
def test_bad_data_is_a_clear_error(call, message):
    with pytest.raises(PlotError, match=message):
        call()
