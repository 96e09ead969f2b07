"""The embedded engine's own levers on the Server tab (step cache, quantization, previews): their controls, shown
for the embedded engine alone; Restart applies them through the settings the embedded launcher reads, so the engine
it starts gets them as flags; bad values are refused in words; and a visitor cannot change them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import gradio as gr
import pytest

from studio.backend.access import AccessPolicy
from studio.backend.engine_kinds import EngineKind, engine_kind
from studio.backend.servers.launchers import LEVER_FLAGS, embedded_launch
from studio.backend.servers.supervisor import ServerState
from studio.config import StudioSettings
from studio.engine.__main__ import build_parser, engine_settings
from studio.ui.identity import PageAccess
from studio.ui.server_tab import (
    ENGINE_LEVERS,
    ENGINE_LEVERS_TITLE,
    build_server_tab,
    lever_updates,
    reads_engine_levers,
    restart_server,
    settings_form,
)

# Every engine lever set away from its default, as the form sends it, and the flags the engine then gets.
SET_FORM = {
    "engine_step_cache": "taylor",
    "engine_step_cache_interval": 3,
    "engine_quantization": "fp8",
    "engine_attention": "sage",
    "engine_previews": False,
    "engine_preview_interval_s": 2.0,
}
SET_FLAGS = [
    ["--step-cache", "taylor", "--step-cache-interval", "3"],
    ["--quantization", "fp8"],
    ["--attention-backend", "sage"],
    ["--no-previews"],
    ["--preview-interval-s", "2.0"],
]
ENGINE_FLAGS = {
    "--step-cache",
    "--step-cache-interval",
    "--quantization",
    "--attention-backend",
    "--no-previews",
    "--preview-interval-s",
}


def settings(**values: Any) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


class StandInController:
    """What the Server tab's Restart path uses of the controller: its settings, new ones applied, and a fleet that
    is ready at once (starting servers is the supervisor's, tested elsewhere)."""

    def __init__(self, current: StudioSettings) -> None:
        self.settings = current
        self.applied: list[StudioSettings] = []

    def apply_settings(self, new: StudioSettings) -> None:
        self.applied.append(new)
        self.settings = new

    def ready(self) -> bool:
        return True

    @property
    def kind(self) -> EngineKind:
        return engine_kind(self.settings)

    @property
    def managed(self) -> bool:
        return self.kind.managed

    @property
    def fleet(self) -> SimpleNamespace:
        """One server, ready: what the engine's state line reads of a fleet."""
        ready = SimpleNamespace(state=ServerState.READY, url="http://127.0.0.1:9000", startup_s=1.0)
        return SimpleNamespace(served_model=None, start_error=None, servers=[], server_status=lambda: ready)


def argv_of(applied: StudioSettings) -> list[str]:
    return embedded_launch(applied, port=9000).argv


def contains(argv: list[str], flags: list[str]) -> bool:
    at = argv.index(flags[0])
    return argv[at : at + len(flags)] == flags


def built_form(current: StudioSettings) -> tuple[dict[str, gr.Component], gr.Accordion]:
    groups: dict[str, gr.Accordion] = {}
    with gr.Blocks():
        form = settings_form(current, gr.Markdown(render=False), groups)
    return form, groups["engine_levers"]


def test_the_group_has_a_control_for_each_engine_lever_titled_and_described_once():
    form, group = built_form(settings())
    assert group.label == ENGINE_LEVERS_TITLE and group.open and group.visible
    for name in ENGINE_LEVERS:
        field = StudioSettings.model_fields[name]
        assert form[name].label == field.title and form[name].info == field.description
        parent = form[name].parent
        while not isinstance(parent, gr.Accordion):
            parent = parent.parent
        assert parent is group
    step_cache, quantization = form["engine_step_cache"], form["engine_quantization"]
    assert isinstance(step_cache, gr.Dropdown) and [c[1] for c in step_cache.choices] == ["off", "reuse", "taylor"]
    assert isinstance(quantization, gr.Dropdown) and [c[1] for c in quantization.choices] == ["none", "fp8"]
    assert not step_cache.allow_custom_value and not quantization.allow_custom_value
    assert isinstance(form["engine_previews"], gr.Checkbox) and form["engine_previews"].value is True
    assert form["engine_step_cache_interval"].precision == 0 and form["engine_step_cache_interval"].value == 2
    assert form["engine_preview_interval_s"].precision is None and form["engine_preview_interval_s"].value == 0.5


def test_the_controls_start_at_the_settings_in_force():
    form, _ = built_form(settings(engine_step_cache="reuse", engine_step_cache_interval=4, engine_quantization="fp8"))
    assert (form["engine_step_cache"].value, form["engine_step_cache_interval"].value) == ("reuse", 4)
    assert form["engine_quantization"].value == "fp8"


@pytest.mark.parametrize(
    ("engine", "shown"),
    [
        ("embedded", True),
        ("vllm-omni", False),
        ("remote", False),
        ("cosmos-framework", False),
    ],
)
def test_the_group_shows_for_the_embedded_engine_alone(engine, shown):
    current = settings(engine=engine, remote_urls=["http://h:1"] if engine in ("remote", "cosmos-framework") else [])
    assert reads_engine_levers(current) is shown
    assert built_form(current)[1].visible is shown


def collected(current: StudioSettings) -> list[list[Any]]:
    async def main() -> list[list[Any]]:
        return [updates async for updates in lever_updates(current)]

    return asyncio.run(main())


def test_on_the_embedded_engine_its_group_shows_and_the_vllm_omni_only_levers_hide():
    (updates,) = collected(settings())
    note, group, *levers = updates
    assert group["visible"] is True
    shown = {name for name, update in zip(LEVER_FLAGS, levers, strict=True) if update["visible"]}
    assert shown == {"cfg_parallel_size", "ulysses_degree", "guardrails", "init_timeout_s"}
    assert "embedded engine reads" in note


def test_on_vllm_omni_the_group_hides_while_its_help_is_read(tmp_path):
    *_, (note, group, *levers) = collected(settings(engine="vllm-omni", vllm_executable=str(tmp_path / "no-vllm")))
    assert group["visible"] is False
    assert all(update["visible"] for update in levers) and "was not found" in note


def test_restart_applies_the_engine_levers_and_the_launcher_passes_them_to_the_engine():
    controller = StandInController(settings())
    answer = asyncio.run(restart_server(controller, SET_FORM))
    assert answer.startswith("already running"), answer
    (applied,) = controller.applied
    assert {name: getattr(applied, name) for name in SET_FORM} == SET_FORM
    argv = argv_of(applied)
    for flags in SET_FLAGS:
        assert contains(argv, flags), argv
    # The engine's own parser reads them as the same levers.
    engine = engine_settings(build_parser().parse_args(argv[3:]))
    assert (engine.step_cache, engine.step_cache_interval, engine.quantization) == ("taylor", 3, "fp8")
    assert engine.previews is False and engine.preview_interval_s == 2.0


def test_restart_with_the_form_as_it_was_drawn_passes_no_engine_flag():
    controller = StandInController(settings())
    form, _ = built_form(controller.settings)
    asyncio.run(restart_server(controller, {name: form[name].value for name in ENGINE_LEVERS}))
    assert not ENGINE_FLAGS & set(argv_of(controller.settings))


def test_a_blank_number_keeps_the_interval_in_force():
    controller = StandInController(settings(engine_step_cache="reuse", engine_step_cache_interval=5))
    asyncio.run(restart_server(controller, {"engine_step_cache_interval": None, "engine_preview_interval_s": None}))
    assert controller.settings.engine_step_cache_interval == 5 and controller.settings.engine_preview_interval_s == 0.5
    assert contains(argv_of(controller.settings), ["--step-cache", "reuse", "--step-cache-interval", "5"])


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"engine_step_cache_interval": 0}, "Step cache interval must be from 1 to 8, got 0"),
        ({"engine_step_cache_interval": 99}, "Step cache interval must be from 1 to 8, got 99"),
        ({"engine_preview_interval_s": -1}, "Preview interval (s) must be from 0 to 60, got -1"),
        ({"engine_step_cache": "sometimes"}, "Step cache must be 'off', 'reuse' or 'taylor', got sometimes"),
        ({"engine_quantization": "int4"}, "Quantization must be 'none' or 'fp8', got int4"),
        ({"engine_attention": "flash"}, "Attention kernel must be 'auto', 'flash3', 'sage' or 'flash3-fp8', got flash"),
    ],
)
def test_a_bad_value_is_refused_in_words_and_nothing_changes(values, said):
    before = settings()
    controller = StandInController(before)
    answer = asyncio.run(restart_server(controller, values))
    assert answer == f"**settings not applied**: {said}"
    assert controller.applied == [] and controller.settings is before


