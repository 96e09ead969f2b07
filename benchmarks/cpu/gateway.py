"""The studio as a gateway for programs: its /v1/videos against the engine's own, and fair share between two keys.

One embedded engine, and a studio in front of it (`--engine remote --url ENGINE`, two visitors with API keys). The
same client, plain httpx (POST the multipart form, poll GET, download the mp4), calls either the engine directly or
the studio's gateway with a key; rounds alternate between the two so that machine noise hits both alike.

- overhead: median latency of each (from sending a request to its mp4 downloaded) and their ratio, at each
  concurrency; the studio's in-flight slots as many as the largest concurrency, so that both sides have as many
  requests at the engine;
- fair share: one key's single request while another key has 64 queued, against the same request alone (idle), for
  each number of the studio's in-flight slots asked (`--fair-slots`; a studio each); the extra wait is given in units
  of the idle request's own latency. What is already at the engine is ahead of any newcomer: the wait is about the
  slots' worth of requests, and one slot keeps the rest in the studio, in turn.

Usage: python benchmarks/cpu/gateway.py [--rounds 2] [--requests 16] [--concurrency 1,16] [--frames 33 --steps 35]
       [--crowd 64] [--fair-slots 1,8] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`, `tests`

from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.config import StudioSettings
from studio.gateway.keys import add_key
from studio.tiers import size_for
from tests.studio_process import start_studio, stop_studio

POLL_S = 0.25
COLORS = ("red", "blue", "green", "yellow", "purple", "orange", "cyan", "pink")
MOTIONS = ("moving left", "moving right", "moving up", "moving down")
USERS = ("ops", "alice", "bob")  # ops is the studio's operator; alice and bob are visitors, each with a key


def form(index: int, frames: int, steps: int) -> dict[str, str]:
    return {
        "prompt": f"a {COLORS[index % 8]} circle {MOTIONS[index % 4]} on a white background",
        "size": "{}x{}".format(*size_for("256p", "16:9")),
        "num_frames": str(frames),
        "num_inference_steps": str(steps),
        "seed": "1",
    }


async def one_video(http: httpx.AsyncClient, fields: dict[str, str]) -> tuple[str, float]:
    """One request from its POST to its mp4 downloaded: its id and latency."""
    sent = time.perf_counter()
    answer = await http.post("/v1/videos", files={k: (None, v) for k, v in fields.items()})
    job = answer.json()
    if answer.status_code >= 400 or "id" not in job:
        raise RuntimeError(f"POST /v1/videos: {answer.status_code} {answer.text[:300]}")
    while job["status"] not in ("completed", "failed"):
        await asyncio.sleep(POLL_S)
        job = (await http.get(f"/v1/videos/{job['id']}")).json()
    if job["status"] != "completed":
        raise RuntimeError(f"{job['id']} failed: {job.get('error')}")
    content = await http.get(f"/v1/videos/{job['id']}/content")
    if content.status_code != 200 or content.content[4:8] != b"ftyp":
        raise RuntimeError(f"{job['id']}: no mp4 ({content.status_code})")
    return job["id"], time.perf_counter() - sent


async def latencies(base: str, key: str | None, requests: int, concurrency: int, frames: int, steps: int):
    slots = asyncio.Semaphore(concurrency)
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def one(http: httpx.AsyncClient, index: int) -> float:
        async with slots:
            return (await one_video(http, form(index, frames, steps)))[1]

    async with httpx.AsyncClient(base_url=base, timeout=600, headers=headers) as http:
        return list(await asyncio.gather(*(one(http, i) for i in range(requests))))


async def overhead(engine: str, studio: str, key: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    figures = {}
    for concurrency in args.concurrency:
        direct, gateway = [], []
        await latencies(studio, key, 2, 1, args.frames, args.steps)  # warm-up, through both
        for _ in range(args.rounds):
            direct += await latencies(engine, None, args.requests, concurrency, args.frames, args.steps)
            gateway += await latencies(studio, key, args.requests, concurrency, args.frames, args.steps)
        d, g = statistics.median(direct), statistics.median(gateway)
        print(
            f"concurrency {concurrency:>3}: gateway median {g:.3f} s, engine directly median {d:.3f} s, "
            f"ratio {g / d:.3f}  ({len(direct)} requests each)",
            flush=True,
        )
        figures[f"c{concurrency}"] = {"gateway_s": g, "direct_s": d, "ratio": g / d}
    return figures


async def fair_share(studio: str, crowd_key: str, lone_key: str, args: argparse.Namespace) -> dict[str, float]:
    """The lone key's request alone, then behind the crowd key's `--crowd` requests; the crowd's are cancelled after."""
    idle = statistics.median(await latencies(studio, lone_key, 3, 1, args.frames, args.steps))
    crowd_headers = {"Authorization": f"Bearer {crowd_key}"}
    async with httpx.AsyncClient(base_url=studio, timeout=600, headers=crowd_headers) as crowd:
        posted = await asyncio.gather(
            *(
                crowd.post("/v1/videos", files={k: (None, v) for k, v in form(i, args.frames, args.steps).items()})
                for i in range(args.crowd)
            )
        )
        ids = [answer.json()["id"] for answer in posted if answer.status_code < 400]
        if len(ids) != args.crowd:
            refused = next(answer for answer in posted if answer.status_code >= 400)
            raise RuntimeError(f"the crowd's requests were refused: {refused.status_code} {refused.text[:300]}")
        loaded = (await latencies(studio, lone_key, 1, 1, args.frames, args.steps))[0]
        await asyncio.gather(*(crowd.delete(f"/v1/videos/{video}") for video in ids))
    extra = (loaded - idle) / idle
    return {"idle_s": idle, "loaded_s": loaded, "extra_request_times": extra}


