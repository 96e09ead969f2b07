"""The Bench tab: the bench's form (named by the fields of the bench's model, which checks it), progress, the
cells table, the recommendation and the PNG plots the bench wrote."""

from __future__ import annotations

from typing import Any

import gradio as gr

from studio import tiers
from studio.backend.bench_config import BenchConfig
from studio.backend.controller import StudioController
from studio.ui import bench_view
from studio.ui.identity import PageAccess

INTRO = (
    "Measure the endpoints this studio uses (the Server view): every tier x guardrails x concurrency cell, closed "
    "loop (or open loop at a request rate), warm-up excluded. The same engine as `omni-studio bench`. Other work "
    "sent meanwhile skews the figures."
)


# Fewer than the CLI's default: someone at the page waits for the result.
PAGE_REQUESTS = 8


def described(name: str) -> str | None:
    """A bench setting's description, written once on the model, as the field's help under its label."""
    return BenchConfig.model_fields[name].description


def default(name: str) -> Any:
    return BenchConfig.model_fields[name].get_default(call_default_factory=True)


def bench_form(controller: StudioController) -> dict[str, gr.Component]:
    """The form's inputs, laid out, keyed by BenchConfig's field names."""
    settings = controller.settings
    form: dict[str, gr.Component] = {}
    with gr.Row():
        form["requests"] = gr.Number(
            value=PAGE_REQUESTS,
            precision=0,
            label="Requests per cell",
            elem_id="bench-requests",
        )
        form["concurrencies"] = gr.Textbox(
            value=",".join(map(str, default("concurrencies"))),
            label="Concurrency (comma list)",
            info=described("concurrencies"),
            elem_id="bench-concurrency",
        )
        form["tiers"] = gr.CheckboxGroup(
            list(tiers.TIERS), value=[settings.default_tier], label="Tiers", elem_id="bench-tiers"
        )
        form["guardrails"] = gr.CheckboxGroup(
            ["on", "off"],
            value=["on" if on else "off" for on in default("guardrails")],
            label="Guardrails",
            elem_id="bench-guardrails",
        )
    with gr.Row():
        form["aspect"] = gr.Dropdown(
            list(tiers.ASPECTS), value=default("aspect"), label="Aspect", elem_id="bench-aspect"
        )
        form["frames"] = gr.Number(
            value=controller.default_frames(settings.default_tier), precision=0, label="Frames", elem_id="bench-frames"
        )
        form["steps"] = gr.Number(
            value=settings.default_steps or tiers.DEFAULT_STEPS, precision=0, label="Steps", elem_id="bench-steps"
        )
        form["request_rate"] = gr.Number(value=0, label="Request rate /s (0: closed loop)", elem_id="bench-rate")
        form["warmup"] = gr.Number(
            value=default("warmup"),
            precision=0,
            label="Warm-up requests",
            info=described("warmup"),
            elem_id="bench-warmup",
        )
        form["slo_s"] = gr.Number(value=0, label="SLO seconds (0: none)", elem_id="bench-slo")
    form["prompts"] = gr.Textbox(
        value="", lines=2, label="Prompts (one per line; empty: the built-in ones)", elem_id="bench-prompts"
    )
    return form


def build_bench_tab(controller: StudioController, access: PageAccess) -> None:
    """The operator's tab: a bench loads every server of the studio, so only an operator may run one."""
    gr.Markdown(INTRO)
    form = bench_form(controller)
    run = gr.Button("Run bench", variant="primary", elem_id="bench-run")
    status = gr.Markdown("", elem_id="bench-status")
    summary = gr.Dataframe(
        bench_view.BenchUpdate("").summary, interactive=False, elem_id="bench-summary", label="Cells"
    )
    recommendation = gr.Markdown("", elem_id="bench-recommendation")
    # One plot per row, whole: their axes and legends are readable without opening each one.
    plots = gr.Gallery(label="Plots", columns=1, height="auto", object_fit="contain", elem_id="bench-plots")
    report = gr.File(label="report.json", interactive=False, elem_id="bench-report")

    @run.click(inputs_kwargs=form, outputs=[status, summary, recommendation, plots, report], api_name="bench")
    async def on_bench(request: gr.Request, profile: gr.OAuthProfile | None, **values: Any):
        access.require_operator(request, profile, action="run a bench")
        async for update in bench_view.run_bench_view(controller, values):
            yield {
                status: update.status,
                summary: update.summary,
                recommendation: update.recommendation,
                plots: update.plots,
                report: update.report,
            }
