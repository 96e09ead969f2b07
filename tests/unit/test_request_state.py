"""A request's moves: polls of its job, a resend after its server lost it, how a failed job reads."""

from studio.backend.runs.request_state import RequestState, RequestView
from studio.protocol import JobError, JobRecord, JobStatus, VideoRequest


def queued_view() -> RequestView:
    request = VideoRequest(prompt="p", width=320, height=192, num_frames=33, num_inference_steps=35)
    view = RequestView(id="req_x", run_id="run", position=0, request=request)
    view.send_to("http://127.0.0.1:9000")
    view.accept("video_1")
    view.timings.sent = view.timings.accepted = 1.0
    return view


def test_polls_move_it_from_queued_to_downloading():
    view = queued_view()
    assert view.state is RequestState.QUEUED and view.never_started
    view.track(JobRecord(id="video_1", status=JobStatus.IN_PROGRESS, progress=0))
    assert view.state is RequestState.RUNNING and not view.server_progress_is_real
    view.timings.first_running = 2.0
    view.track(JobRecord(id="video_1", status=JobStatus.IN_PROGRESS, progress=40))
    assert view.server_progress_is_real and view.progress == 40.0 and not view.never_started
    view.track(JobRecord(id="video_1", status=JobStatus.COMPLETED, progress=100))
    assert view.state is RequestState.DOWNLOADING
    view.finish(RequestState.DONE, None)
    assert view.state.finished and view.progress == 100.0 and view.finished_at is not None


def test_requeue_forgets_the_lost_job_and_counts_the_resend():
    view = queued_view()
    view.requeue()
    assert (view.state, view.job_id, view.endpoint, view.resubmissions) == (RequestState.WAITING, None, None, 1)
    assert view.timings.sent is None and view.timings.accepted is None
    record = view.as_record()
    assert record["state"] == "waiting" and record["resubmissions"] == 1 and record["sent"] is None


def test_a_failed_job_gives_its_reason_and_a_guardrail_block_is_noted():
    view = queued_view()
    plain = JobRecord(id="video_1", status=JobStatus.FAILED, error=JobError(code=500, message="out of memory"))
    assert view.job_failure(plain) == "out of memory (HTTP 500)" and not view.guardrail_blocked
    blocked = JobRecord(id="video_1", status=JobStatus.FAILED, error=JobError(message="Blocked by the guardrail"))
    assert view.job_failure(blocked) == "Blocked by the guardrail" and view.guardrail_blocked
    assert view.job_failure(JobRecord(id="video_1", status=JobStatus.FAILED)) == "job ended failed"


def test_elapsed_time_stops_when_a_request_is_cancelled_or_fails():
    for state in (RequestState.CANCELLED, RequestState.FAILED):
        request = VideoRequest(prompt="p", width=320, height=192, num_frames=33)
        view = RequestView(id="req_x", run_id="run", position=0, request=request)
        view.timings.created -= 10.0
        view.finish(state, "stopped")
        assert view.elapsed_s == view.finished_at - view.timings.created  # not counting on from now
