"""The studio's back end as one object: its fleet (servers/fleet_manager.py: the servers it manages, or the ones it
attaches to, and the endpoint pool), the output store, the runs, the visitors and how they share the servers.
The CLI and the page both drive this; it imports no UI.

The fleet tells the controller what the runs must know (FleetHooks): a replica went down with a reason, the
replicas taking work changed (the in-flight slots follow), and it asks how many requests wait for a replica.

What an earlier studio left at servers is followed up as the studio starts (start), on an event loop of the
controller's own: whoever's loop the page or the CLI runs, nothing waits for a page to open.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_result, wait_fixed

from studio import grammar
from studio.backend.clients.vllm_omni import load_sdk
from studio.backend.engine_kinds import EngineKind, RunDefaults, engine_kind
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.fair_share import SLOTS_PER_SERVER, FairShare, Standing, VisitorLimitExceeded
from studio.backend.runs.party_usage import party_made_since, party_unsent
from studio.backend.runs.recovery import leftovers_to_follow
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.fleet_manager import REMOTE_URLS_WHERE, FleetHooks, FleetManager
from studio.backend.visitors import LOCAL_OPERATOR, OpenPages, Visitor
from studio.config import SMALL_MODEL_DIR, SharingSettings, StudioSettings

log = logging.getLogger(__name__)

HOUR_S = 3600.0
__all__ = ["REMOTE_URLS_WHERE", "SHARING_FIELDS", "RunTooLarge", "StudioController"]


# What the operator may change while the studio serves: how visitors share the servers, and how large a run may be.
SHARING_FIELDS = tuple(SharingSettings.model_fields)


class RunTooLarge(RuntimeError):
    """A run of more requests than max_run_requests (operators' runs too); the message names the setting."""


# Event loops of closed controllers, stopped with the follow-ups they still held: kept, so that those are neither run
# further nor collected (either would settle requests that the next studio is to follow up from history).
_STOPPED_LOOPS: list[asyncio.AbstractEventLoop] = []


_SDK_LOCK = threading.Lock()


def _load_sdk() -> None:
    """load_sdk, one thread at a time: the SDK is a lazily loaded module, which two threads must not load at once
    (the second sees it half made)."""
    with _SDK_LOCK:
        load_sdk()


class _OwnLoop:
    """An event loop of the controller's own, on a daemon thread: for the work it starts by itself (the follow-up of
    an earlier studio's requests), whichever loop the page or the CLI runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="studio-follow-up", daemon=True)
        self._thread.start()

    def submit(self, work: Coroutine[Any, Any, int]) -> concurrent.futures.Future[int]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def stop(self) -> None:
        """Stops it where it is: what it still follows stays as history has it, for the next studio to follow up."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        _STOPPED_LOOPS.append(self.loop)


class StudioController:
    def __init__(self, settings: StudioSettings, store: OutputStore | None = None, fleet: FleetManager | None = None):
        """`store` and `fleet`: ones the caller made already (the CLI sets the engine starting before it imports
        the rest of the studio); by default the controller makes its own fleet from the settings."""
        self.settings = settings
        self.store = store or OutputStore(Path(settings.outputs_dir))
        self.board = RequestBoard()
        # One dispatcher for every run: the studio's in-flight slots, shared fairly across visitors.
        self.dispatcher = FairShare(self._slot_count(len(settings.remote_urls) or 1), settings.visitor_max_in_flight)
        self.open_pages = OpenPages()  # whose pages are open: the last one closing cancels what they had not sent
        self._lock = threading.Lock()
        self.fleet = self._adopt(fleet) if fleet is not None else self._new_fleet(settings)
        lost = self.store.mark_unfinished_lost()
        if lost:
            log.warning("%d requests of an earlier studio never reached a server; marked lost", lost)
        # What an earlier studio left at servers, read before this one sends anything: followed up as it starts
        # (resume_unfinished), never mixed with this studio's own requests in flight by then.
        self._leftovers = self.store.resumable()
        self._follow_up: concurrent.futures.Future[int] | None = None
        self._follow_up_lock = threading.Lock()
        self._own_loop: _OwnLoop | None = None

    # ---- the fleet ----------------------------------------------------------------------------------
    def _hooks(self) -> FleetHooks:
        return FleetHooks(endpoint_down=self._endpoint_down, capacity=self._capacity, waiting=self._sendable)

    def _new_fleet(self, settings: StudioSettings) -> FleetManager:
        return FleetManager(settings, self.store.logs_dir, self._hooks())

    def _adopt(self, fleet: FleetManager) -> FleetManager:
        fleet.hooks = self._hooks()
        return fleet

    @property
    def kind(self) -> EngineKind:
        """The record of the engine the settings name (they change with apply_settings)."""
        return engine_kind(self.settings)

    @property
    def managed(self) -> bool:
        return self.kind.managed

    def _slot_count(self, servers: int) -> int:
        return self.settings.in_flight_slots or SLOTS_PER_SERVER * servers

    def _capacity(self, replicas: int) -> None:
        """The replicas taking work changed: the studio's in-flight slots follow (unless the operator fixed them)."""
        self.dispatcher.set_slots(self._slot_count(replicas))

    def _endpoint_down(self, url: str, reason: str, started_only: bool) -> None:
        """A replica went down: what it had started fails with the reason (and, with started_only, what it only
        queued is sent again, elsewhere or once it is back)."""
        for run in self.board.runs:
            if not run.finished:
                run.fail_endpoint_threadsafe(url, reason, started_only=started_only)

    def _sendable(self) -> int:
        """Requests waiting in the studio that another replica could take now: of each run, those waiting, up to
        what its own concurrency lets it have out beside those it has out already (a run of concurrency 1 keeps
        one replica busy, however long its queue)."""
        total = 0
        for run in list(self.board.runs):
            if run.finished:
                continue
            states = [view.state for view in run.views]
            waiting = states.count(RequestState.WAITING)
            out = sum(1 for state in states if not state.finished) - waiting
            total += min(waiting, max(0, run.spec.concurrency - out))
        return total

    @property
    def start_error(self) -> str | None:
        return self.fleet.start_error

    def start(self, wait: bool = True) -> None:
        """Start the fleet (or attach to remote servers) and build its endpoint pool. The SDK client is warmed
        meanwhile, so that the first request does not count its import as queue wait. What an earlier studio left
        at servers is followed up meanwhile (once per studio process)."""
        self._begin_follow_up()  # it needs no server of this studio's (and loads the SDK first, as below)
        if self.managed:
            self.fleet.launch()
        _load_sdk()  # while the servers start: the two share no work
        self.fleet.start(wait=wait)

    def start_in_background(self) -> None:
        """Start once, off the caller's thread (the page stays usable and shows the engine starting)."""
        self._begin_follow_up()
        self.fleet.start_in_background()

    def stop(self) -> None:
        self.fleet.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def apply_settings(self, settings: StudioSettings) -> None:
        """New engine settings: they take effect on the next start (a new fleet is made; on Ray the old one's
        actors end, and their GPUs go to the new one)."""
        previous = self.fleet.pool
        self.fleet.close()
        with self._lock:
            self.settings = settings
            self.fleet = self._new_fleet(settings)
            self.fleet.predecessor = previous  # runs under way send what they have not sent to the new servers
            self.dispatcher.max_in_flight_per_visitor = settings.visitor_max_in_flight

    def apply_sharing(self, **values: object) -> StudioSettings:
        """New sharing settings (slots, per-visitor limits, cancel on close): checked like the flags, and in effect
        at once, for the requests already waiting too; the servers keep running. Raises ValidationError."""
        unknown = set(values) - set(SHARING_FIELDS)
        if unknown:
            raise ValueError(f"not a sharing setting: {', '.join(sorted(unknown))}")
        settings = StudioSettings.model_validate({**self.settings.model_dump(), **values})
        with self._lock:
            self.settings = settings
            self.dispatcher.max_in_flight_per_visitor = settings.visitor_max_in_flight
            pool = self.fleet.pool
            self.dispatcher.set_slots(self._slot_count(pool.taking_work if pool else 1))
        return settings

    def set_auto_restart(self, on: bool) -> None:
        """Takes effect at once, for the runs under way too."""
        self.settings = self.settings.model_copy(update={"auto_restart": bool(on)})
        self.fleet.auto_restart = bool(on)
        for run in self.board.runs:
            if not run.finished:
                run.resubmit_unstarted = self.managed and bool(on)

    @property
    def serves_small_model(self) -> bool:
        """The engine runs the project's own small model, whose prompts follow a grammar (studio/grammar.py)."""
        return self.managed and Path(self.settings.model).expanduser().resolve() == SMALL_MODEL_DIR.resolve()

    def prompt_hints(self, prompts: list[str]) -> list[str]:
        """For the small model: each prompt it cannot draw as asked, and what of its grammar the prompt lacks."""
        if not self.serves_small_model:
            return []
        hints = []
        for number, prompt in enumerate(prompts, start=1):
            missing = grammar.what_is_missing(prompt)
            if missing is not None:
                shown = prompt if len(prompt) <= 40 else prompt[:37] + "..."
                hints.append(f"prompt {number} ({shown!r}) is outside the default model's grammar: {missing}")
        return hints

    def run_defaults(self, tier: str) -> RunDefaults:
        """What a request at `tier` asks where the user gives nothing (frames, fps, steps, guidance): this engine's
        defaults and the settings', as RunSpec.resolved fills them in; the page's form shows them."""
        return self.kind.defaults_for(tier, self.settings)

    def checked_spec(self, spec: RunSpec) -> RunSpec:
        """`spec` as this engine runs it (RunSpec.resolved: every default filled in), checked before anything is
        built or sent: its size against max_run_requests (RunTooLarge), then its shape and what the wire contract
        limits (RunSpec.check_requests: one request stands for all). new_run builds its requests once."""
        spec = spec.resolved(self.kind, self.settings)
        self.check_run_size(spec)
        spec.check_requests()
        return spec

    @property
    def starting(self) -> bool:
        """The engine is on its way up (or about to be): worth waiting for."""
        return self.fleet.starting

    async def wait_until_ready(self, poll_s: float = 0.5) -> None:
        """Start if needed and wait while the engine starts; returns when ready or when starting failed."""
        self.start_in_background()
        waiting = AsyncRetrying(retry=retry_if_result(lambda starting: starting), wait=wait_fixed(poll_s))
        await waiting(lambda: self.starting)

    def ready(self) -> bool:
        return self.fleet.ready()

    def check_run_size(self, spec: RunSpec) -> None:
        """Raises RunTooLarge where the run has more requests than max_run_requests (for everyone, operators too).
        Cheap: callers may ask before building the run's requests."""
        refusal = spec.too_many_requests(self.settings.max_run_requests)
        if refusal is not None:
            raise RunTooLarge(refusal)

    def new_run(self, spec: RunSpec, visitor: Visitor = LOCAL_OPERATOR) -> Run:
        """A run of `visitor`'s, on the board (the caller starts it). Raises RunTooLarge past max_run_requests,
        VisitorLimitExceeded where it would take the visitor past one of their limits, and OutputsFull (a
        RuntimeError: "no space left on the outputs folder (...)") where history has no room for it; a run refused
        leaves nothing in history or on the board."""
        spec = spec.resolved(self.kind, self.settings)  # as checked_spec has it; the defaults once for every caller
        if not visitor.operator and self.settings.visitor_guardrails == "forced":
            # Here, where every run of the page, the API and a re-run passes: a visitor's guardrail stays on.
            spec = spec.with_guardrails_on()
        self.check_run_size(spec)
        pool = self.fleet.pool
        # A fleet that never came up takes no run. One whose servers are down (stopped, crashed, restarting) does:
        # its requests wait up to server_wait_s for a server to answer again, then fail with the reason.
        if pool is None or (self.fleet.start_error is not None and not self.ready()):
            server = self.fleet.server
            state = server.status().message if server else "not started"
            raise RuntimeError(f"the engine is not ready ({state})")
        if not visitor.operator:
            self._check_limits(visitor, len(spec.prompts) * spec.copies)
        run = Run(
            spec,
            pool,
            self.store,
            request_timeout_s=self.settings.request_timeout_s,
            resubmit_unstarted=self.managed and self.settings.auto_restart,
            restart_wait_s=self.settings.init_timeout_s,
            visitor=visitor,
            dispatcher=self.dispatcher,
            server_wait_s=self.settings.server_wait_s,
        )
        self.board.add_run(run)
        return run

    def _check_limits(self, visitor: Visitor, requests: int) -> None:
        """The limits bind the visitor's party (Visitor.party): an account's own, the guests of one address
        together (what each guest made counts from history, its address's from this studio's runs)."""
        queued = max(len(self.board.unsent(visitor)), party_unsent(self.board, visitor.party))
        limit = self.settings.visitor_max_queued
        shared = ", shared by the guests of one address" if visitor.party != visitor.id else ""
        if queued + requests > limit:
            raise VisitorLimitExceeded(
                f"at most {limit} queued request{'s' * (limit != 1)} per visitor{shared}; you have {queued} queued "
                f"and asked for {requests} more"
            )
        hourly = self.settings.visitor_max_videos_per_hour
        if hourly is not None:
            since = time.time() - HOUR_S
            made = max(self.store.requests_since(visitor.id, since), party_made_since(self.board, visitor.party, since))
            if made + requests > hourly:
                raise VisitorLimitExceeded(
                    f"at most {hourly} videos per hour per visitor{shared}; you have asked for {made} in the last "
                    f"hour and {requests} more now"
                )

    def cancel_unsent(self, visitor: Visitor) -> int:
        """The visitor's requests not yet sent to a server are cancelled (their page closed); running ones finish."""
        return self.board.cancel_unsent(visitor)

    def page_opened(self, visitor: Visitor, page: str) -> None:
        self.open_pages.opened(visitor, page)

    def page_closed(self, visitor: Visitor, page: str) -> int:
        """A page of the visitor's closed: where it was their last, what they had not yet sent is cancelled
        (unless the operator turned that off). Returns how many requests were cancelled. From any thread (the page's
        unload handler runs in a worker thread): each run is cancelled on its own event loop, in time in proportion
        to its requests, with one history write made off the loop."""
        last = self.open_pages.closed(visitor, page)
        if not (last and self.settings.cancel_unsent_on_close):
            return 0
        return self.cancel_unsent(visitor)

    def standing(self, visitor: Visitor) -> Standing:
        """Where the visitor's work stands: theirs queued and at a server, others' ahead of it, and an ETA."""
        queued = len(self.board.unsent(visitor))
        in_flight = self.dispatcher.in_flight_by_visitor()
        mine_in_flight = in_flight.pop(visitor.party, 0)  # the dispatcher counts by party (fair_share.py)
        # Others' requests ahead of the visitor's are those that get a slot first: those at the servers and those
        # served before in turn. A visitor with nothing waiting for a slot has nothing ahead of them.
        waiting_ahead = self.dispatcher.served_before(visitor.party, queued) if queued else Counter()
        ahead = +(in_flight + waiting_ahead) if queued else Counter()
        recent = self.board.recent_inference_s()
        eta_s = None
        if recent:
            servers = self.fleet.pool.taking_work if self.fleet.pool else 1
            typical = sum(recent) / len(recent)
            # What is at the servers counts by its own time to go, so the figure runs down as the work does.
            at_servers = self.board.at_servers_left_s(typical, visitor.party)
            if queued:
                at_servers += self.board.at_servers_left_s(typical, visitor.party, theirs=False)
            eta_s = (at_servers + (sum(waiting_ahead.values()) + queued) * typical) / servers
        return Standing(queued, mine_in_flight, sum(ahead.values()), len(ahead), eta_s)

    async def resume_unfinished(self) -> int:
        """Follow up, by job id, what an earlier studio left at servers that still answer; the rest is marked lost
        with the reason. Once per studio process: start() begins it, and a call (before or after) waits for that
        one follow-up and returns how many requests it follows."""
        return await asyncio.wrap_future(self._begin_follow_up())

    def _begin_follow_up(self) -> concurrent.futures.Future[int]:
        """The follow-up of the earlier studio's requests, begun at the first call, on the controller's own loop."""
        with self._follow_up_lock:
            if self._follow_up is None:
                if self._leftovers:
                    self._own_loop = _OwnLoop()
                    self._follow_up = self._own_loop.submit(self._follow_up_leftovers())
                else:
                    self._follow_up = concurrent.futures.Future()
                    self._follow_up.set_result(0)
            return self._follow_up

    async def _follow_up_leftovers(self) -> int:
        try:
            await asyncio.to_thread(_load_sdk)  # done already where start() began it
            leftovers = await leftovers_to_follow(self.store, rows=self._leftovers, **self.fleet.client_options())
        except Exception:  # the studio serves on; those requests stay as history has them, for the next start
            log.exception("could not follow up the requests an earlier studio left at servers")
            return 0
        if leftovers is None:
            return 0
        pool, rows = leftovers
        # A follow-up run per visitor: each sees, cancels and counts their own requests as before the restart.
        by_visitor: dict[str, list[dict]] = {}
        for row in rows:
            by_visitor.setdefault(row.get("visitor") or LOCAL_OPERATOR.id, []).append(row)
        for visitor_id, theirs in by_visitor.items():
            name = visitor_id.partition(":")[2] or visitor_id  # "user:alice": alice (history keeps ids only)
            visitor = LOCAL_OPERATOR if visitor_id == LOCAL_OPERATOR.id else Visitor(id=visitor_id, name=name)
            run = Run.resume(
                theirs, pool, self.store, request_timeout_s=self.settings.request_timeout_s, visitor=visitor
            )
            self.board.add_run(run)
            run.start()
        return len(rows)

    def close(self) -> None:
        self.fleet.stop()
        if self._own_loop is not None:
            self._own_loop.stop()
        self.store.close()
