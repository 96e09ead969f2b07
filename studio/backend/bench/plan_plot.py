"""The plan as files: plan.json, and its figure (plan.png), predicted attainment (the share of requests within the
SLO) against the arrival rate, a line per fleet, with the attainment asked, the rate asked and each fleet's capacity
marked. Drawn as the bench's other figures are (studio/backend/bench/plots.py, pareto_plot.py): their colours, markers and type
sizes."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display anywhere: render to images only
from matplotlib.figure import Figure

from studio.backend.bench.pareto_plot import FLEET_COLORS, FRONT_COLOR, LABEL_SIZE, LEGEND_SIZE, MARKERS, SLO_COLOR
from studio.backend.bench.plan import PLAN_FILE, PLAN_PLOT, CapacityPlan


def plan_figure(plan: CapacityPlan) -> Figure:
    # Wide, as the panel it is shown in: a narrow image would sit small in it.
    fig = Figure(figsize=(11.0, 4.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    target = plan.inputs.attainment * 100
    for index, curve in enumerate(plan.curves):
        color = FLEET_COLORS[index % len(FLEET_COLORS)]
        marker = MARKERS[index % len(MARKERS)]
        forecast = plan.forecast(curve.label)
        chosen = " (recommended)" if curve.label == plan.choice.label else ""
        fits = "" if forecast is None or forecast.fits else " (does not fit)"
        ax.plot(
            curve.rates_per_min,
            [a * 100 for a in curve.attainment],
            color=color,
            marker=marker,
            markersize=4,
            linewidth=1.5 if chosen else 1,
            label=f"{curve.label}{chosen}{fits}",
            zorder=3,
        )
        if forecast is not None and forecast.max_rate_per_min > 0:  # the most it sustains at the attainment asked
            ax.scatter([forecast.max_rate_per_min], [target], marker=marker, s=60, color=color, zorder=4)
            ax.annotate(
                f"{forecast.max_rate_per_min:.0f}/min",
                (forecast.max_rate_per_min, target),
                textcoords="offset points",
                xytext=(4, -12 - 9 * index),
                fontsize=LABEL_SIZE,
                color=color,
            )
    ax.axhline(
        target, color=SLO_COLOR, linestyle=":", linewidth=1, label=f"asked: {target:g}% within {plan.inputs.slo_s:g} s"
    )
    ax.axvline(
        plan.inputs.rate_per_min,
        color=FRONT_COLOR,
        linestyle="--",
        linewidth=1,
        label=f"rate asked: {plan.inputs.rate_per_min:g}/min",
    )
    ax.set_ylim(-2, 102)
    ax.set_xlim(left=0)
    ax.set_xlabel("arrivals, videos / min (Poisson)")
    ax.set_ylabel(f"requests within {plan.inputs.slo_s:g} s (%)")
    ax.set_title(f"{plan.tier}: predicted attainment vs rate")
    ax.legend(fontsize=LEGEND_SIZE, loc="lower left")
    return fig


def write_plan(plan: CapacityPlan, out: Path) -> tuple[Path, Path]:
    """plan.json and plan.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / PLAN_FILE
    path.write_text(plan.model_dump_json(indent=2))
    plot = out / PLAN_PLOT
    plan_figure(plan).savefig(plot)
    return path, plot
