"""The crowd of benchmarks/cpu/soak.py: visitors and an operator that use a running studio through the page's API
(gradio_client, signed in), and the ledger of everything they did.

A visitor, in rounds: submits a run (prompts of the small model's grammar, modest sizes) and sometimes a second
one at once; cancels a request of it or all its work now and then; waits for it with short long-polls
(`/wait_run` with a timeout of at most 20 s, asked again while it has not finished), asking `/run_status` and
`/preview` on the way; then browses History, exports a run and fetches a video, its sidecar or an export through
the studio's file route with its own cookies; then thinks for a while (the pacer's think time, which aims the
engine at a busy fraction). The operator browses everyone's History, applies a sharing change and takes it back,
and restarts the engine once, at set points of the run.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from gradio_client import Client
from gradio_client.exceptions import AppError

from studio.grammar import all_scenes, random_prompt
from studio.settings import StudioSettings

WAIT_POLL_S = (5.0, 10.0, 20.0)  # /wait_run's timeout: a short long-poll, asked again until the run finishes
DRAIN_S = 180.0  # after the clock, how long a visitor waits for its last runs before it cancels what is left
GIVE_UP_S = 60.0  # and how long after that cancel, before the run counts as not finished
LIGHT_CALLS = ("/run_status", "/history")
TERMINAL = ("done", "failed", "cancelled")
BLOCKED_PROMPT = "a red circle moving left through gore"  # the guardrail's blocklist refuses it: a failed request
LINK = re.compile(r'href="([^"]+)"')

QUEUED_TITLE = StudioSettings.model_fields["visitor_max_queued"].title  # as the Sharing answer names it


@dataclass
class Submitted:
    """A run as its visitor saw it: the ids the submit answered and the record it had last."""

    visitor: str
    run_id: str
    request_ids: list[str]
    at_s: float  # since the clock's start
    final: dict[str, Any] | None = None  # the record once finished (from /wait_run)
    finished_s: float | None = None  # since the clock's start, when the visitor saw it finished
    drain_cancelled: bool = False  # still going at the drain's end: its visitor cancelled what was left


@dataclass
class Ledger:
    """What the crowd did, for the report: shared by the visitors' threads, each entry under the lock."""

    clock0: float  # time.monotonic() at the clock's start
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: list[Submitted] = field(default_factory=list)
    refusals: Counter = field(default_factory=Counter)  # a submit the studio refused, by its words
    calls: Counter = field(default_factory=Counter)  # endpoint -> calls made
    app_errors: Counter = field(default_factory=Counter)  # "endpoint: words" -> count (gr.Error answers)
    transport_errors: list[str] = field(default_factory=list)  # a call that got no answer at all
    light: list[tuple[float, str, float]] = field(default_factory=list)  # (at_s, endpoint, seconds)
    files: Counter = field(default_factory=Counter)  # "video 200", "sidecar 200", "export 403", ...
    file_failures: list[str] = field(default_factory=list)
    cancels: Counter = field(default_factory=Counter)  # "request", "all"
    events: list[dict[str, Any]] = field(default_factory=list)  # the operator's actions, with their answers

    def now_s(self) -> float:
        return time.monotonic() - self.clock0

    def add(self, what: str, value: Any) -> None:
        with self.lock:
            getattr(self, what).append(value)

    def count(self, what: str, key: str) -> None:
        with self.lock:
            getattr(self, what)[key] += 1


class Pacer:
    """The visitors' mean think time, adjusted by soak.py's loop so that the engine is busy about `target` of
    the time."""

    def __init__(self, think_s: float, target: float) -> None:
        self.think_s = think_s
        self.target = target
        self.history: list[tuple[float, float | None, float]] = []  # (at_s, busy measured, think after)

    def adjust(self, at_s: float, busy: float | None) -> None:
        if busy is not None:
            # Multiplicative, damped and bounded: a noisy measure moves the think time a little at a time.
            ratio = min(2.0, max(0.5, (max(busy, 0.01) / self.target) ** 0.7))
            self.think_s = min(120.0, max(0.2, self.think_s * ratio))
        self.history.append((round(at_s, 1), None if busy is None else round(busy, 3), round(self.think_s, 2)))


