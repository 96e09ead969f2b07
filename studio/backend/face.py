"""The back end as the page sees it: the controller, and the view types, limits, checks and actions it shows.

The page (`studio/ui/`) and the gateway (`studio/gateway/`) import the back end through this module alone
(tests/unit/test_layers.py): how the back end is laid out (servers/, clients/, runs/, bench/) stays its own business,
and what the page and the gateway may rely on is listed here, once. The commands (`studio/cli/`) run the back end's
parts themselves, lazily, as their start-up allows.
"""

from __future__ import annotations

from studio.backend.access import AccessError, AccessPolicy, on_space
from studio.backend.bench.config import BenchConfig, BenchConfigError, parse_bench_config
from studio.backend.bench.fleets import plan_bench
from studio.backend.bench.plan import CapacityPlan, devices_text, make_plan, plan_lines, read_report
from studio.backend.bench.plan_inputs import DEFAULT_ATTAINMENT, PlanInputs
from studio.backend.bench.plan_model import PlanError
from studio.backend.bench.plan_plot import write_plan
from studio.backend.bench.runner import PARETO_PLOT, bench_fleets, bench_pool, cell_grid
from studio.backend.bench.variants import BASE as BASELINE_VARIANT
from studio.backend.bench.variants import VariantError, server_flags
from studio.backend.controller import RunTooLarge, StudioController
from studio.backend.doctor import collect_report
from studio.backend.engine_kinds import MANAGED_ENGINES, engine_kind
from studio.backend.guest_arrivals import GuestArrivals
from studio.backend.runs.board import NotYours, RequestBoard
from studio.backend.runs.fair_share import SLOTS_PER_SERVER, Standing, VisitorLimitExceeded
from studio.backend.runs.problems import describe, field_bounds, frames_note, problems
from studio.backend.runs.public_text import for_visitors
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.spec import (
    MAX_CONCURRENCY,
    MAX_SEED,
    MAX_UPLOAD_BYTES,
    RunSpec,
    SeedPolicy,
    check_image_file,
    count_range,
    image_inputs,
)
from studio.backend.runs.stats import (
    InFlightClock,
    LatencyParts,
    LatencySummary,
    latency_parts,
    latency_parts_from_record,
    summarize,
    throughput_so_far,
)
from studio.backend.runs.store import RUN_STATES, RunFilter
from studio.backend.servers.launchers import LEVER_FLAGS, levers_missing
from studio.backend.servers.layouts import LayoutError
from studio.backend.servers.metrics import scrape
from studio.backend.servers.ray_cluster import RayUnavailable
from studio.backend.servers.replica import Replica
from studio.backend.servers.supervisor import ServerState, port_is_free
from studio.backend.servers.warmup import warmup_note, warmup_state
from studio.backend.visitors import LOCAL_OPERATOR, Visitor

__all__ = [
    "BASELINE_VARIANT",
    "DEFAULT_ATTAINMENT",
    "LEVER_FLAGS",
    "LOCAL_OPERATOR",
    "MANAGED_ENGINES",
    "MAX_CONCURRENCY",
    "MAX_SEED",
    "MAX_UPLOAD_BYTES",
    "PARETO_PLOT",
    "RUN_STATES",
    "SLOTS_PER_SERVER",
    "AccessError",
    "AccessPolicy",
    "BenchConfig",
    "BenchConfigError",
    "CapacityPlan",
    "GuestArrivals",
    "InFlightClock",
    "LatencyParts",
    "LatencySummary",
    "LayoutError",
    "NotYours",
    "PlanError",
    "PlanInputs",
    "RayUnavailable",
    "Replica",
    "RequestBoard",
    "RequestState",
    "RequestView",
    "Run",
    "RunFilter",
    "RunSpec",
    "RunTooLarge",
    "SeedPolicy",
    "ServerState",
    "Standing",
    "StudioController",
    "VariantError",
    "Visitor",
    "VisitorLimitExceeded",
    "bench_fleets",
    "bench_pool",
    "cell_grid",
    "check_image_file",
    "collect_report",
    "count_range",
    "describe",
    "devices_text",
    "engine_kind",
    "field_bounds",
    "for_visitors",
    "frames_note",
    "image_inputs",
    "latency_parts",
    "latency_parts_from_record",
    "levers_missing",
    "make_plan",
    "on_space",
    "parse_bench_config",
    "plan_bench",
    "plan_lines",
    "port_is_free",
    "problems",
    "read_report",
    "scrape",
    "server_flags",
    "summarize",
    "throughput_so_far",
    "warmup_note",
    "warmup_state",
    "write_plan",
]
