"""The Bench tab: the bench's form (named by the fields of the bench's model, which checks it), progress, the
cells table, the recommendation and the PNG plots the bench wrote; after a layout bench, a fleet of it applied to
the studio (asked first: it restarts the servers), and a capacity plan from its report (the Plan group)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from studio import tiers
from studio.backend.face import DEFAULT_ATTAINMENT, BenchConfig, StudioController, engine_kind
from studio.config import StudioSettings
from studio.ui import bench_view, tables
from studio.ui.file_links import FileLinks
from studio.ui.identity import PageAccess

INTRO = (
    "Measure the endpoints this studio uses (the Server view): every tier x guardrails x concurrency cell, closed "
    "loop (or open loop at a request rate), warm-up excluded. The same engine as `omni-studio bench`. Other work "
    "sent meanwhile skews the figures. With layouts or variants, the bench stops the studio's servers (their GPUs "
    "are needed), runs the cells on each fleet in turn, and starts the servers again as they were; requests "
    "running on them then fail. The fleets run where the studio's servers do: on this machine, or on its Ray cluster "
    "(--cluster ray), each replica on the node Ray places it on."
)
# Variants as the engine's own flags: vLLM-Omni's serve flags, or the embedded engine's levers.
VARIANTS_EXAMPLE = 'base = ""\nteacache = "--cache-backend tea_cache"\neager = "--enforce-eager"'
EMBEDDED_VARIANTS_EXAMPLE = 'base = ""\ntaylor = "--step-cache taylor"\nfewer_previews = "--preview-interval-s 2"'
PLAN_INTRO = (
    "From the last bench's report, as `omni-studio plan` makes it: each fleet it measured, simulated under Poisson "
    "arrivals at the rate given as the studio drives it (in-flight slots, the router, each server's queue and "
    "batches): p50, p90 and the share of requests within the SLO; the fleet of fewest GPUs that keeps the share "
    "asked, the most videos/min each sustains, and the GPUs the rate needs. Service times are as the bench "
    "measured them; one tier at a time. plan.json and plan.png go beside the report."
)


def variants_example(settings: StudioSettings) -> str:
    """Variants as the engine of `settings` takes them: the embedded engine's own levers, else vLLM-Omni's flags."""
    kind = engine_kind(settings)
    return EMBEDDED_VARIANTS_EXAMPLE if kind.managed and not kind.reads_serve_levers else VARIANTS_EXAMPLE


def variants_info(settings: StudioSettings) -> str:
    """The variants' help under their box: the field's description, with a variant of the running engine's."""
    lever = next(line for line in variants_example(settings).splitlines() if '""' not in line)
    return f"{described('variants')}; e.g. {lever}"


def variants_box(settings: StudioSettings) -> dict[str, str]:
    """What the variants box says of the engine that runs now (the Server view may change it)."""
    return {"placeholder": variants_example(settings), "info": variants_info(settings)}


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
        defaults = controller.run_defaults(settings.default_tier)
        form["frames"] = gr.Number(value=defaults.frames, precision=0, label="Frames", elem_id="bench-frames")
        form["steps"] = gr.Number(value=defaults.steps, precision=0, label="Steps", elem_id="bench-steps")
        form["request_rate"] = gr.Number(value=0, label="Request rate /s (0: closed loop)", elem_id="bench-rate")
        form["warmup"] = gr.Number(
            value=default("warmup"),
            precision=0,
            label="Warm-up requests",
            info=described("warmup"),
            elem_id="bench-warmup",
        )
        form["slo_s"] = gr.Number(value=0, label="SLO seconds (0: none)", elem_id="bench-slo")
    with gr.Row():
        form["layouts"] = gr.Textbox(
            value="",
            label="Layouts (REPLICASxWIDTH, comma list; empty: the studio's servers as they are)",
            info=described("layouts"),
            elem_id="bench-layouts",
        )
        form["variants"] = gr.Textbox(
            value="",
            lines=3,
            label='Server variants (name = "extra serve args", a line each; empty: the settings as they are)',
            **variants_box(settings),
            elem_id="bench-variants",
        )
    form["prompts"] = gr.Textbox(
        value="", lines=2, label="Prompts (one per line; empty: the built-in ones)", elem_id="bench-prompts"
    )
    return form


