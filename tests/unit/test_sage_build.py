"""The source changes benchmarks/gpu/sage_attention_gpu.py makes before it builds SageAttention's CUDA kernels: every
launch on torch's current stream (so that CUDA graphs capture them), and the attention kernel instantiated for the
engine's case alone."""

from __future__ import annotations

from benchmarks.gpu.sage_attention_gpu import narrowed_dispatch, on_current_stream

LAUNCHES = """#include <cuda.h>
void run() {
  QuantKernel<128, 64, true><<<grid, block>>>(x, y);
  kernel<<<grid, NUM_THREADS, sMemSize>>>(a);
  other<<<grid, block, 0, stream>>>(b);
}
"""


def test_every_launch_goes_to_the_current_stream_and_one_already_on_a_stream_is_kept():
    patched = on_current_stream(LAUNCHES)
    assert patched.startswith("#include <ATen/cuda/CUDAContext.h>\n")
    assert "QuantKernel<128, 64, true><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(x, y);" in patched
    assert "kernel<<<grid, NUM_THREADS, sMemSize, at::cuda::getCurrentCUDAStream()>>>(a);" in patched
    assert "other<<<grid, block, 0, stream>>>(b);" in patched
    assert on_current_stream("int main() { return 0; }\n") == "int main() { return 0; }\n"  # nothing to launch


def test_the_dispatch_keeps_only_the_engines_case():
    header = """#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...) \\
  if (head_dim == 64) {                                   \\
    constexpr int HEAD_DIM = 64;                          \\
    __VA_ARGS__                                           \\
  } else if (head_dim == 128) {                           \\
    constexpr int HEAD_DIM = 128;                         \\
    __VA_ARGS__                                           \\
  } else {                                                \\
    throw std::invalid_argument("head_dim");              \\
  }
"""
    narrowed = narrowed_dispatch(header)
    assert "HEAD_DIM = 64" not in narrowed and "HEAD_DIM = 128" in narrowed
    assert "if (head_dim == 128) {" in narrowed and "else if (head_dim == 128)" not in narrowed
    assert 'throw std::invalid_argument("head_dim");' in narrowed
