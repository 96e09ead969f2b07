"""`omni-studio ui`: the web studio."""

from __future__ import annotations

import argparse

from studio.cli import Subcommands
from studio.cli.studio_flags import add_engine_flags, add_studio_flags, studio_settings

# A node's GPUs (or a Ray cluster's, with --cluster ray) as replicas of the server, each as wide as the engine flags say;
# with --replicas-min/--replicas-max, as many as the queue asks for.
FLEET_FIELDS = (
    "replicas",
    "cluster",
    "ray_address",
    "replicas_min",
    "replicas_max",
    "scale_out_queue",
    "scale_out_after_s",
    "scale_in_idle_s",
)
PAGE_FIELDS = ("host", "port", "share", "outputs_dir")
# Who is who on the page: accounts, operators, and whether visitors may come in without signing in.
ACCESS_FIELDS = ("auth", "auth_file", "operators", "allow_anonymous", "insecure")
# How the studio shares its servers among the people using the page.
SHARING_FIELDS = (
    "in_flight_slots",
    "visitor_max_in_flight",
    "visitor_max_queued",
    "visitor_max_videos_per_hour",
    "cancel_unsent_on_close",
    "server_wait_s",
    "max_run_requests",
)


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("ui", help="start the web studio", description="The web studio on its engine.")
    add_engine_flags(parser)
    add_studio_flags(parser.add_argument_group("fleet"), FLEET_FIELDS)
    add_studio_flags(parser.add_argument_group("page"), PAGE_FIELDS)
    add_studio_flags(parser.add_argument_group("visitors and operators"), ACCESS_FIELDS)
    add_studio_flags(parser.add_argument_group("sharing"), SHARING_FIELDS)


def run(args: argparse.Namespace) -> int:
    from studio.startup import collector_paused

    settings = studio_settings(args)
    with collector_paused():
        from studio.ui.launch import launch_ui

    return launch_ui(settings)
