"""The Server tab's Sharing form shows the settings in force, and Apply with nothing changed is taken as is."""

from __future__ import annotations

import gradio as gr

from studio.backend.controller import StudioController
from studio.ui.server_tab import apply_sharing, sharing_form, titled
from tests.conftest import engine_settings


def form_as_shown(controller: StudioController) -> dict[str, object]:
    """The values the form's components hold when the page loads, as Apply would send them."""
    with gr.Blocks():
        form = sharing_form(controller.settings)
    return {name: component.value for name, component in form.items()}


def test_apply_with_nothing_changed_succeeds_and_changes_nothing(tmp_path):
    controller = StudioController(engine_settings(outputs_dir=tmp_path / "outputs"))
    try:
        before = controller.settings.model_dump()
        shown = form_as_shown(controller)
        assert all(value is not None for value in shown.values())  # a number for each, 0 where none is set
        answer = apply_sharing(controller, shown)
        assert answer.startswith("applied"), answer
        assert controller.settings.model_dump() == before
    finally:
        controller.close()


def test_zero_lifts_a_limit_and_a_number_sets_it(tmp_path):
    controller = StudioController(engine_settings(outputs_dir=tmp_path / "outputs", visitor_max_in_flight=2))
    try:
        shown = form_as_shown(controller)
        assert shown["visitor_max_in_flight"] == 2
        lifted = apply_sharing(controller, {**shown, "visitor_max_in_flight": 0})
        assert lifted.startswith("applied") and controller.settings.visitor_max_in_flight is None
        # Said in the form's words: each setting by its title, a lifted limit as what 0 means, never "None".
        assert "None" not in lifted and "in_flight" not in lifted, lifted
        assert f"{titled('visitor_max_in_flight')} = no limit" in lifted, lifted
        assert apply_sharing(controller, {**shown, "in_flight_slots": 3}).startswith("applied")
        assert controller.settings.in_flight_slots == 3
        refused = apply_sharing(controller, {**shown, "in_flight_slots": 1e12})
        assert refused.startswith("**not applied**") and controller.settings.in_flight_slots == 3
    finally:
        controller.close()
