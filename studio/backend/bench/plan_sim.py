"""A discrete-event simulation of a fleet as the studio drives it, for the capacity plan (plan.py).

What it follows, per request: its arrival (Poisson, or a closed loop that sends the next request when one ends);
its wait in the studio for one of the in-flight slots; the router's choice (the replica with the fewest requests
outstanding, ties to the first, as studio.backend.clients.router does); the studio's time before the server has it
(the POST); the server's own queue, first come first served, from which an idle server takes up to `max_batch`
requests into one batch (where it batches, the oldest of them waits for partners until the batch is full or, from
when it reached the server, `gather_busy_s` if the server was computing then and `gather_s` if it was idle: the
embedded engine's batch wait, which forms a batch of a burst sent together); the batch's time, and after it the
server's handover (its own bookkeeping before it takes the next, which a queued request waits for); then the
studio's time after it (download, the mp4 checked, its sidecar and history row), during which the request still
holds its slot and counts as outstanding at its replica.

A batch's work is a draw around the service time measured for one request alone. Where the server batches
(max_batch > 1) it is scaled by a slowdown factor read off the fleet's `slowdown` points at the batch's size. Else
the points say how much slower every running batch goes while a share of the fleet's replicas computes (on a CPU
the replicas and the studio share the cores): a request that starts alone slows down when another replica starts,
and speeds up again when that one ends.

Seeded: one seed gives the same figures, and separate streams for arrivals, service and overhead keep the draws
common across rates, so that figures at two rates differ by the rate alone.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Requests of a steady-state figure, and the share of them at the start left out (the fleet starts empty).
STEADY_REQUESTS = 12_000
STEADY_WARMUP = 0.1

# kinds of event; a batch's end is kept apart (`running`)
_AT_SERVER, _SERVER_FREE, _FINISHED, _GATHERED = 0, 1, 2, 3


@dataclass(frozen=True)
class SimFleet:
    """What the simulation needs of a fleet (plan_model.FleetModel.sim makes one from a bench's cells)."""

    replicas: int
    service_mean_s: float  # one request alone (concurrency 1): the mean of its time at the server
    service_cv: float = 0.0  # its spread: standard deviation over mean (1: exponential, 0: always the mean)
    pre_s: float = 0.0  # the studio's time before the server has the request
    post_s: float = 0.0  # the studio's time after the server is done with it
    overhead_cv: float = 0.0
    handover_s: float = 0.0  # the server's time after a batch before it can start the next
    max_batch: int = 1
    # (load, factor): by batch size where max_batch > 1, else by the share of replicas busy (1/replicas to 1);
    # interpolated between the points and held flat beyond them.
    slowdown: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    slots: int | None = None  # requests at the servers at once, the whole fleet; None: no limit
    # Where the server batches: the longest the oldest queued request waits for partners, from when it reached an
    # idle server, or one that was computing (then it waits only where the batch before ends sooner).
    gather_s: float = 0.0
    gather_busy_s: float = 0.0

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.max_batch < 1 or self.service_mean_s <= 0:
            raise ValueError("a simulated fleet needs a replica, a batch of one and a positive service time")
        if self.slots is not None and self.slots < 1:
            raise ValueError("slots must be 1 or more (None: no limit)")
        if self.gather_s < 0 or self.gather_busy_s < 0:
            raise ValueError("a server's wait for a batch's partners cannot be negative")


@dataclass(frozen=True)
class SimResult:
    """The simulated requests' figures, from each one's arrival."""

    latency_s: np.ndarray  # arrival to done: what a person waits (the studio's queue included)
    wait_s: np.ndarray  # arrival to the start of its batch
    arrival_s: np.ndarray  # from the start of the run
    service_s: np.ndarray  # its batch's time at the server (what a server reports as its inference time)

    @property
    def videos_per_s(self) -> float:
        """Requests done over the run's length, from its start to the last one done."""
        return len(self.latency_s) / float(np.max(self.arrival_s + self.latency_s))

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latency_s, q))

    def attainment(self, slo_s: float) -> float:
        """The share of requests done within `slo_s`."""
        return float(np.mean(self.latency_s <= slo_s))


_FIELDS = ("latency_s", "wait_s", "arrival_s", "service_s")


def unit_draws(rng: np.random.Generator, cv: float, count: int) -> np.ndarray:
    """`count` draws of mean 1 and coefficient of variation `cv`: gamma-distributed (cv 1 is exponential), or all 1
    where there is no spread."""
    if cv < 1e-3:
        return np.ones(count)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / shape, count)


def poisson_offsets(rate_per_s: float, count: int, seed: int) -> np.ndarray:
    """Arrival instants (s) of a Poisson process at `rate_per_s`, the first at 0, as the bench's open loop sends
    them (runner.poisson_arrivals). The unit gaps depend on the seed alone: the rate only scales them."""
    gaps = np.random.default_rng([seed, 1]).exponential(1.0, count)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) / rate_per_s


