"""The bench's Pareto plot (PNG, matplotlib like the bench's other figures): p90 latency vs videos/min per
device, one panel per tier, a marker per fleet (layout x variant) at each concurrency, the Pareto set joined,
the SLO drawn, the recommended cell ringed. Drawn in the colours and type sizes of the bench's other figures
(studio/backend/bench/plots.py), which are the page's own plots' colours."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # no display anywhere: render to images only
from matplotlib.figure import Figure

from studio.backend.bench.pareto import Recommendation, Row, fronts, group_of
from studio.backend.bench.plots import FAILED_COLOR, INFERENCE_COLOR, OTHER_COLOR, QUEUE_COLOR

MARKERS = "osD^v<>pPX*h"
# A fleet's colour: the figures' inference blue and queue amber first, then muted tones beside them; the marker
# tells fleets apart where the colours come round again.
FLEET_COLORS = (INFERENCE_COLOR, QUEUE_COLOR, "#6a994e", "#8e6c8a", "#2f4858", OTHER_COLOR)
FRONT_COLOR = "#333333"
SLO_COLOR = FAILED_COLOR
LEGEND_SIZE = 8  # as the other figures' legends
LABEL_SIZE = 7  # a marker's concurrency, as the timeline's request labels


def pareto_figure(rows: Sequence[Row], recommendations: Sequence[Recommendation], slo_s: float | None) -> Figure:
    groups = fronts(rows)
    panels = max(1, len(groups))
    fig = Figure(figsize=(6.0 * panels, 4.2), dpi=100, layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    fleets = list(dict.fromkeys(f"{r['layout']} {r['variant']}" for r in rows))
    chosen = {rec.group: rec.row for rec in recommendations}
    for ax, (group, front) in zip(axes, groups.items(), strict=False):
        mine = [r for r in rows if group_of(r) == group]
        kind = next((r["device_kind"] for r in mine if r.get("device_kind")), "device")
        for index, fleet in enumerate(fleets):
            points = [
                r
                for r in mine
                if f"{r['layout']} {r['variant']}" == fleet
                and r.get("videos_per_min_per_device") is not None
                and r.get("latency_p90_s") is not None
            ]
            if not points:
                continue
            xs = [r["videos_per_min_per_device"] for r in points]
            ys = [r["latency_p90_s"] for r in points]
            color = FLEET_COLORS[index % len(FLEET_COLORS)]
            ax.scatter(xs, ys, marker=MARKERS[index % len(MARKERS)], s=45, color=color, label=fleet, zorder=3)
            for r, x, y in zip(points, xs, ys, strict=True):
                ax.annotate(
                    f"c={r['concurrency']}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=LABEL_SIZE
                )
        if front:
            ax.plot(
                [r["videos_per_min_per_device"] for r in front],
                [r["latency_p90_s"] for r in front],
                color=FRONT_COLOR,
                linestyle="--",
                linewidth=1,
                label="Pareto set",
                zorder=2,
            )
        highest = max((r["latency_p90_s"] for r in mine if r.get("latency_p90_s") is not None), default=0.0)
        title = f"{group}: latency vs throughput"
        if slo_s is not None and slo_s <= 1.5 * highest:
            ax.axhline(slo_s, color=SLO_COLOR, linestyle=":", linewidth=1, label=f"SLO {slo_s:g} s")
        elif slo_s is not None:  # drawn, it would flatten every point against the axis: the legend tells it
            ax.plot([], [], color=SLO_COLOR, linestyle=":", linewidth=1, label=f"SLO {slo_s:g} s: above every point")
        best = chosen.get(group)
        if best is not None and best.get("videos_per_min_per_device") is not None:
            ax.scatter(
                [best["videos_per_min_per_device"]],
                [best["latency_p90_s"]],
                s=260,
                facecolors="none",
                edgecolors=SLO_COLOR,
                linewidths=1.5,
                label="recommended",
                zorder=4,
            )
        ax.margins(x=0.12, y=0.1)  # room for the concurrency labels at the edges
        ax.set_xlabel(f"videos / min per {kind}")
        ax.set_ylabel("p90 latency (s)")
        ax.set_title(title)  # the other figures' title size: the x label names the device
        ax.legend(fontsize=LEGEND_SIZE, loc="best")
    return fig
