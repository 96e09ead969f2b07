"""The bench's Pareto plot is drawn in the bench's other figures' colours and type sizes (studio/backend/bench/plots.py)."""

from __future__ import annotations

from matplotlib.colors import to_hex

from studio.backend.bench import plots
from studio.backend.bench.pareto import recommend
from studio.backend.bench.pareto_plot import FLEET_COLORS, LEGEND_SIZE, SLO_COLOR, pareto_figure
from tests.unit.test_pareto import cell

ROWS = [
    cell("1x4", 1, 4.0, 15.0),
    cell("2x2", 4, 6.0, 30.0),
    cell("4x1", 4, 8.0, 55.0),
    cell("2x2", 4, 6.5, 28.0, variant="teacache"),
]


def test_fleets_take_the_figures_colours_in_order():
    figure = pareto_figure(ROWS, recommend(ROWS, 40.0), 40.0)
    ax = figure.axes[0]
    fleets = [c for c in ax.collections if c.get_label() in {"1x4 base", "2x2 base", "4x1 base", "2x2 teacache"}]
    assert [to_hex(c.get_facecolor()[0]) for c in fleets] == [color.lower() for color in FLEET_COLORS[:4]]
    assert FLEET_COLORS[:2] == (plots.INFERENCE_COLOR, plots.QUEUE_COLOR)
    assert SLO_COLOR == plots.FAILED_COLOR


def test_titles_and_legends_read_at_the_figures_sizes():
    figure = pareto_figure(ROWS, recommend(ROWS, 40.0), 40.0)
    ax = figure.axes[0]
    reference = plots.versus_concurrency({"256p": [(1, 1.0), (2, 2.0)]}, "latency (s)", "Latency").axes[0]
    assert ax.title.get_fontsize() == reference.title.get_fontsize()
    assert {text.get_fontsize() for text in ax.get_legend().get_texts()} == {LEGEND_SIZE}
    assert not any(line.get_visible() for line in ax.get_xgridlines())  # the other figures draw no grid


def test_an_slo_above_every_point_is_told_in_the_legend_not_drawn():
    figure = pareto_figure(ROWS, recommend(ROWS, 500.0), 500.0)
    ax = figure.axes[0]
    assert "SLO 500 s: above every point" in [text.get_text() for text in ax.get_legend().get_texts()]
    assert max(ax.get_ylim()) < 500
