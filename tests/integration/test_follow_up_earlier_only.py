"""Following up an earlier studio's requests never takes this studio's own requests in flight for them: a page
opened after requests were sent (through the API) used to follow them a second time, downloading each twice."""

import asyncio

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.config import StudioSettings


def test_follow_up_after_requests_were_sent_leaves_them_alone(tmp_path):
    async def scenario() -> tuple[list[str], list[RequestState], int]:
        settings = StudioSettings(_env_file=None, outputs_dir=tmp_path / "out", engine_threads=1)
        controller = StudioController(settings)
        try:
            await asyncio.to_thread(controller.start)
            spec = RunSpec(prompts=["a red circle moving left", "a blue square moving up"], frames=9, steps=4)
            run = controller.new_run(spec.model_copy(update={"copies": 2, "concurrency": 4}))
            run.start()
            async for view in run.updates():
                if view.job_id is not None:  # at a server now: a history row with a job id
                    break
            followed = await controller.resume_unfinished()
            await run.wait()
            return [v.id for v in controller.board.views()], [v.state for v in run.views], followed
        finally:
            if controller.fleet.pool is not None:
                await controller.fleet.pool.close()
            controller.close()

    ids, states, followed = asyncio.run(scenario())
    assert followed == 0
    assert len(ids) == len(set(ids)) == 4
    assert states == [RequestState.DONE] * 4
