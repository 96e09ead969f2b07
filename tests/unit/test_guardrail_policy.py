"""Who may switch the guardrail off: operators always; visitors only where the operator made it optional
(visitor_guardrails, default forced). Where a visitor asks it off under forced, the run keeps it on and says so."""

from __future__ import annotations

import gradio as gr
import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.spec import GUARDRAILS_KEPT_ON, RunSpec
from studio.backend.servers.supervisor import free_port
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.ui.server_tab import apply_sharing, sharing_form
from tests.conftest import engine_settings

BOB = Visitor(id="bob", name="bob")
ALICE = Visitor(id="alice", name="alice", operator=True)


def test_a_run_with_the_guardrail_on_tells_no_server_to_skip_it():
    asked = RunSpec(
        prompts=["gore"], guardrails=False, extra_params={"guardrails": False, "use_resolution_template": 1}
    )
    on = asked.with_guardrails_on()
    assert on.guardrails and on.extra_params == {"use_resolution_template": 1}
    assert all("guardrails" not in request.extra_params for request in on.build_requests())
    assert asked.guardrails_note(on) == GUARDRAILS_KEPT_ON and "--visitor-guardrails optional" in GUARDRAILS_KEPT_ON
    # Off by an extra_params key alone is asking it off too.
    sneaky = RunSpec(prompts=["gore"], extra_params={"guardrails": False})
    assert sneaky.asks_guardrails_off and not sneaky.with_guardrails_on().asks_guardrails_off
    plain = RunSpec(prompts=["a cat"])
    assert plain.with_guardrails_on() is plain and plain.guardrails_note(plain) is None


@pytest.fixture
def attached(tmp_path):
    """A studio attached to a server (at a loopback port where none listens: nothing is sent, the runs are
    made and never started)."""
    settings = engine_settings(
        engine="remote", remote_urls=[f"http://127.0.0.1:{free_port()}"], outputs_dir=tmp_path / "outputs"
    )
    controller = StudioController(settings)
    controller.start()
    yield controller
    controller.close()


def test_a_visitors_run_keeps_the_guardrail_on_unless_the_operator_made_it_optional(attached):
    off = RunSpec(prompts=["gore"], guardrails=False, tier="256p", aspect="1:1", frames=5, steps=2, seed=1)
    assert attached.settings.visitor_guardrails == "forced"  # the default
    assert attached.new_run(off, BOB).spec.guardrails is True
    assert attached.new_run(off.model_copy(update={"extra_params": {"guardrails": False}}), BOB).spec.extra_params == {}
    # Operators always may switch it off (the CLI's user is one).
    assert attached.new_run(off, ALICE).spec.guardrails is False
    assert attached.new_run(off, LOCAL_OPERATOR).spec.guardrails is False
    attached.apply_sharing(visitor_guardrails="optional")
    assert attached.new_run(off, BOB).spec.guardrails is False


def test_the_sharing_form_shows_and_sets_the_visitors_guardrails(attached):
    with gr.Blocks():
        form = sharing_form(attached.settings)
    shown = {name: component.value for name, component in form.items()}
    choice = form["visitor_guardrails"]
    assert isinstance(choice, gr.Radio) and shown["visitor_guardrails"] == "forced"
    assert [value for _label, value in choice.choices] == ["forced", "optional"]
    answer = apply_sharing(attached, {**shown, "visitor_guardrails": "optional"})
    assert answer.startswith("applied") and "Per visitor: guardrails = optional" in answer
    assert attached.settings.visitor_guardrails == "optional"
    refused = apply_sharing(attached, {**shown, "visitor_guardrails": "never"})
    assert refused.startswith("**not applied**") and attached.settings.visitor_guardrails == "optional"