class Caller:
    """One signed-in account's client: every call counted, light calls timed, errors kept by kind."""

    def __init__(self, url: str, user: str, password: str, ledger: Ledger) -> None:
        self.user = user
        self.ledger = ledger
        self.client = Client(url, auth=(user, password), verbose=False)
        self.web = httpx.Client(timeout=60)

    def call(self, api_name: str, **kwargs: Any) -> Any:
        """The answer, or None where the studio refused (gr.Error) or nothing answered; each is recorded."""
        started = time.monotonic()
        self.ledger.count("calls", api_name)
        try:
            return self.client.predict(api_name=api_name, **kwargs)
        except AppError as refused:
            self.ledger.count("app_errors", f"{api_name}: {str(refused)[:120]}")
            return None
        except Exception as failed:  # no answer: a check of the report
            self.ledger.add("transport_errors", f"{self.user} {api_name}: {type(failed).__name__}: {failed}"[:300])
            return None
        finally:
            if api_name in LIGHT_CALLS:
                self.ledger.add("light", (self.ledger.now_s(), api_name, time.monotonic() - started))

    def fetch(self, kind: str, url: str) -> bytes | None:
        """A file through the studio's file route with this account's cookies, as its browser fetches it."""
        try:
            response = self.web.get(url, cookies=self.client.cookies)
        except httpx.HTTPError as failed:
            self.ledger.add("file_failures", f"{self.user} {kind} {url}: {type(failed).__name__}")
            return None
        self.ledger.count("files", f"{kind} {response.status_code}")
        if response.status_code != 200:
            self.ledger.add("file_failures", f"{self.user} {kind} {url}: HTTP {response.status_code}")
            return None
        return response.content

    def close(self) -> None:
        self.web.close()
        self.client.close()


class Visitor(threading.Thread):
    def __init__(
        self, caller: Caller, ledger: Ledger, pacer: Pacer, stop_at: float, rng: random.Random, blocked: float
    ) -> None:
        super().__init__(name=f"visitor-{caller.user}", daemon=True)
        self.caller = caller
        self.ledger = ledger
        self.pacer = pacer
        self.stop_at = stop_at  # time.monotonic() past which no new round starts
        self.rng = rng
        self.blocked = blocked  # the share of runs with a prompt the guardrail refuses
        self.scenes = all_scenes()
        self.failure: str | None = None

    def run(self) -> None:
        try:
            while time.monotonic() < self.stop_at:
                self.one_round()
                self.think()
        except Exception as failed:  # the report says it; the other visitors go on
            self.failure = f"{type(failed).__name__}: {failed}"

    def think(self) -> None:
        pause = min(self.rng.expovariate(1.0 / self.pacer.think_s), 4 * self.pacer.think_s)
        time.sleep(max(0.0, min(pause, self.stop_at - time.monotonic())))

    def form(self) -> dict[str, Any]:
        rng = self.rng
        prompts = [random_prompt(rng.choice(self.scenes), rng) for _ in range(rng.choice((1, 1, 2, 3)))]
        if rng.random() < self.blocked:
            prompts[0] = BLOCKED_PROMPT
        return {
            "prompts": "\n".join(prompts),
            "tier": "256p",
            "aspect": rng.choice(("1:1", "16:9", "9:16")),
            "frames": rng.choice((9, 17, 33)),
            "steps": rng.choice((2, 3, 4)),
            "seed": str(rng.randrange(1_000_000)),
            "seed_policy": rng.choice(("fixed", "increment", "random")),
            "copies": rng.choice((1, 1, 2)),
            "concurrency": rng.choice((1, 2)),
            "guardrails": True,
        }

    def submit(self) -> Submitted | None:
        answer = self.caller.call("/submit_run", **self.form())
        if answer is None:
            return None
        run = Submitted(self.caller.user, answer["run_id"], [r["id"] for r in answer["requests"]], self.ledger.now_s())
        self.ledger.add("runs", run)
        return run

    def one_round(self) -> None:
        runs = [run for run in (self.submit() for _ in range(2 if self.rng.random() < 0.15 else 1)) if run]
        if not runs:
            self.refused()
            return
        roll = self.rng.random()
        if roll < 0.12:
            time.sleep(self.rng.uniform(0.0, 1.0))
            run = self.rng.choice(runs)
            self.caller.call("/cancel", request_id=self.rng.choice(run.request_ids))
            self.ledger.count("cancels", "request")
        elif roll < 0.16:
            time.sleep(self.rng.uniform(0.0, 1.0))
            self.caller.call("/cancel_all", show="mine")
            self.ledger.count("cancels", "all")
        for run in runs:
            run.final = self.wait(run)
        self.browse(runs)

    def refused(self) -> None:
        """A submit refused (a limit, the engine restarting): look at History, then think as usual."""
        self.caller.call("/history", show="mine")

    def wait(self, run: Submitted) -> dict[str, Any] | None:
        """The run's record once finished. Past the clock and the drain, its visitor cancels what is left of it
        (as one who gives up would) and waits a little more; None if it still has not finished."""
        deadline = max(self.stop_at, time.monotonic()) + DRAIN_S
        while True:
            if time.monotonic() >= deadline:
                if run.drain_cancelled:
                    return None  # not finished even so: the accounting says so
                run.drain_cancelled = True
                self.caller.call("/cancel_all", show="mine")
                self.ledger.count("cancels", "all, at the drain")
                deadline = time.monotonic() + GIVE_UP_S
            record = self.caller.call("/wait_run", run_id=run.run_id, timeout_s=self.rng.choice(WAIT_POLL_S))
            if record is not None and record["finished"]:
                run.finished_s = self.ledger.now_s()
                return record
            if self.rng.random() < 0.3:
                status = self.caller.call("/run_status", run_id=run.run_id)
                running = [r for r in (status or {}).get("requests", []) if r["state"] == "running"]
                if running and self.rng.random() < 0.5:
                    self.caller.call("/preview", request_id=running[0]["id"])
            if record is None:
                time.sleep(1.0)  # refused or no answer: not a tight loop

    def browse(self, runs: list[Submitted]) -> None:
        rng = self.rng
        if rng.random() < 0.35:
            self.caller.call("/history", show="mine")
        if rng.random() < 0.15:
            kind = rng.choice(("json", "csv"))
            answer = self.caller.call(f"/export_{kind}", run_id=rng.choice(runs).run_id)
            link = LINK.search(answer[0]) if answer else None
            if link:
                body = self.caller.fetch(f"export_{kind}", link.group(1))
                if body is not None and kind == "json" and not body.lstrip().startswith(b"{"):
                    self.ledger.add("file_failures", f"{self.caller.user} export_json: not JSON")
        done = [r for run in runs for r in (run.final or {}).get("requests", []) if r["state"] == "done"]
        if done and rng.random() < 0.5:
            request = rng.choice(done)
            video = self.caller.fetch("video", request["video_url"])
            if video is not None and video[4:8] != b"ftyp":
                self.ledger.add("file_failures", f"{self.caller.user} video {request['id']}: not an mp4")
            if rng.random() < 0.5:
                self.caller.fetch("sidecar", request["sidecar_url"])


