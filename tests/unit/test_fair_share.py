"""The studio's in-flight slots shared across visitors, and the controller's per-visitor limits and calls."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.fair_share import FairShare, Standing, VisitorLimitExceeded
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.config import StudioSettings
from tests.waiting import wait_for_async

ALICE = Visitor("alice", "Alice", operator=False)
BOB = Visitor("bob", "Bob", operator=False)
CAROL = Visitor("carol", "Carol", operator=False)
# A port nothing listens on: attaching to it sends nothing, and no run here is started.
NOWHERE = "http://127.0.0.1:9"


async def until(condition, what: str) -> None:
    """Let the loop run until `condition()` holds (tasks queue up in the order they were made)."""
    await wait_for_async(condition, what, 5, poll_s=0)


async def grant_order(dispatcher: FairShare, arrivals: list[Visitor]) -> list[str]:
    """Hold the only slot while `arrivals` queue in that order, then free it: who gets it, in turn."""
    order: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with dispatcher.slot(LOCAL_OPERATOR):
            await release.wait()

    async def one(visitor: Visitor) -> None:
        async with dispatcher.slot(visitor):
            order.append(visitor.id)

    held = asyncio.create_task(holder())
    await until(lambda: dispatcher.in_flight == 1, "the holder to take the slot")
    tasks = [asyncio.create_task(one(visitor)) for visitor in arrivals]
    await until(lambda: sum(dispatcher.queued_by_visitor().values()) == len(arrivals), "every arrival to queue")
    release.set()
    await asyncio.gather(held, *tasks)
    return order


def test_slots_go_round_robin_across_visitors_not_first_come_first_served():
    arrivals = [ALICE, ALICE, ALICE, BOB, CAROL]
    fair = asyncio.run(grant_order(FairShare(slots=1), arrivals))
    assert fair == ["alice", "bob", "carol", "alice", "alice"]
    fcfs = asyncio.run(grant_order(FairShare(slots=1, fair=False), arrivals))
    assert fcfs == ["alice", "alice", "alice", "bob", "carol"]


def test_the_visitor_served_least_recently_goes_next():
    # Alice was served last (her first request), so Bob, who arrives after her second, goes before it.
    assert asyncio.run(grant_order(FairShare(slots=1), [ALICE, ALICE, BOB])) == ["alice", "bob", "alice"]


def test_in_flight_limit_per_visitor_and_operators_are_not_limited():
    async def main() -> tuple[int, int, int]:
        dispatcher = FairShare(slots=8, max_in_flight_per_visitor=2)
        release = asyncio.Event()
        peak: dict[str, int] = {}

        async def one(visitor: Visitor) -> None:
            async with dispatcher.slot(visitor):
                peak[visitor.id] = max(peak.get(visitor.id, 0), dispatcher.in_flight_by_visitor()[visitor.id])
                await release.wait()

        tasks = [asyncio.create_task(one(v)) for v in [ALICE] * 5 + [LOCAL_OPERATOR] * 5]
        await until(lambda: dispatcher.in_flight == 7, "7 slots to be taken")
        queued = dispatcher.queued_by_visitor()["alice"]
        release.set()
        await asyncio.gather(*tasks)
        return peak["alice"], peak["local"], queued

    alice_peak, operator_peak, alice_queued = asyncio.run(main())
    assert alice_peak == 2 and alice_queued == 3
    assert operator_peak == 5  # an operator takes what slots there are


def test_a_cancelled_waiter_leaves_the_queue_and_a_granted_one_gives_its_slot_back():
    async def main() -> list[str]:
        dispatcher = FairShare(slots=1)
        order: list[str] = []
        release = asyncio.Event()

        async def one(visitor: Visitor, hold: bool = False) -> None:
            async with dispatcher.slot(visitor):
                order.append(visitor.id)
                if hold:
                    await release.wait()

        first = asyncio.create_task(one(ALICE, hold=True))
        await until(lambda: dispatcher.in_flight == 1, "the holder to take the slot")
        doomed, waiting = asyncio.create_task(one(BOB)), asyncio.create_task(one(CAROL))
        await until(lambda: sum(dispatcher.queued_by_visitor().values()) == 2, "2 requests to queue for a slot")
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        assert dispatcher.queued_by_visitor() == {"carol": 1}
        release.set()
        await asyncio.gather(first, waiting)
        assert dispatcher.in_flight == 0
        # Granted, then cancelled before it ran: its slot goes on to the next.
        dispatcher.set_slots(1)
        blocker = asyncio.create_task(one(ALICE, hold=True))
        release.clear()
        await until(lambda: dispatcher.in_flight == 1, "the holder to take the slot")
        granted, after = asyncio.create_task(one(BOB)), asyncio.create_task(one(CAROL))
        await until(lambda: sum(dispatcher.queued_by_visitor().values()) == 2, "2 requests to queue for a slot")
        release.set()
        await blocker
        granted.cancel()  # its slot was handed over as the blocker left; it never ran
        await asyncio.gather(granted, after, return_exceptions=True)
        assert dispatcher.in_flight == 0
        return order

    assert asyncio.run(main()) == ["alice", "carol", "alice", "carol"]


def test_served_before_counts_others_requests_ahead_in_turn():
    async def main() -> tuple[dict, dict]:
        dispatcher = FairShare(slots=1)
        release = asyncio.Event()

        async def one(visitor: Visitor) -> None:
            async with dispatcher.slot(visitor):
                await release.wait()

        tasks = [asyncio.create_task(one(v)) for v in [LOCAL_OPERATOR] + [ALICE] * 5 + [BOB] * 3 + [CAROL]]
        await until(lambda: sum(dispatcher.queued_by_visitor().values()) == 9, "9 requests to queue for a slot")
        # Carol's one request: after one of Alice's and one of Bob's (their turns come first).
        carol = dict(dispatcher.served_before("carol", 1))
        # Bob's three: Alice goes before him each round (3), Carol once.
        bob = dict(dispatcher.served_before("bob", 3))
        release.set()
        await asyncio.gather(*tasks)
        return carol, bob

    carol, bob = asyncio.run(main())
    assert carol == {"alice": 1, "bob": 1}
    assert bob == {"alice": 3, "carol": 1}


def test_standing_reads_as_one_line():
    standing = Standing(queued=3, in_flight=0, ahead=12, visitors_ahead=4, eta_s=40.2)
    assert str(standing) == "3 of yours queued; 12 requests ahead across 4 visitors; about 40 s"
    assert str(Standing(1, 0, 0, 0, None)) == "1 of yours queued; next in turn; no estimate yet"
    # All of it at a server: nothing is ahead of it, and the line does not say there is.
    assert str(Standing(0, 1, 0, 0, 3.0)) == "0 of yours queued, 1 at a server; about 3 s"


def test_nothing_is_ahead_of_a_visitor_whose_work_is_all_at_the_servers(controller):
    async def hold_slots() -> tuple[Standing, Standing]:
        async with controller.dispatcher.slot(ALICE), controller.dispatcher.slot(BOB):
            controller.new_run(spec(2), BOB)  # bob also has two waiting for a slot
            return controller.standing(ALICE), controller.standing(BOB)

    alice, bob = asyncio.run(hold_slots())
    assert (alice.in_flight, alice.queued, alice.ahead, alice.visitors_ahead) == (1, 0, 0, 0)
    assert "ahead" not in str(alice)
    assert (bob.in_flight, bob.queued) == (1, 2) and bob.ahead >= 1 and bob.visitors_ahead == 1  # alice's, at a server


# ---- the controller's per-visitor calls ----------------------------------------------------------------
@pytest.fixture
def controller(tmp_path):
    settings = StudioSettings(
        _env_file=None,
        engine="remote",
        remote_urls=[NOWHERE],
        outputs_dir=tmp_path / "outputs",
        visitor_max_queued=3,
        visitor_max_videos_per_hour=5,
    )
    controller = StudioController(settings)
    controller.start()
    yield controller
    controller.close()


def spec(requests: int) -> RunSpec:
    return RunSpec(prompts=[f"p{i}" for i in range(requests)], tier="256p", aspect="1:1", frames=5, steps=2)


def test_a_run_past_a_visitor_limit_is_refused_with_the_limit_named(controller):
    controller.new_run(spec(2), ALICE)
    with pytest.raises(VisitorLimitExceeded, match="at most 3 queued requests per visitor; you have 2 queued"):
        controller.new_run(spec(2), ALICE)
    controller.new_run(spec(3), BOB)  # limits are per visitor
    controller.new_run(spec(10), LOCAL_OPERATOR)  # operators are not limited
    controller.settings = controller.settings.model_copy(update={"visitor_max_videos_per_hour": 2})
    with pytest.raises(VisitorLimitExceeded, match="at most 2 videos per hour per visitor; you have asked for 2"):
        controller.new_run(spec(1), ALICE)
    assert controller.cancel_unsent(ALICE) == 2  # cancelled ones count neither as queued nor as made
    controller.new_run(spec(2), ALICE)


def test_cancel_unsent_touches_only_that_visitors_requests(controller):
    alice, bob = controller.new_run(spec(2), ALICE), controller.new_run(spec(3), BOB)
    assert controller.standing(BOB) == Standing(queued=3, in_flight=0, ahead=0, visitors_ahead=0, eta_s=None)
    assert controller.cancel_unsent(BOB) == 3
    assert all(v.state is RequestState.CANCELLED for v in bob.views)
    assert all(v.state is RequestState.WAITING for v in alice.views)
    board = controller.board
    assert {v.visitor_id for v in board.views(ALICE)} == {"alice"} and len(board.views()) == 5
    assert controller.store.recent_runs(visitor_id="bob")[0]["cancelled"] == 3
    assert [run["id"] for run in controller.store.recent_runs(visitor_id="alice")] == [alice.id]


def test_cancel_refuses_another_visitors_request_unless_an_operator_asks(controller):
    from studio.backend.runs.board import NotYours

    alice = controller.new_run(spec(2), ALICE)
    first, second = alice.views
    with pytest.raises(NotYours):
        controller.board.cancel(first.id, by=BOB)
    assert controller.board.cancel_all(by=BOB) == 0 and first.state is RequestState.WAITING
    assert controller.board.cancel(first.id, by=ALICE) and first.state is RequestState.CANCELLED
    assert controller.board.cancel_all(by=LOCAL_OPERATOR, everyone=True) == 1
    assert second.state is RequestState.CANCELLED


def test_remote_engine_without_urls_names_the_pages_field_and_the_flag(tmp_path):
    settings = StudioSettings(_env_file=None, engine="remote", outputs_dir=tmp_path / "outputs")
    with pytest.raises(ValueError, match=r"Remote URLs', or --url"):
        StudioController(settings).start()


def test_the_studio_warms_its_sdk_client_when_it_starts(tmp_path):
    # In a fresh interpreter: the SDK's videos resource is imported by the start, not by the first request.
    script = (
        "import sys\n"
        "from studio.backend.controller import StudioController\n"
        "from studio.config import StudioSettings\n"
        "before = 'openai.resources.videos' in sys.modules\n"
        f"c = StudioController(StudioSettings(_env_file=None, engine='remote', remote_urls=[{NOWHERE!r}],"
        f" outputs_dir={str(tmp_path / 'out')!r}))\n"
        "c.start()\n"
        "print(before, 'openai.resources.videos' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stderr
