"""Fair share against a real embedded engine (serial on CPU): one visitor's long queue does not hold up another's
single request, and a visitor's unsent requests are cancelled while what runs finishes."""

from __future__ import annotations

import asyncio

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import Visitor
from studio.ui.engine_status import engine_summary
from tests.conftest import MODEL_NAME, engine_settings
from tests.waiting import wait_for_async

SLOTS = 4
A = Visitor("a", "A", operator=False)
B = Visitor("b", "B", operator=False)


def quick(prompts: list[str], concurrency: int) -> RunSpec:
    return RunSpec(prompts=prompts, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=concurrency)


def test_a_single_request_starts_before_a_long_queue_of_another_visitor_drains(engine, tmp_path):
    controller = StudioController(
        engine_settings(
            engine="remote",
            remote_urls=[engine.base_url],
            outputs_dir=tmp_path / "outputs",
            in_flight_slots=SLOTS,
            poll_interval_s=0.05,
        )
    )
    controller.start()
    assert controller.fleet.served_model == MODEL_NAME and MODEL_NAME in engine_summary(controller)

    async def main():
        many = controller.new_run(quick([f"a square {i}" for i in range(64)], concurrency=64), A)
        many.start()
        await wait_for_async(  # A holds every slot, 60 more of A's wait
            lambda: controller.dispatcher.in_flight >= SLOTS,
            f"A's requests to hold all {SLOTS} slots",
            120,
            poll_s=0.01,
            detail=lambda: f"{controller.dispatcher.in_flight} in flight",
        )
        one = controller.new_run(quick(["a circle"], concurrency=1), B)
        one.start()
        standing = controller.standing(B)
        await one.wait()
        unsent_when_b_was_done = len(controller.board.unsent(A))
        cancelled = controller.cancel_unsent(A)
        await many.wait()
        await controller.fleet.pool.close()
        return many, one.views[0], standing, unsent_when_b_was_done, cancelled

    try:
        many, b_view, standing, unsent_after_b, cancelled = asyncio.run(main())
    finally:
        controller.close()
    assert b_view.state is RequestState.DONE
    assert standing.queued == 1 and standing.ahead == SLOTS and standing.visitors_ahead == 1
    b_sent = b_view.timings.sent
    a_sent_before_b = [v for v in many.views if v.timings.sent is not None and v.timings.sent < b_sent]
    # B got the first slot freed after its submit: A's queue was far from drained, and no more than the slots
    # of A's requests went before B's.
    assert len(a_sent_before_b) <= SLOTS + 1
    assert unsent_after_b > 40 and cancelled == unsent_after_b
    states = [v.state for v in many.views]
    assert states.count(RequestState.CANCELLED) == cancelled
    assert states.count(RequestState.DONE) == 64 - cancelled  # those already sent finished