# ---- who may change them ---------------------------------------------------------------------------------
ACCOUNTS = (("olga", "olga-pass"), ("bob", "bob-pass"))


def request_of(user: str) -> SimpleNamespace:
    """A page request as the access check reads it: the signed-in account, no cookie, a session."""
    return SimpleNamespace(username=user, cookies={}, session_hash=f"session-of-{user}")


def server_tab(controller: StandInController) -> gr.Blocks:
    policy = AccessPolicy(accounts=ACCOUNTS, operators=frozenset({"olga"}), everyone_operator=False)
    with gr.Blocks() as demo:
        build_server_tab(controller, PageAccess(policy))
    return demo


def handler(demo: gr.Blocks, name: str) -> Any:
    """The function of the tab's event named `name` (its API name, or its function's name for a private one)."""
    (found,) = [fn.fn for fn in demo.fns.values() if name in (fn.api_name, fn.name)]
    return found


async def restart_as(demo: gr.Blocks, user: str) -> list[str]:
    return [said async for said in handler(demo, "restart_server")(request_of(user), None, **SET_FORM)]


def test_a_visitor_cannot_change_the_engine_levers():
    before = settings()
    controller = StandInController(before)
    demo = server_tab(controller)
    with pytest.raises(gr.Error, match="only an operator of this studio can restart the servers"):
        asyncio.run(restart_as(demo, "bob"))
    assert controller.applied == [] and controller.settings is before


def test_an_operator_changes_them_through_restart():
    controller = StandInController(settings())
    said = asyncio.run(restart_as(server_tab(controller), "olga"))
    assert said[-1].startswith("already running")
    assert contains(argv_of(controller.settings), ["--step-cache", "taylor", "--step-cache-interval", "3"])
    assert contains(argv_of(controller.settings), ["--quantization", "fp8"])


def test_picking_another_engine_shows_its_levers_to_an_operator_alone():
    demo = server_tab(StandInController(settings()))
    on_choice = handler(demo, "on_engine_choice")

    async def choose(user: str, engine: str) -> list[list[Any]]:
        return [updates async for updates in on_choice(request_of(user), None, engine)]

    (for_bob,) = asyncio.run(choose("bob", "remote"))
    assert for_bob == [gr.skip()] * len(for_bob)  # a visitor's page is left as it is
    (remote,) = asyncio.run(choose("olga", "remote"))
    assert remote[1]["visible"] is False and not any(update["visible"] for update in remote[2:])
    (embedded,) = asyncio.run(choose("olga", "embedded"))
    assert embedded[1]["visible"] is True