def build_bench_tab(controller: StudioController, access: PageAccess, opened: Any = None) -> None:
    """The operator's tab: a bench loads every server of the studio, so only an operator may run one. `opened`:
    the page's load event, when the tab shows the last bench's results again and the variants box the running
    engine's flags. Long by its layout and its listeners, a few lines each: Gradio ties a listener to components
    declared in the same Blocks; the work is bench_view's."""
    links = FileLinks(controller.store.root)
    gr.Markdown(INTRO)
    form = bench_form(controller)
    run = gr.Button("Run bench", variant="primary", elem_id="bench-run")
    status = gr.Markdown("", elem_id="bench-status")
    summary = gr.Dataframe(
        bench_view.BenchUpdate("").summary, interactive=False, elem_id="bench-summary", label="Cells"
    )
    recommendation = gr.Markdown("", elem_id="bench-recommendation")
    with gr.Row():
        fleet = gr.Dropdown(
            [],
            label="Fleet to apply (after a bench with layouts or variants; the recommended one first)",
            interactive=True,
            elem_id="bench-apply-choice",
        )
        apply = gr.Button("Apply this layout", elem_id="bench-apply", scale=0, min_width=200, size="md")
    with gr.Row(visible=False, elem_id="bench-apply-ask") as ask:
        question = gr.Markdown("", elem_id="bench-apply-question")
        confirm = gr.Button("Yes, restart the servers", variant="stop", elem_id="bench-apply-confirm", scale=0)
        cancel = gr.Button("Cancel", elem_id="bench-apply-cancel", scale=0)
    applied = gr.Markdown("", elem_id="bench-apply-result")
    # Two plots to a row, each whole at about its own size (page.py's CSS lets the gallery grow to hold them all):
    # axes and legends read without opening one; a click opens it larger, none is opened at first.
    plots = gr.Gallery(
        label="Plots",
        columns=2,
        fit_columns=False,
        height="auto",
        object_fit="contain",
        preview=False,
        elem_id="bench-plots",
    )
    report = gr.HTML("", elem_id="bench-report")  # a link through the studio's file route
    build_plan_section(controller, access, links)

    def shown(update: bench_view.BenchUpdate, request: gr.Request) -> dict[gr.Component, Any]:
        values: dict[gr.Component, Any] = {
            status: update.status,
            summary: tables.decimals(update.summary),
            recommendation: update.recommendation,
            plots: [url for plot in update.plots if (url := links.url(plot, request))],
            report: links.download(Path(update.report), request, "Download report.json") if update.report else "",
        }
        if update.fleets:
            values[fleet] = gr.Dropdown(choices=list(update.fleets), value=update.recommended)
        return values

    @run.click(inputs_kwargs=form, outputs=[status, summary, recommendation, plots, report, fleet], api_name="bench")
    async def on_bench(request: gr.Request, profile: gr.OAuthProfile | None, **values: Any):
        access.require_operator(request, profile, action="run a bench")
        async for update in bench_view.run_bench_view(controller, values):
            yield shown(update, request)

    if opened is None:
        return
    variants = form["variants"]

    # A dict of updates: Gradio leaves the outputs it does not name as they are (a list or tuple would have to hold
    # one value per output).
    @gr.on(
        [opened],
        outputs=[status, summary, recommendation, plots, report, fleet, variants],
        show_progress="hidden",
        api_visibility="private",
    )
    def on_open(request: gr.Request, profile: gr.OAuthProfile | None) -> dict[gr.Component, Any]:
        box = gr.Textbox(**variants_box(controller.settings))
        visitor = access.visitor(request, profile)
        last = bench_view.last_bench(controller) if visitor is not None and visitor.operator else None
        if last is None:  # none yet, or not an operator's to see: the rest stays as it was built (skipped)
            return {variants: box}
        return {**shown(last, request), fleet: gr.Dropdown(choices=list(last.fleets), value=last.recommended)} | {
            variants: box
        }

    @apply.click(
        inputs_kwargs={"label": fleet},
        outputs=[ask, question, applied],
        api_name="ask_apply_layout",  # named: operator_calls refuses it to visitors by this name
        api_visibility="private",
    )
    def on_ask(label: str | None, request: gr.Request, profile: gr.OAuthProfile | None):
        access.require_operator(request, profile, action="apply a layout")
        chosen = bench_view.benched_fleet(controller, label)
        if chosen is None:
            return {ask: gr.Row(visible=False), applied: "pick a fleet of the last bench with layouts or variants"}
        return {ask: gr.Row(visible=True), question: bench_view.apply_question(chosen), applied: ""}

    @confirm.click(inputs_kwargs={"label": fleet}, outputs=[ask, applied], api_name="apply_layout")
    def on_apply(label: str | None, request: gr.Request, profile: gr.OAuthProfile | None):
        access.require_operator(request, profile, action="apply a layout")
        chosen = bench_view.benched_fleet(controller, label)
        if chosen is None:
            return {ask: gr.Row(visible=False), applied: "pick a fleet of the last bench with layouts or variants"}
        return {ask: gr.Row(visible=False), applied: bench_view.apply_fleet(controller, chosen)}

    @cancel.click(outputs=ask, api_name="cancel_apply_layout", api_visibility="private")
    def on_cancel(request: gr.Request, profile: gr.OAuthProfile | None):
        access.require_operator(request, profile, action="apply a layout")
        return gr.Row(visible=False)