def defaults_for(client: Client, api_name: str, **values: Any) -> dict[str, Any]:
    """An endpoint's arguments: `values`, and None for each parameter that has no default (a blank field: the
    form keeps its current value or its "none")."""
    endpoint = client.view_api(return_format="dict", print_info=False)["named_endpoints"][api_name]
    blanks = {p["parameter_name"]: None for p in endpoint["parameters"] if not p.get("parameter_has_default")}
    return {**blanks, **values}


class Operator(threading.Thread):
    """Browses everyone's History every so often; at its set points applies a sharing change, takes it back and
    restarts the engine. Each action and its answer goes into the ledger's events."""

    def __init__(self, caller: Caller, ledger: Ledger, stop_at: float, plan: list[tuple[float, str]]) -> None:
        super().__init__(name=f"operator-{caller.user}", daemon=True)
        self.caller = caller
        self.ledger = ledger
        self.stop_at = stop_at
        self.plan = sorted(plan)  # (at_s since the clock's start, action)
        self.failure: str | None = None
        self.queued_before: int | None = None

    def run(self) -> None:
        try:
            actions: dict[str, Callable[[], None]] = {
                "sharing": self.change_sharing,
                "sharing back": self.sharing_back,
                "restart": self.restart,
            }
            plan = list(self.plan)
            while time.monotonic() < self.stop_at:
                if plan and self.ledger.now_s() >= plan[0][0]:
                    actions[plan.pop(0)[1]]()
                    continue
                self.caller.call("/history", show="everyone")
                until = [self.stop_at - time.monotonic(), 15.0]
                if plan:
                    until.append(plan[0][0] - self.ledger.now_s())
                time.sleep(max(0.0, min(until)))
        except Exception as failed:
            self.failure = f"{type(failed).__name__}: {failed}"

    def event(self, action: str, started: float, answer: Any, ok: bool) -> None:
        self.ledger.add(
            "events",
            {
                "action": action,
                "at_s": round(started, 1),
                "took_s": round(self.ledger.now_s() - started, 2),
                "answer": str(answer)[:300],
                "ok": ok,
            },
        )

    def sharing(self, action: str, queued: int) -> None:
        started = self.ledger.now_s()
        arguments = defaults_for(self.caller.client, "/sharing", visitor_max_queued=queued)
        answer = self.caller.call("/sharing", **arguments)
        ok = isinstance(answer, str) and answer.startswith("applied") and f"{QUEUED_TITLE} = {queued}" in answer
        self.event(action, started, answer, ok)

    def change_sharing(self) -> None:
        endpoint = self.caller.client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/sharing"]
        current = next(p for p in endpoint["parameters"] if p["parameter_name"] == "visitor_max_queued")
        self.queued_before = int(current["parameter_default"])
        self.sharing("sharing", max(8, self.queued_before // 2))

    def sharing_back(self) -> None:
        self.sharing("sharing back", self.queued_before if self.queued_before is not None else 64)

    def restart(self) -> None:
        started = self.ledger.now_s()
        answer = self.caller.call("/restart_server", **defaults_for(self.caller.client, "/restart_server"))
        self.event("restart", started, answer, isinstance(answer, str) and answer.startswith("started"))
