"""A capacity plan checked against runs, end to end: `omni-studio bench` measures the layouts' closed-loop cells,
`omni-studio plan` plans at two rates (a light one and one near the saturation of the first layout), and
`omni-studio bench --verify-plan` runs each layout at each rate, open loop; the table puts the plan's predicted
attainment and p90 beside the measured ones.

The rates are fractions (--light, --heavy) of the most videos/min the first layout made in any closed-loop cell;
the SLO, unless given, is --slo-factor times that layout's p90 latency at concurrency 1.

Usage (this machine's CPU, the default model):
    python benchmarks/cpu/plan_check.py --tier 256p --frames 9 --steps 4 --engine-threads 1
On a GPU node (the embedded engine on CUDA; anything after -- goes to every omni-studio command that starts servers):
    python benchmarks/cpu/plan_check.py --engine embedded --device cuda --tier 256p --layouts 1x1,2x1 -- --gpus 0,1
With a model whose request is GPU work, Wan2.1-T2V-1.3B's shape with random weights (benchmarks/harness/wan_model.py's, saved first):
    python benchmarks/cpu/plan_check.py --device cuda --wan-model --tier 256p --layouts 1x1 --frames 33 --steps 20 \
        -- --serve-args "--warmup 320x192x33 --no-warmup-in-background"
Split over two runs (each server start warms the engine again): the first with --rates light, the second with
--rates heavy --bench-report FIRST_OUT/bench/report.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT


def omni(*args: str) -> subprocess.CompletedProcess:
    """An omni-studio command of this checkout; its output shown as it goes, stdout kept."""
    print("$ omni-studio " + " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "studio", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    print(result.stdout, flush=True)
    if result.returncode != 0:
        raise SystemExit(f"omni-studio {args[0]} failed with status {result.returncode}")
    return result


def engine_args(args: argparse.Namespace) -> list[str]:
    given = ["--engine", args.engine, "--device", args.device]
    if args.model:
        given += ["--model", args.model]
    if args.engine_threads:
        given += ["--engine-threads", str(args.engine_threads)]
    return given + list(args.extra)


def rates_and_slo(report: dict, args: argparse.Namespace) -> tuple[float, float, float]:
    """The light and heavy rates (videos/min) and the SLO, from the first layout's closed-loop cells."""
    first = args.layouts.split(",")[0]
    cells = [c for c in report["cells"] if c["layout"] == first and c.get("videos_per_min")]
    most = max(c["videos_per_min"] for c in cells)
    alone = next(c for c in cells if c["concurrency"] == 1)
    slo = args.slo_seconds or round(args.slo_factor * alone["latency_p90_s"], 2)
    return round(args.light * most, 1), round(args.heavy * most, 1), slo


def wan_model(device: str) -> str:
    """Wan2.1-T2V-1.3B's shape with random weights, saved to a folder (benchmarks/harness/wan_model.py); its path."""
    from benchmarks.harness.wan_model import saved_model

    model_dir, seconds = saved_model(argparse.Namespace(device=device, smoke=False))
    print(f"saved the Wan-shaped model to {model_dir} in {seconds} s", flush=True)
    return str(model_dir)


def run_bench(args: argparse.Namespace, bench: Path, shape: list[str]) -> None:
    """The layouts' closed-loop cells, into bench/report.json."""
    omni(
        "bench",
        "--layouts",
        args.layouts,
        "--concurrency",
        args.concurrency,
        "--requests",
        str(args.requests),
        *shape,
        "--slo-seconds",
        "60",  # the plans below give their own
        "--out",
        str(bench),
        *engine_args(args),
    )


