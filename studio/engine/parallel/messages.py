"""What the leader and its followers tell each other over their pipes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Leader -> follower: run this batch ("batch", [GenerationParams]); the loop goes on after a step or stops
# ("step", bool); the rows decoded together ("decode", [[int]]); the generator's own calls ("max_batch",
# "record_shapes", "capture_graphs", "graphs_off", "eager", "forget_prompts", "save_cache", "vae_layout");
# "stop". Follower -> leader: "joining" (about to join the process
# groups), "ready" (loaded and set up), "captured" (CUDA graphs held), "error" (start-up failed, with why).
Kind = Literal[
    "batch",
    "step",
    "decode",
    "max_batch",
    "record_shapes",
    "capture_graphs",
    "graphs_off",
    "eager",
    "forget_prompts",
    "save_cache",
    "vae_layout",
    "stop",
    "joining",
    "ready",
    "captured",
    "error",
]


@dataclass(frozen=True)
class Message:
    kind: Kind
    payload: Any = None
