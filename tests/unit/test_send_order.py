"""The queue's memory of the order each client sent its jobs in."""

from __future__ import annotations

import time

from studio.engine.send_order import SendOrder, SendPlace, parse_order


def test_the_header_parses_or_is_ignored():
    assert parse_order("ab12.7") == SendPlace("ab12", 7)
    assert parse_order(None) is None
    assert parse_order("no-dot") is None
    assert parse_order("a.-1") is None
    assert parse_order("x" * 65 + ".1") is None


def test_a_job_waits_only_for_one_sent_before_it():
    order = SendOrder(hold_s=60)
    now = time.monotonic()
    order.arrived(SendPlace("s", 1))
    assert order.hold_until(SendPlace("s", 1), now) == now + 60  # 0 is on its way
    order.arrived(SendPlace("s", 0))
    assert order.hold_until(SendPlace("s", 1), now) is None
    order.arrived(SendPlace("s", 3))
    assert order.missing_before(SendPlace("s", 3))  # 2 is missing
    assert not order.missing_before(SendPlace("t", 0))  # another stream's first


def test_a_lost_job_is_given_up_after_the_hold():
    order = SendOrder(hold_s=0.0)
    order.arrived(SendPlace("s", 5))  # 0..4 were sent before this server started, or were lost
    assert order.hold_until(SendPlace("s", 5), time.monotonic()) is None
    order.arrived(SendPlace("s", 6))
    assert not order.missing_before(SendPlace("s", 6))