def one_studio(folder: Path, engine_url: str, key_file: Path, slots: int):
    accounts = [flag for user in USERS for flag in ("--auth", f"{user}:{user}-password")]
    return start_studio(
        folder / f"outputs-{slots}",
        folder / f"studio-{slots}.log",
        "--engine", "remote", "--url", engine_url, *accounts, "--operator", "ops",
        "--api-key-file", str(key_file), "--in-flight-slots", str(slots),
        timeout_s=180,
    )  # fmt: skip


async def main_async(args: argparse.Namespace) -> dict:
    settings = StudioSettings(_env_file=None, engine_threads=args.threads)
    with tempfile.TemporaryDirectory(prefix="omni-studio-gateway-") as tmp:
        folder = Path(tmp)
        engine = ManagedServer(lambda port: embedded_launch(settings, port, output_dir=folder / "engine"))
        engine.start()
        key_file = folder / "keys.txt"
        keys = {user: add_key(key_file, user) for user in USERS}
        figures: dict = {"fair_share": {}}
        try:
            studio = one_studio(folder, engine.base_url, key_file, max(args.concurrency))
            try:
                figures["overhead"] = await overhead(engine.base_url, studio.url, keys["alice"], args)
            finally:
                stop_studio(studio)
            for slots in args.fair_slots:
                studio = one_studio(folder, engine.base_url, key_file, slots)
                try:
                    fair = await fair_share(studio.url, keys["alice"], keys["bob"], args)
                finally:
                    stop_studio(studio)
                print(
                    f"fair share, {slots} in-flight slot(s): alone {fair['idle_s']:.3f} s, behind {args.crowd} of "
                    f"another key's {fair['loaded_s']:.3f} s, extra wait {fair['extra_request_times']:.2f} request "
                    "times",
                    flush=True,
                )
                figures["fair_share"][f"slots{slots}"] = fair
            return figures
        finally:
            engine.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 16])
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--crowd", type=int, default=64, help="the other key's requests queued for the fair share")
    parser.add_argument(
        "--fair-slots",
        type=lambda t: [int(x) for x in t.split(",") if x],
        default=[1, 8],
        help="in-flight slots to try ('' for no fair-share run)",
    )
    parser.add_argument("--threads", type=int, default=None, help="engine torch threads")
    parser.add_argument("--out", type=Path, help="where to write the figures as JSON")
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), **figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
