"""A fleet that follows its load: when to add a replica, when to take one out, and the loop that asks.

The policy (`Autoscaler.decide`) is a pure function of the load it is shown and the time it is given, apart from
the clocks it keeps between calls (since when the queue has been high, since when each replica has been idle), so
that it is tested with explicit times. The load is the fleet's queue: requests waiting in the studio that could be
sent now, plus those at each replica. The fleet grows by one when that queue per serving replica has stayed above
a threshold for a while, and shrinks by one when a replica has had nothing to do for a while; never past its
bounds, one change at a time.

`ScalingLoop` runs the policy on a thread: it reads the load, decides, hands an add or a remove to the fleet's own
hooks (the controller's: through Ray, or the local fleet) and keeps a bounded log of what it did and why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from studio.config import ScalingSettings

log = logging.getLogger(__name__)

# How often the loop looks at the load: well under the sustain and idle times a person would set.
CHECK_INTERVAL_S = 1.0
# Decisions and outcomes kept for the page.
LOG_SIZE = 50
# How long a stop waits for the loop to give up an add or a remove under way.
STOP_WAIT_S = 60.0


class Action(StrEnum):
    ADD = "add"
    REMOVE = "remove"
    HOLD = "hold"


@dataclass(frozen=True)
class ScalingPolicy:
    min_replicas: int
    max_replicas: int
    queue_per_replica: float  # the fleet grows when its queue per serving replica stays above this ...
    sustain_s: float  # ... for this long
    idle_s: float  # a replica with nothing to do for this long is taken out

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"replicas between {self.min_replicas} and {self.max_replicas}: need 1 <= min <= max")

    @classmethod
    def of(cls, scaling: ScalingSettings) -> ScalingPolicy:
        """The policy the settings' scaling group asks for (both bounds given: StudioSettings.scales)."""
        if scaling.replicas_min is None or scaling.replicas_max is None:
            raise ValueError("a scaling policy needs --replicas-min and --replicas-max")
        return cls(
            min_replicas=scaling.replicas_min,
            max_replicas=scaling.replicas_max,
            queue_per_replica=scaling.scale_out_queue,
            sustain_s=scaling.scale_out_after_s,
            idle_s=scaling.scale_in_idle_s,
        )


@dataclass(frozen=True)
class ReplicaLoad:
    name: str
    in_flight: int  # requests the studio has at this replica (queued or running there)
    serving: bool  # ready and taking work
    starting: bool = False  # on its way up (a new replica, or one restarting)


@dataclass(frozen=True)
class FleetLoad:
    waiting: int  # requests in the studio that a free replica could take now
    replicas: tuple[ReplicaLoad, ...]

    @property
    def serving(self) -> list[ReplicaLoad]:
        return [replica for replica in self.replicas if replica.serving]

    @property
    def queued(self) -> int:
        """Waiting in the studio and at the serving replicas."""
        return self.waiting + sum(replica.in_flight for replica in self.serving)

    @property
    def per_replica(self) -> float | None:
        serving = len(self.serving)
        return self.queued / serving if serving else None


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    replica: str | None = None  # the one to take out (remove)


@dataclass(frozen=True)
class ScalingEvent:
    """One line of the log: a decision (add, remove) or what came of it (added, removed, failed)."""

    at: float  # wall-clock time
    action: str
    reason: str
    replica: str | None = None


