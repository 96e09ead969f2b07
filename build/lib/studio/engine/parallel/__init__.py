"""One request on several ranks (processes, a GPU each): classifier-free guidance split across two ranks, and
DeepSpeed-Ulysses sequence parallelism (each rank holds a share of the tokens; self-attention exchanges heads
for tokens with all-to-all). Both combine: `cfg_parallel_size x ulysses_degree` ranks.

Rank 0 is the engine's own process (the leader): it serves the API, batches requests and decodes. It starts
the other ranks (followers) as processes of their own; each loads the same pipeline on its own GPU and runs
every batch the leader runs, in step, told by the leader over a pipe. Collectives run over torch.distributed
(NCCL on GPUs, gloo on a CPU).
"""

from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.settings import ParallelSettings

__all__ = ["ParallelSettings", "RankLayout"]