def main(args: argparse.Namespace) -> None:
    out = Path(args.out)
    started = time.time()
    if args.wan_model:
        args.model = wan_model(args.device)
    bench = out / "bench"
    shape = ["--tier", args.tier, "--frames", str(args.frames), "--steps", str(args.steps)]
    if args.bench_report:  # an earlier run's bench: its cells, plans and verify runs go on from there
        bench.mkdir(parents=True, exist_ok=True)
        (bench / "report.json").write_text(Path(args.bench_report).read_text())
    else:
        run_bench(args, bench, shape)
    report = json.loads((bench / "report.json").read_text())
    light, heavy, slo = rates_and_slo(report, args)
    rows = []
    rates = {"light": light, "heavy": heavy}
    for name in args.rates.split(","):
        rate = rates[name]
        plan_dir = out / f"plan-{name}"
        omni(
            "plan",
            "--from",
            str(bench / "report.json"),
            "--rate",
            f"{rate:g}",
            "--slo-seconds",
            f"{slo:g}",
            "--attainment",
            str(args.attainment),
            "--out",
            str(plan_dir),
        )
        plan = json.loads((plan_dir / "plan.json").read_text())
        verify = out / f"verify-{name}"
        requests = ["--requests", str(args.verify_requests)] if args.verify_requests else []
        omni(
            "bench",
            "--verify-plan",
            str(plan_dir / "plan.json"),
            "--layouts",
            args.layouts,
            *requests,
            "--out",
            str(verify),
            *engine_args(args),
        )
        checked = json.loads((verify / "report.json").read_text())["verify"]["checks"]
        for check in checked:
            rows.append((name, plan["choice"]["label"], check))
    print(f"\nSLO {slo:g} s, attainment asked {args.attainment:.0%}; {time.time() - started:.0f} s in all\n")
    print(
        "| rate | layout | recommended | requests | within SLO: predicted | measured | gap (points) "
        "| p90: predicted | measured | ratio | servers vs bench | at the run's speed: within SLO, p90 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, recommended, c in rows:
        measured_p90 = c["measured_p90_s"]
        ratio = f"{c['predicted_p90_s'] / measured_p90:.2f}" if measured_p90 else "–"
        gap = (c["predicted_attainment"] - c["measured_attainment"]) * 100
        parts = c.get("service_ratio_thirds") or []
        thirds = f" ({min(parts):.2f} to {max(parts):.2f})" if parts else ""
        servers = f"{c['service_ratio']:.2f}{thirds}" if c.get("service_ratio") else "–"
        rescaled = (
            f"{c['at_run_speed_attainment']:.1%}, {c['at_run_speed_p90_s']:.2f} s"
            if c.get("at_run_speed_p90_s") is not None
            else "–"
        )
        print(
            f"| {name}: {c['rate_per_min']:g}/min | {c['label']} | {'yes' if c['label'] == recommended else ''} "
            f"| {c['requests']} | {c['predicted_attainment']:.1%} | {c['measured_attainment']:.1%} | {gap:+.1f} "
            f"| {c['predicted_p90_s']:.2f} s | {measured_p90:.2f} s | {ratio} | {servers} | {rescaled} |"
        )
    print(
        "\npredicted: for each run's own arrival instants; servers vs bench: the run's time at the server per request "
        "over the model's, in brackets the lowest and highest of its thirds (off 1 by more than 0.1: the machine was "
        "not as fast as during the bench); at the run's "
        "speed: the prediction again with the model's service times scaled by that ratio"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="embedded")
    parser.add_argument("--device", default="auto", help="the embedded engine's device: auto, cpu or cuda")
    parser.add_argument("--model", default=None, help="default: the engine's (assets/omni-small-t2v)")
    parser.add_argument("--wan-model", action="store_true", help="save and use Wan2.1-1.3B's shape, random weights")
    parser.add_argument("--engine-threads", type=int, default=None)
    parser.add_argument("--tier", default="256p")
    parser.add_argument("--frames", type=int, default=9)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layouts", default="1x1,2x1")
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--requests", type=int, default=12, help="requests per closed-loop cell")
    parser.add_argument("--verify-requests", type=int, default=None, help="default: the plan's")
    parser.add_argument("--light", type=float, default=0.3, help="the light rate, of the first layout's most")
    parser.add_argument("--heavy", type=float, default=0.75, help="the heavy rate, of the first layout's most")
    parser.add_argument("--rates", default="light,heavy", help="which of the two rates to plan and run")
    parser.add_argument("--bench-report", default=None, help="an earlier run's bench/report.json: no bench again")
    parser.add_argument("--slo-seconds", type=float, default=None)
    parser.add_argument("--slo-factor", type=float, default=2.5, help="SLO = this x the first layout's p90 alone")
    parser.add_argument("--attainment", type=float, default=0.95)
    parser.add_argument("--out", default="outputs/plan-check")
    parser.add_argument("extra", nargs="*", help="after --: more flags for every command that starts servers")
    main(parser.parse_args())