def build_plan_section(controller: StudioController, access: PageAccess, links: FileLinks) -> None:
    """The plan: the fleet for a rate and an SLO from the last bench, with its predicted attainment; an
    operator's alone."""
    with gr.Accordion("Plan: the fleet for a rate and an SLO", open=False, elem_id="bench-plan"):
        gr.Markdown(PLAN_INTRO)
        with gr.Row():
            plan_form = {
                "rate_per_min": gr.Number(value=10, label="Rate (videos/min, Poisson)", elem_id="bench-plan-rate"),
                "slo_s": gr.Number(value=60, label="SLO seconds", elem_id="bench-plan-slo"),
                "attainment": gr.Number(
                    value=DEFAULT_ATTAINMENT * 100, label="Within SLO (% of requests)", elem_id="bench-plan-attainment"
                ),
                "gpus": gr.Number(
                    value=0,
                    precision=0,
                    label="GPUs (0: the fleets that fit this machine)",
                    elem_id="bench-plan-gpus",
                ),
            }
        plan_run = gr.Button("Plan", elem_id="bench-plan-run")
        plan_text = gr.Markdown("", elem_id="bench-plan-result")
        plan_plot = gr.Gallery(
            label="Predicted attainment vs rate",
            columns=1,
            fit_columns=False,
            height="auto",
            object_fit="contain",
            preview=False,
            elem_id="bench-plan-plot",
        )
        plan_file = gr.HTML("", elem_id="bench-plan-file")

    @plan_run.click(inputs_kwargs=plan_form, outputs=[plan_text, plan_plot, plan_file], api_name="plan")
    async def on_plan(request: gr.Request, profile: gr.OAuthProfile | None, **values: Any):
        access.require_operator(request, profile, action="plan a fleet")
        update = await bench_view.plan_view(controller, values)
        return {
            plan_text: update.text,
            plan_plot: [url for url in [links.url(update.plot, request)] if url] if update.plot else [],
            plan_file: links.download(Path(update.plan), request, "Download plan.json") if update.plan else "",
        }