def _factor_table(fleet: SimFleet) -> list[float]:
    """The slowdown factor by batch size (max_batch > 1: 0..max_batch) or by replicas busy (else: 0..replicas)."""
    loads = np.array([load for load, _ in fleet.slowdown], dtype=float)
    factors = np.array([factor for _, factor in fleet.slowdown], dtype=float)
    order = np.argsort(loads)
    batching = fleet.max_batch > 1
    index = np.arange((fleet.max_batch if batching else fleet.replicas) + 1, dtype=float)
    at = index if batching else index / fleet.replicas
    return np.interp(at, loads[order], factors[order]).tolist()


def simulate(
    fleet: SimFleet,
    requests: int,
    *,
    rate_per_s: float | None = None,
    concurrency: int | None = None,
    arrivals_s: Sequence[float] | None = None,
    seed: int = 0,
) -> SimResult:
    """`requests` requests through `fleet`, from an empty fleet: open loop at `rate_per_s` (Poisson) or at the
    instants `arrivals_s` (a run's own, ascending), or a closed loop of `concurrency` in flight (the next sent as
    one ends, with no slots: as the bench's closed loop runs).

    One function on purpose: its event handlers are closures over the simulation's state kept in locals, the
    cheapest state Python reads in a loop that the planner runs for every fleet and rate it weighs."""
    if sum(given is not None for given in (rate_per_s, concurrency, arrivals_s)) != 1:
        raise ValueError("give a rate or arrival instants (open loop), or a concurrency (closed loop)")
    if arrivals_s is not None:
        requests = len(arrivals_s)
    n = requests
    replicas, batch_limit, handover = fleet.replicas, fleet.max_batch, fleet.handover_s
    service = (fleet.service_mean_s * unit_draws(np.random.default_rng([seed, 2]), fleet.service_cv, n)).tolist()
    overhead = np.random.default_rng([seed, 3])
    pre = (fleet.pre_s * unit_draws(overhead, fleet.overhead_cv, n)).tolist()
    post = (fleet.post_s * unit_draws(overhead, fleet.overhead_cv, n)).tolist()
    open_loop = concurrency is None
    slots = fleet.slots if open_loop and fleet.slots is not None else n + 1
    factor = _factor_table(fleet)
    batching = batch_limit > 1
    # The pace of every running batch, by the replicas computing: where the server batches, a batch's own factor
    # is in its work instead, and the pace is 1.
    pace = [1.0] * (replicas + 1) if batching else [1.0 / f for f in factor]

    arrival = [0.0] * n
    start = [0.0] * n
    done = [0.0] * n
    at_server = [0.0] * n  # when it joined its server's queue
    came_busy = [False] * n  # whether that server was computing (or in its handover) then
    if open_loop:  # every arrival is known in advance; `next_arrival` walks them
        given = arrivals_s if arrivals_s is not None else poisson_offsets(rate_per_s or 1.0, n, seed)
        arrival = [float(t) for t in given]
        released = n
    else:
        assert concurrency is not None
        released = min(concurrency, n)  # sent at once; each one ending sends the next

    events: list[tuple[float, int, int, int, Any]] = []  # (when, order, kind, replica, request)
    # Running batches by the work clock at which they end: the clock runs at `pace[computing]` work-seconds per
    # second, the same for every running batch, so their order of ending never changes.
    running: list[tuple[float, int, int, list[int]]] = []
    clock = now = 0.0
    seq = 0
    outstanding = [0] * replicas
    router = [(0, r) for r in range(replicas)]  # (outstanding, replica): stale entries are skipped
    queues: list[deque[int]] = [deque() for _ in range(replicas)]
    occupied = [False] * replicas  # computing a batch, or in its handover after one
    gather_until = [-1.0] * replicas  # the instant an idle server's wait for partners ends (-1: none pending)
    waiting: deque[int] = deque()  # in the studio, for a slot
    in_flight = computing = batches = 0

    def dispatch(i: int) -> None:
        nonlocal seq, in_flight
        while True:
            count, r = router[0]
            if count == outstanding[r]:
                break
            heapq.heappop(router)
        outstanding[r] += 1
        heapq.heapreplace(router, (outstanding[r], r))
        in_flight += 1
        seq += 1
        heapq.heappush(events, (now + pre[i], seq, _AT_SERVER, r, i))

    def start_batch(r: int) -> None:
        nonlocal seq, batches, computing
        queue = queues[r]
        batch = [queue.popleft() for _ in range(min(batch_limit, len(queue)))]
        for i in batch:
            start[i] = now
        occupied[r] = True
        gather_until[r] = -1.0
        computing += 1
        work = service[batches] * (factor[len(batch)] if batching else 1.0)
        batches += 1
        seq += 1
        heapq.heappush(running, (clock + work, seq, r, batch))

    def take_queued(r: int) -> None:
        """A server free to start: its queued requests as a batch now, or, where it batches and the batch is not
        full, once the oldest one's wait for partners ends (an arrival that fills the batch starts it sooner)."""
        nonlocal seq
        queue = queues[r]
        if not queue:
            occupied[r] = False
            return
        head = queue[0]
        deadline = at_server[head] + (fleet.gather_busy_s if came_busy[head] else fleet.gather_s)
        if not batching or len(queue) >= batch_limit or deadline <= now:
            start_batch(r)
            return
        occupied[r] = False
        if gather_until[r] != deadline:
            gather_until[r] = deadline
            seq += 1
            heapq.heappush(events, (deadline, seq, _GATHERED, r, None))

    def arrive(i: int) -> None:
        if in_flight < slots:
            dispatch(i)
        else:
            waiting.append(i)

    next_arrival = 0
    if not open_loop:
        for i in range(released):
            arrive(i)
        next_arrival = n  # the closed loop releases the rest itself
    inf = float("inf")
    while True:
        rate = pace[computing]
        ends = now + (running[0][0] - clock) / rate if running else inf
        upcoming = arrival[next_arrival] if next_arrival < n else inf
        soonest = events[0][0] if events else inf
        when = min(ends, upcoming, soonest)
        if when == inf:
            break
        clock += (when - now) * rate
        now = when
        if ends == when:
            _, _, r, batch = heapq.heappop(running)
            computing -= 1
            for i in batch:
                seq += 1
                heapq.heappush(events, (now + post[i], seq, _FINISHED, r, i))
            if handover > 0:  # the server's own bookkeeping before it takes the next
                seq += 1
                heapq.heappush(events, (now + handover, seq, _SERVER_FREE, r, None))
            else:
                take_queued(r)
            continue
        if soonest != when:
            arrive(next_arrival)
            next_arrival += 1
            continue
        _, _, kind, r, i = heapq.heappop(events)
        if kind == _AT_SERVER:
            queues[r].append(i)
            at_server[i], came_busy[i] = now, occupied[r]
            if not occupied[r]:  # (a server in its handover takes it when that ends)
                take_queued(r)
        elif kind == _SERVER_FREE:
            take_queued(r)
        elif kind == _GATHERED:
            if not occupied[r] and gather_until[r] == now:  # (not one a full batch or a later wait replaced)
                gather_until[r] = -1.0
                take_queued(r)
        else:
            done[i] = now
            outstanding[r] -= 1
            heapq.heappush(router, (outstanding[r], r))
            in_flight -= 1
            if waiting:
                dispatch(waiting.popleft())
            if released < n:  # closed loop: the next request goes out as this one ends
                arrival[released] = now
                arrive(released)
                released += 1
    arrivals = np.asarray(arrival)
    finished = np.asarray(done)
    ended = finished - np.asarray(post)  # its batch's end: the studio's time after it is the post overhead
    return SimResult(
        latency_s=finished - arrivals,
        wait_s=np.asarray(start) - arrivals,
        arrival_s=arrivals,
        service_s=ended - np.asarray(start),
    )