class Autoscaler:
    """Decides, from the load at a time, whether the fleet grows, shrinks or holds."""

    def __init__(self, policy: ScalingPolicy):
        self.policy = policy
        self._above_since: float | None = None  # the queue per replica has been above the threshold since then
        self._idle_since: dict[str, float] = {}  # replica -> since when it has had nothing to do

    def decide(self, load: FleetLoad, now: float) -> Decision:
        policy = self.policy
        count, serving = len(load.replicas), load.serving
        self._clock_idle(load, now)
        per = load.per_replica
        if per is None:
            self._above_since = None
            return Decision(Action.HOLD, "no replica serving yet")
        if count < policy.min_replicas and not any(replica.starting for replica in load.replicas):
            return Decision(Action.ADD, f"{count} replica{'s' * (count != 1)}, below the minimum {policy.min_replicas}")
        if per > policy.queue_per_replica:
            since = self._above_since = self._above_since if self._above_since is not None else now
            high = f"queue {per:.1f} per replica, above {policy.queue_per_replica:g}"
            if count >= policy.max_replicas:
                return Decision(Action.HOLD, f"{high}, at the maximum of {policy.max_replicas}")
            if any(replica.starting for replica in load.replicas):
                return Decision(Action.HOLD, f"{high}; a replica is starting")
            if now - since >= policy.sustain_s:
                self._above_since = None  # the next one waits for the queue to stay high with this one serving
                return Decision(Action.ADD, f"{high} for {now - since:.1f} s")
            return Decision(Action.HOLD, f"{high} for {now - since:.1f} s of {policy.sustain_s:g}")
        self._above_since = None
        steady = f"queue {per:.1f} per replica"
        if count <= policy.min_replicas or len(serving) < 2:
            return Decision(Action.HOLD, steady)
        # One fewer must still keep the queue under the threshold, or the next check would add it back.
        if load.queued / (len(serving) - 1) > policy.queue_per_replica:
            return Decision(Action.HOLD, steady)
        idle = [r for r in serving if r.name in self._idle_since]
        if not idle:
            return Decision(Action.HOLD, steady)
        longest = min(idle, key=lambda r: self._idle_since[r.name])
        idle_for = now - self._idle_since[longest.name]
        if idle_for < policy.idle_s:
            return Decision(Action.HOLD, steady)
        # The fleet has had a replica to spare for long enough: the newest idle one goes, so that the first replicas
        # stay (their addresses, their warm caches); the one idle longest keeps the newer one's clock, so that the
        # next replica out needs its own while of spare capacity.
        chosen = idle[-1]
        since = self._idle_since.pop(chosen.name)
        if longest is not chosen:
            self._idle_since[longest.name] = since
        return Decision(
            Action.REMOVE, f"a replica idle for {idle_for:.0f} s: {chosen.name} goes, {count - 1} left", chosen.name
        )

    def _clock_idle(self, load: FleetLoad, now: float) -> None:
        """A serving replica is idle while it has nothing and nothing waits for it; any other loses its clock."""
        idle = {r.name for r in load.serving if r.in_flight == 0 and load.waiting == 0}
        self._idle_since = {name: self._idle_since.get(name, now) for name in idle}


@dataclass
class ScalingHooks:
    """What the loop needs of a fleet. `add` and `remove` block until done (or raise), and return what they did
    in words; the event they get is set when the loop is stopped, for them to give up early."""

    read: Callable[[], FleetLoad]
    add: Callable[[threading.Event], str]
    remove: Callable[[str, threading.Event], str]


@dataclass
class ScalingLoop:
    autoscaler: Autoscaler
    hooks: ScalingHooks
    interval_s: float = CHECK_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    events: deque[ScalingEvent] = field(default_factory=lambda: deque(maxlen=LOG_SIZE))
    last: Decision | None = None  # the latest decision, a hold too: what the page says the fleet is doing
    stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        if self.running:
            return
        if self._thread is not None:  # stopped: it ends what it was doing (given up on) before a new one starts
            self._thread.join(STOP_WAIT_S)
        self.stopped.clear()
        self._thread = threading.Thread(target=self._run, name="autoscale", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        """Stop deciding; an add or remove under way is asked to give up (its hooks see `stopped`)."""
        self.stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self.stopped.is_set()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.step()
            except Exception:  # a bad read must not end scaling for good
                log.exception("autoscaling step failed")

    def step(self) -> Decision:
        """One look at the load: decide, and carry out an add or a remove."""
        decision = self.autoscaler.decide(self.hooks.read(), self.clock())
        self.last = decision
        if decision.action is Action.HOLD or self.stopped.is_set():
            return decision
        self._note(decision.action, decision.reason, decision.replica)
        try:
            if decision.action is Action.ADD:
                done = self.hooks.add(self.stopped)
                self._note("added", done)
            else:
                assert decision.replica is not None
                done = self.hooks.remove(decision.replica, self.stopped)
                self._note("removed", done, decision.replica)
        except Exception as exc:
            if self.stopped.is_set():  # the fleet stops: what was under way is given up on purpose
                self._note(f"{decision.action} called off", "the fleet stops", decision.replica)
                return decision
            self._note(f"{decision.action} failed", str(exc), decision.replica)
            log.error("autoscaling: %s failed: %s", decision.action, exc)
        return decision

    def _note(self, action: str, reason: str, replica: str | None = None) -> None:
        self.events.append(ScalingEvent(time.time(), action, reason, replica))
        log.info("autoscaling: %s%s: %s", action, f" {replica}" if replica else "", reason)
