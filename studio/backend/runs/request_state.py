"""One request of a run as the studio sees it: the states it goes through and the moves between them.

    waiting ──send──> queued ──job in progress──> running ──job completed──> downloading ──> done
       ^                 │
       └────requeue──────┘  (its server lost the job before starting it: sent again; `unsend`: it could not be
                             reached before it took the request)

Any state but done may end in failed or cancelled. The moves only change the view; the run that makes them
records each one (recorder.py) and tells its listeners.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio import tiers
from studio.backend.clients.base import RequestTimings
from studio.backend.engine_kinds import EngineKind, kind_of_job
from studio.backend.runs.eta import Shape, StepClock
from studio.backend.runs.states import RequestState
from studio.backend.runs.stats import RequestSample
from studio.backend.visitors import LOCAL_OPERATOR
from studio.protocol import JobRecord, JobStatus, PreviewEvent, ProgressEvent, VideoRequest, is_guardrail_block


@dataclass
class RequestView:
    """The studio's view of one request; what the page's table and the CLI show."""

    id: str
    run_id: str
    position: int
    request: VideoRequest
    state: RequestState = RequestState.WAITING
    progress: float = 0.0
    job_id: str | None = None
    endpoint: str | None = None
    error: str | None = None
    guardrail_blocked: bool = False
    video_path: Path | None = None
    sidecar_path: Path | None = None
    timings: RequestTimings = field(default_factory=RequestTimings)
    server_progress_is_real: bool = False
    finished_at: float | None = None
    resubmissions: int = 0  # times it was sent again after its server restarted without having started it
    visitor_id: str = LOCAL_OPERATOR.id  # whose request it is
    # Its denoising steps, where the server tells them (a job's events): None where it tells only a percentage.
    step: int | None = None
    total_steps: int | None = None
    # What its video looks like so far, where the server sends previews (the embedded engine): its latest, kept in
    # memory only, for the page of its visitor and of operators.
    preview: PreviewEvent | None = None
    # When its steps were seen done: its own step rate, for its time to go (eta.py).
    clock: StepClock = field(default_factory=StepClock)

    # ---- what it is --------------------------------------------------------------------------------
    @property
    def tier(self) -> str | None:
        return tiers.tier_of_size(self.request.width, self.request.height)

    @property
    def server_kind(self) -> EngineKind | None:
        """The kind of server that made its job, where the job id tells (a Cosmos Framework job's does)."""
        return kind_of_job(self.job_id)

    def limits_note(self) -> str | None:
        """What its server could not tell or do for it, once it ended (as far as its job id tells the server's kind):
        done, the latency alone where queue wait and inference cannot be told apart; cancelled, that the server went
        on with it."""
        kind = self.server_kind
        if kind is None:
            return None
        lacks = {
            RequestState.DONE: kind.capabilities.queue_and_inference,
            RequestState.CANCELLED: kind.capabilities.cancel_stops_work,
        }.get(self.state)
        return lacks.why_not if lacks is not None and not lacks else None

    @property
    def shape(self) -> Shape:
        """Requests of one shape step at about the same rate: the key for estimates."""
        return Shape.of(self.request)

    @property
    def never_started(self) -> bool:
        """At a server, and never seen running there: safe to send again if the server lost it."""
        return self.state is RequestState.QUEUED and self.timings.first_running is None

    @property
    def elapsed_s(self) -> float:
        """From its submit to its end (a cancelled or failed one stops counting when it ended), or to now."""
        if not self.state.finished:
            return time.time() - self.timings.created
        end = self.timings.downloaded or self.finished_at or self.timings.completed or time.time()
        return end - self.timings.created

    @property
    def started_running(self) -> float | None:
        """When it was first seen running (else accepted): where its time at the server begins."""
        return self.timings.first_running or self.timings.accepted

    @property
    def planned_steps(self) -> int:
        """Its denoising steps in all: as its events tell, else as it asked (where it left them to the server,
        its percentage stands for them)."""
        return self.total_steps or self.request.num_inference_steps or 100

    @property
    def steps_done(self) -> float:
        """Its denoising steps done: as its events tell them, else its progress in steps."""
        if self.step is not None:
            return float(self.step)
        return self.progress / 100.0 * self.planned_steps

    def sample(self) -> RequestSample:
        return RequestSample.of(str(self.state), self.tier, self.timings, self.finished_at)

    def as_record(self) -> dict[str, Any]:
        """The request as one flat record: what it asked, where it went, how it ended, and its timings (a row
        of the bench's requests.csv)."""
        return {
            "id": self.id,
            "position": self.position,
            "prompt": self.request.prompt,
            "size": self.request.size,
            "num_frames": self.request.num_frames,
            "seed": self.request.seed,
            "state": str(self.state),
            "progress": self.progress,
            "job_id": self.job_id,
            "endpoint": self.endpoint,
            "error": self.error,
            "guardrail_blocked": self.guardrail_blocked,
            "resubmissions": self.resubmissions,
            "video_path": str(self.video_path) if self.video_path else None,
            **self.timings.as_dict(),
        }

    # ---- moves -------------------------------------------------------------------------------------
    def send_to(self, endpoint_url: str) -> None:
        """Sent to a server, where it waits its turn."""
        self.endpoint, self.state = endpoint_url, RequestState.QUEUED

    def unsend(self) -> None:
        """Its server could not be reached before it took the request: back to waiting in the studio (not at a
        server, so a page that closes cancels it, and a restart marks it lost rather than following it up)."""
        self.endpoint, self.state = None, RequestState.WAITING
        self.timings.sent = None

    def accept(self, job_id: str) -> None:
        """The server took it as this job."""
        self.job_id = job_id

    def track(self, record: JobRecord) -> None:
        """A poll of its job: state and progress follow the job's."""
        if record.status is JobStatus.IN_PROGRESS:
            self.state = RequestState.RUNNING
            if 0 < record.progress < 100:
                self.server_progress_is_real = True
        elif record.status is JobStatus.COMPLETED:
            self.state = RequestState.DOWNLOADING
        self.progress = float(record.progress)
        # Where the job's events tell its steps, those time them (a record's percentage is rounded).
        if self.step is None and self.state is RequestState.RUNNING and 0 < self.progress < 100:
            self.clock.observe(self.steps_done, time.time())

    def stepped(self, step: int, total_steps: int) -> None:
        """A denoising step of its job, as the server's events tell it (the record's progress follows as well)."""
        self.step, self.total_steps = step, total_steps
        self.server_progress_is_real = True
        if step > 0:
            self.clock.observe(float(step), time.time())

    def job_event(self, event: ProgressEvent | PreviewEvent) -> None:
        """One of its job's events: a step, or the latest preview (an earlier one is dropped)."""
        if isinstance(event, PreviewEvent):
            if self.preview is None or event.step >= self.preview.step:
                self.preview = event
        else:
            self.stepped(event.step, event.total_steps)

    def requeue(self) -> None:
        """Its server lost the job before starting it: back to waiting in the studio, to be sent again."""
        self.resubmissions += 1
        self.job_id, self.endpoint, self.state, self.progress = None, None, RequestState.WAITING, 0.0
        self.clock = StepClock()
        self.timings.sent = self.timings.accepted = self.timings.last_queued = None

    def job_failure(self, record: JobRecord) -> str:
        """The reason a job that ended without a video gives; notes whether the guardrail blocked it."""
        error = record.error
        message = (error.message if error else "") or f"job ended {record.status}"
        self.guardrail_blocked = is_guardrail_block(message)
        code = f" (HTTP {error.code})" if error and error.code else ""
        return message + code

    def finish(self, state: RequestState, error: str | None) -> None:
        self.state, self.error, self.finished_at = state, error, time.time()
        if state is RequestState.DONE:
            self.progress = 100.0
            self.preview = None  # the video itself is there now
