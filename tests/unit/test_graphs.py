"""The CUDA-graph wrapper of the transformer's forward, where no CUDA graph can be made: it must serve the plain
forward, record shapes only while warming, and turn itself off when capture fails."""

from __future__ import annotations

import torch

from studio.engine.gpu.graphs import GraphedForward


def forward(hidden: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    return hidden * 2 + timestep.view(-1, 1) + context.sum()


def inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.ones(batch, 3), torch.arange(batch, dtype=torch.float32), torch.full((batch, 2), 0.5)


def test_uncaptured_shapes_run_the_forward_and_are_recorded_only_while_warming() -> None:
    graphs = GraphedForward(forward)
    assert torch.equal(graphs(*inputs(2)), forward(*inputs(2)))
    assert graphs._seen == {}  # not warming: nothing kept
    graphs.recording = True
    graphs(*inputs(2))
    graphs(*inputs(2))
    graphs(*inputs(4))
    assert len(graphs._seen) == 2  # one example per shape


def test_a_failed_capture_turns_graphs_off_and_the_forward_still_serves() -> None:
    graphs = GraphedForward(forward)
    graphs.recording = True
    graphs(*inputs(2))
    assert graphs.capture_seen() == 0  # no CUDA device here: capture fails
    assert not graphs.enabled and graphs.captured == 0 and not graphs.recording
    assert torch.equal(graphs(*inputs(2)), forward(*inputs(2)))
    assert graphs.replays == 0
