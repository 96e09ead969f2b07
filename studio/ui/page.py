"""The page's layout. Stable elem_ids so browser tests can find things."""

from __future__ import annotations

import gradio as gr

from studio import tiers
from studio.backend.controller import StudioController
from studio.ui import handlers

CSS = """
#engine-status { font-size: 0.9em; opacity: 0.85; }
"""


def build_page(controller: StudioController) -> gr.Blocks:
    settings = controller.settings
    with gr.Blocks(title="Omni Studio") as demo:
        gr.Markdown("# Omni Studio\nVideo generation on vLLM-Omni and the embedded engine.")
        engine_status = gr.Markdown(controller.engine_summary(), elem_id="engine-status")
        with gr.Row():
            with gr.Column(scale=2):
                prompt = gr.Textbox(
                    label="Prompt",
                    lines=3,
                    elem_id="prompt",
                    placeholder="a red circle moving left on a white background",
                )
                with gr.Row():
                    tier = gr.Radio(list(tiers.TIERS), value=settings.default_tier, label="Tier", elem_id="tier")
                    aspect = gr.Dropdown(list(tiers.ASPECTS), value="16:9", label="Aspect", elem_id="aspect")
                with gr.Row():
                    # Limits are checked by the back end, which says what is wrong in the status line.
                    frames = gr.Number(
                        value=controller.default_frames(settings.default_tier),
                        label="Frames",
                        precision=0,
                        elem_id="frames",
                    )
                    steps = gr.Number(
                        value=settings.default_steps or tiers.DEFAULT_STEPS,
                        label="Steps",
                        precision=0,
                        elem_id="steps",
                    )
                    guardrails = gr.Checkbox(value=True, label="Guardrails", elem_id="guardrails")
                generate = gr.Button("Generate", variant="primary", elem_id="generate")
            with gr.Column(scale=3):
                video = gr.Video(label="Video", elem_id="video", autoplay=True, loop=True, interactive=False)
                status = gr.Markdown("", elem_id="status")

        async def on_generate(
            prompt_text: str, tier_value: str, aspect_value: str, guard: bool, steps_value, frames_value
        ):
            async for result in handlers.generate_one(
                controller,
                prompt_text,
                tier_value,
                aspect_value,
                guard,
                steps=None if steps_value in (None, "") else int(steps_value),
                frames=None if frames_value in (None, "") else int(frames_value),
            ):
                yield result

        generate.click(
            on_generate,
            [prompt, tier, aspect, guardrails, steps, frames],
            [video, status],
            concurrency_limit=None,
            api_name="generate",
        )
        timer = gr.Timer(1.0)
        timer.tick(controller.engine_summary, None, engine_status, show_progress="hidden", api_visibility="private")
        demo.load(controller.start_in_background, None, None, api_visibility="private")
    return demo
