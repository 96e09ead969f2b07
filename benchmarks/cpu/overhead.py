"""The studio's per-request overhead: its run engine against a bare HTTP loop, same engine, same requests.

One embedded engine; rounds alternate between the two clients so machine noise hits both alike.
- studio: a Run (openai SDK client, router, store): from sending a request to its mp4 validated, its
  sidecar and history row written;
- bare: plain httpx: POST the same multipart form, poll GET at the same interval, download the mp4.
Reported: median latency of each and their ratio, at each concurrency.

Usage: python benchmarks/cpu/overhead.py [--rounds 3] [--requests 16] [--concurrency 1,16] [--frames 33 --steps 35]
       [--model DIR] [--url URL --api-key K]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.config import DEFAULT_MODEL_DIR, StudioSettings

POLL_S = 0.25


COLORS = ("red", "blue", "green", "yellow", "purple", "orange", "cyan", "pink")
MOTIONS = ("moving left", "moving right", "moving up", "moving down")
SHAPE = {"frames": 33, "steps": 35}  # set from the command line


def spec(requests: int, concurrency: int) -> RunSpec:
    return RunSpec(
        prompts=[f"a {COLORS[i % 8]} circle {MOTIONS[i % 4]} on a white background" for i in range(requests)],
        tier="256p",
        aspect="16:9",
        frames=SHAPE["frames"],
        steps=SHAPE["steps"],
        seed=1,
        concurrency=concurrency,
    )


async def studio_round(url: str, store: OutputStore, requests: int, concurrency: int, key: str | None) -> list[float]:
    pool = EndpointPool.from_urls([url], api_key=key, poll_interval_s=POLL_S)
    run = Run(spec(requests, concurrency), pool, store)
    await run.wait()
    await pool.close()
    assert all(v.state is RequestState.DONE for v in run.views), [v.error for v in run.views]
    return [v.finished_at - v.timings.sent for v in run.views]


async def bare_round(url: str, folder: Path, requests: int, concurrency: int, key: str | None) -> list[float]:
    slots = asyncio.Semaphore(concurrency)
    forms = [r.form_fields() for r in spec(requests, concurrency).build_requests()]

    async def one(http: httpx.AsyncClient, index: int, fields: dict[str, str]) -> float:
        async with slots:
            sent = time.perf_counter()
            job = (await http.post("/v1/videos", files={k: (None, v) for k, v in fields.items()})).json()
            while job["status"] not in ("completed", "failed"):
                await asyncio.sleep(POLL_S)
                job = (await http.get(f"/v1/videos/{job['id']}")).json()
            content = await http.get(f"/v1/videos/{job['id']}/content")
            (folder / f"{index}.mp4").write_bytes(content.content)
            return time.perf_counter() - sent

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, timeout=600, headers=headers) as http:
        return list(await asyncio.gather(*(one(http, i, f) for i, f in enumerate(forms))))


async def main_async(args: argparse.Namespace) -> None:
    SHAPE.update(frames=args.frames, steps=args.steps)
    settings = StudioSettings(_env_file=None, engine_threads=args.threads, model=args.model)
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.url:
            url = args.url.rstrip("/").removesuffix("/v1")
        else:
            server = ManagedServer(lambda port: embedded_launch(settings, port, output_dir=Path(tmp) / "engine"))
            server.start()
            url = server.base_url
        store = OutputStore(Path(tmp) / "outputs")
        key = args.api_key
        try:
            for concurrency in args.concurrency:
                studio, bare = [], []
                await bare_round(url, Path(tmp), 2, 1, key)  # warm-up
                for _ in range(args.rounds):
                    studio += await studio_round(url, store, args.requests, concurrency, key)
                    bare += await bare_round(url, Path(tmp), args.requests, concurrency, key)
                s, b = statistics.median(studio), statistics.median(bare)
                print(
                    f"concurrency {concurrency:>3}: studio median {s:.3f} s, bare httpx median {b:.3f} s, "
                    f"ratio {s / b:.3f}  ({len(studio)} requests each)",
                    flush=True,
                )
        finally:
            if server is not None:
                server.stop()
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 16])
    parser.add_argument("--threads", type=int, default=None, help="engine torch threads")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="the embedded engine's model")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--url", help="measure against a server that already runs (e.g. vllm serve --omni)")
    parser.add_argument("--api-key", help="its bearer key")
    asyncio.run(main_async(parser.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
