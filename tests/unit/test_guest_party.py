"""Guests of one client address are one party: they share the videos per hour, the queue and the fair-share turn,
each still seeing only its own work; and an address may start only so many new guests an hour."""

from __future__ import annotations

import asyncio

import pytest

from studio.backend.access import AccessPolicy
from studio.backend.controller import StudioController
from studio.backend.guest_arrivals import GuestArrivals
from studio.backend.runs.fair_share import FairShare, VisitorLimitExceeded
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.config import StudioSettings
from tests.waiting import wait_for_async

NOWHERE = "http://127.0.0.1:9"  # nothing listens: attaching sends nothing, and no run here is started
GUESTS = AccessPolicy(allow_anonymous=True, everyone_operator=False, guest_key=b"k" * 32)


def guest(browser: str, address: str = "203.0.113.9") -> Visitor:
    visitor = GUESTS.visitor(browser=browser, address=address)
    assert visitor is not None
    return visitor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_guests_of_one_address_are_one_party_named_by_a_keyed_hash_of_it():
    one, two, elsewhere = guest("cookie-1"), guest("cookie-2"), guest("cookie-3", "198.51.100.7")
    assert one.id != two.id and one.party == two.party != elsewhere.party
    assert one.party.startswith("address:") and "203.0.113.9" not in one.party
    assert (
        one.party
        != AccessPolicy(allow_anonymous=True, everyone_operator=False, guest_key=b"x" * 32)
        .visitor(browser="cookie-1", address="203.0.113.9")
        .party
    )  # keyed: another studio's key names another party
    # One guest seen from another address is still the same visitor (and sees the same work).
    assert guest("cookie-1", "198.51.100.7") == one
    accounts = AccessPolicy(accounts=(("alice", "pw"),), operators=frozenset({"alice"}), everyone_operator=False)
    alice = accounts.visitor(user="alice", address="203.0.113.9")
    assert alice is not None and alice.party == alice.id == "user:alice"
    assert LOCAL_OPERATOR.party == "local"


def test_one_person_with_many_guest_identities_gets_one_fair_share_turn():
    async def order() -> list[str]:
        dispatcher = FairShare(slots=1)
        release = asyncio.Event()
        served: list[str] = []
        many = [guest(f"cookie-{n}") for n in range(3)]
        bob = Visitor("user:bob", "bob")

        async def holder() -> None:
            async with dispatcher.slot(LOCAL_OPERATOR):
                await release.wait()

        async def one(visitor: Visitor) -> None:
            async with dispatcher.slot(visitor):
                served.append("guest" if visitor.id.startswith("guest:") else "bob")

        held = asyncio.create_task(holder())
        await wait_for_async(lambda: dispatcher.in_flight == 1, "the holder's slot", 5, poll_s=0)
        tasks = [asyncio.create_task(one(v)) for v in [*many, *many, bob, bob]]
        await wait_for_async(lambda: sum(dispatcher.queued_by_visitor().values()) == 8, "all queued", 5, poll_s=0)
        release.set()
        await asyncio.gather(held, *tasks)
        return served

    # Six requests of three guest identities at one address against bob's two: one turn each, in turn.
    assert asyncio.run(order())[:4] == ["guest", "bob", "guest", "bob"]


def test_the_in_flight_cap_binds_the_address_not_each_guest():
    async def peak() -> int:
        dispatcher = FairShare(slots=8, max_in_flight_per_visitor=2)
        release = asyncio.Event()

        async def one(visitor: Visitor) -> None:
            async with dispatcher.slot(visitor):
                await release.wait()

        tasks = [asyncio.create_task(one(guest(f"cookie-{n}"))) for n in range(5)]
        await wait_for_async(lambda: dispatcher.in_flight == 2, "two slots taken", 5, poll_s=0)
        await asyncio.sleep(0)
        taken = dispatcher.in_flight
        release.set()
        await asyncio.gather(*tasks)
        return taken

    assert asyncio.run(peak()) == 2


@pytest.fixture
def controller(tmp_path):
    settings = StudioSettings(
        _env_file=None,
        engine="remote",
        remote_urls=[NOWHERE],
        outputs_dir=tmp_path / "outputs",
        visitor_max_queued=3,
        visitor_max_videos_per_hour=2,
    )
    controller = StudioController(settings)
    controller.start()
    yield controller
    controller.close()


def spec(requests: int) -> RunSpec:
    return RunSpec(prompts=[f"p{i}" for i in range(requests)], tier="256p", aspect="1:1", frames=5, steps=2)


def test_a_guest_who_drops_its_cookie_keeps_its_addresss_quota_and_sees_only_its_own_work(controller):
    first, second = guest("cookie-1"), guest("cookie-2")
    controller.new_run(spec(2), first)
    with pytest.raises(
        VisitorLimitExceeded, match="at most 2 videos per hour per visitor, shared by the guests of one address"
    ):
        controller.new_run(spec(1), second)  # a new cookie, the same address
    for attacker in range(4):
        with pytest.raises(VisitorLimitExceeded):
            controller.new_run(spec(1), guest(f"session-attacker{attacker}"))
    controller.new_run(spec(1), guest("cookie-9", "198.51.100.7"))  # another address has its own
    assert len(controller.board.views(first)) == 2 and controller.board.views(second) == []
    # The queue is the address's too.
    controller.settings = controller.settings.model_copy(update={"visitor_max_videos_per_hour": None})
    with pytest.raises(
        VisitorLimitExceeded,
        match="at most 3 queued requests per visitor, shared by the guests of one address; you have 2 queued",
    ):
        controller.new_run(spec(2), second)
    # Accounts keep limits of their own.
    controller.new_run(spec(3), Visitor("user:bob", "bob"))


def test_an_address_starts_only_so_many_new_guests_an_hour():
    clock, limit = Clock(), [3]
    arrivals = GuestArrivals(lambda: limit[0], clock=clock)
    first = [guest(f"cookie-{n}") for n in range(3)]
    assert all(arrivals.admit(visitor) for visitor in first)
    assert not arrivals.admit(guest("cookie-new"))  # the fourth new one
    assert not arrivals.admit(guest("cookie-new"))  # and it was not recorded as known
    assert all(arrivals.admit(visitor) for visitor in first)  # guests it knows carry on
    assert arrivals.admit(guest("cookie-x", "198.51.100.7"))  # other addresses have their own
    assert arrivals.admit(Visitor("user:bob", "bob")) and arrivals.admit(LOCAL_OPERATOR)
    assert "new_guests_per_address_per_hour" in arrivals.refusal()
    limit[0] = 4  # an operator raised it while the studio serves
    assert arrivals.admit(guest("cookie-new"))
    clock.now += 3601
    assert all(arrivals.admit(guest(f"later-{n}")) for n in range(4))