def steady_state(fleet: SimFleet, rate_per_s: float, seed: int = 0, requests: int = STEADY_REQUESTS) -> SimResult:
    """A long open-loop run, its first requests (the fleet filling up from empty) left out."""
    result = simulate(fleet, requests, rate_per_s=rate_per_s, seed=seed)
    skip = int(requests * STEADY_WARMUP)
    return SimResult(*(getattr(result, name)[skip:] for name in _FIELDS))


def runs_of(
    fleet: SimFleet,
    requests: int,
    *,
    rate_per_s: float | None = None,
    concurrency: int | None = None,
    arrivals_s: Sequence[float] | None = None,
    seed: int = 0,
    total: int = STEADY_REQUESTS,
) -> list[SimResult]:
    """Runs of `requests` requests each, each from an empty fleet (as one bench cell runs), until about `total`
    requests: what runs of that length measure, start-up included. With `arrivals_s`, every run has those arrivals
    (a run that happened) and its own service draws."""
    runs = max(1, -(-total // requests))
    return [
        simulate(
            fleet,
            requests,
            rate_per_s=rate_per_s,
            concurrency=concurrency,
            arrivals_s=arrivals_s,
            seed=seed * 1000 + run,
        )
        for run in range(runs)
    ]


def pooled(results: Sequence[SimResult]) -> SimResult:
    """Runs' figures together, as one."""
    return SimResult(*(np.concatenate([getattr(result, name) for result in results]) for name in _FIELDS))
