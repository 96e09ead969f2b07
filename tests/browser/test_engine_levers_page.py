"""The embedded engine's levers on the Server tab, as the loopback operator sees them in Chromium: the group with its
six controls, shown for the embedded engine and hidden for another one picked; a bad value answered in words; and
Restart starting the engine with the levers set."""

from __future__ import annotations

from playwright.sync_api import Page, expect

# Each control of the group (its element id) and the label it shows.
CONTROLS = {
    "server-engine-step-cache": "Step cache",
    "server-engine-step-cache-interval": "Step cache interval",
    "server-engine-quantization": "Quantization",
    "server-engine-attention": "Attention kernel",
    "server-engine-previews": "Previews",
    "server-engine-preview-interval-s": "Preview interval (s)",
}


def open_server_tab(page: Page, url: str) -> None:
    page.goto(url)
    page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
    page.get_by_role("tab", name="Server").click()


def test_the_operator_sees_the_embedded_engines_levers_and_restart_starts_it_with_them(browser, studio_app):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        open_server_tab(page, studio_app.url)
        group = page.locator("#server-engine-levers")
        expect(group).to_be_visible()
        expect(group).to_contain_text("Embedded engine levers")
        for elem_id, label in CONTROLS.items():
            expect(group.locator(f"#{elem_id}")).to_be_visible()
            expect(group.locator(f"#{elem_id}")).to_contain_text(label)
        expect(page.locator("#server-engine-step-cache input")).to_have_value("off")
        expect(page.locator("#server-engine-quantization input")).to_have_value("none")
        expect(page.locator("#server-engine-attention input")).to_have_value("auto")

        # Of the server levers, the embedded engine's degrees show; vLLM-Omni's own (its quantization too) do not.
        page.locator("#server-levers").get_by_text("Server levers").click()
        expect(page.locator("#server-cfg-parallel-size")).to_be_visible()
        expect(page.locator("#server-levers-note")).to_contain_text("embedded engine reads")
        for vllm_only in ("ring-degree", "cache-backend", "quantization", "enforce-eager"):
            expect(page.locator(f"#server-{vllm_only}")).to_be_hidden()

        # Another engine picked: its servers do not read these levers, so the group goes; back to embedded, it is back.
        page.locator("#server-engine").get_by_text("remote", exact=True).click()
        expect(group).to_be_hidden()
        page.locator("#server-engine").get_by_text("embedded", exact=True).click()
        expect(group).to_be_visible()

        interval = page.locator("#server-engine-step-cache-interval input")
        interval.fill("0")
        page.locator("#server-restart").click()
        expect(page.locator("#server-result")).to_contain_text(
            "settings not applied: Step cache interval must be from 1 to 8, got 0", timeout=30_000
        )
        expect(page.locator("#server-state")).to_contain_text("ready")  # nothing was applied: it still serves

        # Levers the small model's engine takes on a CPU: previews off, and a longer preview interval.
        interval.fill("2")
        page.locator("#server-engine-previews input").uncheck()
        page.locator("#server-engine-preview-interval-s input").fill("1")
        page.locator("#server-restart").click()
        expect(page.locator("#server-result")).to_contain_text("started", timeout=120_000)
        state = page.locator("#server-state")
        expect(state).to_contain_text("--no-previews --preview-interval-s 1.0", timeout=30_000)
        expect(state).to_contain_text("ready")
    finally:
        page.close()
