"""The tests' polling helpers: the value they return, and the message past their bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.waiting import wait_for, wait_for_async


def counter(truthy_from: int, value: object = "ready"):
    """A condition that is falsy for its first `truthy_from - 1` asks, then `value`; `asks` counts them."""
    asks = [0]

    def condition() -> object:
        asks[0] += 1
        return value if asks[0] >= truthy_from else None

    return condition, asks


def test_wait_for_returns_the_first_truthy_value():
    condition, asks = counter(3, value={"id": 7})
    assert wait_for(condition, "the third ask", 5, poll_s=0) == {"id": 7}
    assert asks[0] == 3


def test_wait_for_asks_once_when_the_condition_already_holds():
    condition, asks = counter(1)
    assert wait_for(condition, "the first ask", 0, poll_s=10) == "ready"  # no poll, no sleep
    assert asks[0] == 1


def test_wait_for_past_its_bound_names_what_it_waited_for():
    started = time.monotonic()
    with pytest.raises(AssertionError) as late:
        wait_for(lambda: 0, "the moon to turn blue", 0.1, poll_s=0.01)
    assert str(late.value) == "timed out after 0.1 s waiting for the moon to turn blue"
    assert 0.1 <= time.monotonic() - started < 5


def test_wait_for_adds_the_detail_asked_at_the_end():
    seen: list[int] = []

    def condition() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(AssertionError) as late:
        wait_for(condition, "a row", 0.05, poll_s=0.01, detail=lambda: f"rows {seen[-1] + 1}")
    assert str(late.value) == f"timed out after 0.05 s waiting for a row: rows {len(seen)}"


def test_wait_for_async_returns_the_first_truthy_value():
    condition, asks = counter(4, value=[1])
    assert asyncio.run(wait_for_async(condition, "the fourth ask", 5, poll_s=0)) == [1]
    assert asks[0] == 4


def test_wait_for_async_awaits_a_coroutine_condition():
    asks: list[int] = []

    async def condition() -> int:
        await asyncio.sleep(0)
        asks.append(1)
        return len(asks) if len(asks) >= 2 else 0

    assert asyncio.run(wait_for_async(condition, "the second ask", 5, poll_s=0)) == 2


def test_wait_for_async_lets_the_loop_run_other_tasks_between_asks():
    async def main() -> str:
        done = asyncio.Event()

        async def other() -> None:
            await asyncio.sleep(0.01)
            done.set()

        task = asyncio.create_task(other())
        value = await wait_for_async(lambda: done.is_set() and "set", "the other task", 5, poll_s=0.005)
        await task
        return value

    assert asyncio.run(main()) == "set"


def test_wait_for_async_past_its_bound_names_what_it_waited_for_with_the_detail():
    async def never() -> bool:
        return False

    started = time.monotonic()
    with pytest.raises(AssertionError) as late:
        asyncio.run(wait_for_async(never, "the job to finish", 0.1, poll_s=0.01, detail=lambda: "state running"))
    assert str(late.value) == "timed out after 0.1 s waiting for the job to finish: state running"
    assert 0.1 <= time.monotonic() - started < 5
    with pytest.raises(AssertionError, match=r"^timed out after 0\.05 s waiting for nothing$"):
        asyncio.run(wait_for_async(lambda: None, "nothing", 0.05, poll_s=0.01))


def test_an_error_in_the_condition_is_raised_at_once():
    def broken() -> bool:
        raise ValueError("the server said no")

    with pytest.raises(ValueError, match="the server said no"):
        wait_for(broken, "anything", 5)
    with pytest.raises(ValueError, match="the server said no"):
        asyncio.run(wait_for_async(broken, "anything", 5))
