"""CUDA graphs of the transformer's forward, one per input shape seen at warm-up.

At small sizes a denoising step is bound by the host: thirty compiled block calls, each with its guards and
kernel launches, take longer to issue than the GPU takes to run them. A captured graph issues the whole forward
as one launch. Shapes are static in the engine (batches are padded to a few sizes), so the graphs captured
after the warm-up cover every request of the warmed sizes; any other shape runs the forward as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ShapeKey = tuple[tuple[tuple[int, ...], torch.dtype], ...]

# A replay must match the forward it replaces: the same kernels on the same inputs, so the outputs are equal but
# for the order of a few reductions (largest difference, relative to the largest output value).
MAX_REPLAY_DIFFERENCE = 0.01


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    output: torch.Tensor


def _key(*tensors: torch.Tensor) -> ShapeKey:
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


class GraphedForward:
    """Calls `forward(hidden_states, timestep, context)` through a CUDA graph where one was captured for
    these input shapes; records the shapes it sees otherwise, for `capture_seen`."""

    def __init__(self, forward: Forward):
        self._forward = forward
        self._graphs: dict[ShapeKey, _Captured] = {}
        self._seen: dict[ShapeKey, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._pool = None
        self.enabled = True
        self.recording = False  # on during the warm-up: the shapes seen then are the ones worth a graph
        self.replays = 0

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def __call__(self, hidden_states: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        key = _key(hidden_states, timestep, context)
        captured = self._graphs.get(key) if self.enabled else None
        if captured is None:
            if self.enabled and self.recording and key not in self._seen:
                self._seen[key] = (hidden_states, timestep, context)  # kept to capture from, after the warm-up
            return self._forward(hidden_states, timestep, context)
        for static, value in zip(captured.inputs, (hidden_states, timestep, context), strict=True):
            static.copy_(value)
        captured.graph.replay()
        self.replays += 1
        # The output buffer is the graph's: the next replay overwrites it, so the caller gets its own copy.
        return captured.output.clone()

    def capture_seen(self) -> int:
        """Capture a graph for every input shape seen since the last capture; check each replay against the
        plain forward on the same inputs. Any failure turns graphs off (the forward then runs as it is).
        Returns how many graphs are held."""
        seen, self._seen = self._seen, {}
        self.recording = False
        if not self.enabled:
            return 0
        for key, example in seen.items():
            if key in self._graphs:
                continue
            try:
                with torch.inference_mode():  # as the denoising loop runs it: no autograd records
                    self._capture(key, example)
            except Exception as exc:  # a forward that cannot be captured still serves, without graphs
                log.warning(
                    "CUDA graph capture failed (%s: %s); the transformer runs without graphs", type(exc).__name__, exc
                )
                self.disable()
                return 0
        return self.captured

    def disable(self) -> None:
        self.enabled = False
        self._graphs.clear()
        self._seen.clear()
        self._pool = None

    def _capture(self, key: ShapeKey, example: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        inputs = tuple(t.clone() for t in example)
        # One forward on a side stream first, as capture requires (the warm-up already ran this shape, so its
        # kernels are chosen and compiled: what is left is the side stream's own first use).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            expected = self._forward(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # graphs never run at once: they share one memory pool
        graph = torch.cuda.CUDAGraph()
        # Captured on the side stream without `torch.cuda.graph`'s emptying of the allocator's cache first: that
        # hands the warm-up's memory back to the driver, and the first request then pays to allocate it again.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.capture_begin(pool=self._pool)
            try:
                output = self._forward(*inputs)
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        graph.replay()
        scale = expected.float().abs().max().clamp_min(1e-6)
        difference = ((output.float() - expected.float()).abs().max() / scale).item()
        if not difference <= MAX_REPLAY_DIFFERENCE:
            raise RuntimeError(f"the replayed graph differs from the forward by {difference:.2%} of its range")
        self._graphs[key] = _Captured(graph=graph, inputs=inputs, output=output)  # type: ignore[arg-type]
        log.info("captured a CUDA graph of the transformer for inputs %s", [shape for shape, _ in key])
