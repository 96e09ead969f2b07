"""SageAttention's Hopper kernels for `--attention-backend sage`, built by the engine at its first start on a Hopper
GPU where no usable `sageattention` package is importable, and kept in a cache for every start after
(studio.engine.gpu.kernel_build does the building; this is what SageAttention's build needs).

The package index's `sageattention` (1.0.6) is SageAttention's Triton version, slower than cuDNN on Hopper
(benchmarks/RESULTS.md, attention kernels); the CUDA kernels that beat cuDNN (int8 q·k, fp8 p·v, wgmma) are built
from source for the machine's torch and CUDA:

- the source: the folder that OMNI_STUDIO_SAGE_SOURCE names (a checkout of github.com/thu-ml/SageAttention), else
  that repository fetched at PINNED_COMMIT into the cache;
- a copy of its `csrc/` with every kernel launch on torch's current stream (SageAttention launches on the default
  stream, which CUDA graphs captured on a side stream leave out) and the attention kernel instantiated for the
  engine's case alone (head_dim 128, not causal, no lse, bf16 out);
- the two extensions the Hopper path needs (`_qattn_sm90`, `_fused`), and the `sageattention` package with them,
  under OMNI_STUDIO_SAGE_CACHE (default ~/.cache/omni-studio/sage-kernels).

Where it cannot be built, the engine refuses to start with the reason (studio.engine.gpu.sage.sage_problem), as fp8
does.

    python -m studio.engine.gpu.sage_build        # builds (or finds) the kernels ahead of the first start
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from studio.engine.gpu import kernel_build
from studio.engine.gpu.kernel_build import HOPPER_NVCC_FLAGS, Extension, KernelBuildError, KernelRecipe, Pin

REPOSITORY = "https://github.com/thu-ml/SageAttention"
# The commit the engine's narrowed build and its current-stream launches were checked against.
PINNED_COMMIT = "d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5"
SOURCE_ENV = "OMNI_STUDIO_SAGE_SOURCE"
CACHE_ENV = "OMNI_STUDIO_SAGE_CACHE"
MARKER = kernel_build.MARKER
# Files a SageAttention source tree has that the Hopper build reads.
SOURCE_FILES = ("csrc/qattn/qk_int_sv_f8_cuda_sm90.cu", "csrc/fused/fused.cu", "sageattention/core.py")
MODULES = {
    "_qattn_sm90": (["csrc/qattn/pybind_sm90.cpp", "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu"], ["-lcuda"]),
    "_fused": (["csrc/fused/pybind.cpp", "csrc/fused/fused.cu"], []),
}
CXX_FLAGS = ["-O3", "-std=c++17", "-DENABLE_BF16", "-fopenmp"]
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--use_fast_math",
    "--threads=8",
    "-diag-suppress=174",
    *HOPPER_NVCC_FLAGS,
]
# The attention extension instantiates its kernel for every head size, causal mode, lse return and output dtype (32
# variants per entry point, minutes of nvcc each); the engine calls one: head_dim 128, not causal, no lse, bf16.
NARROWED = {"head_dim": "64", "is_causal": "1", "return_lse": "1", "pytorch_dtype": "at::ScalarType::Half"}
INSTANTIATED = "head_dim 128, not causal, no lse, bf16 out"

SageBuildError = KernelBuildError


def narrowed_dispatch(header: str, dropped: dict[str, str] = NARROWED) -> str:
    """dispatch_utils.h without the first-branch cases in `dropped` (variable -> value): each such macro's
    `if (var == value) {...} else if (...)` becomes `if (...)`."""
    out: list[str] = []
    skipping = False
    for line in header.splitlines(keepends=True):
        stripped = line.strip()
        opening = next((v for v, value in dropped.items() if stripped.startswith(f"if ({v} == {value})")), None)
        if opening is not None:
            skipping = True
            continue
        if skipping and stripped.startswith("} else if"):
            out.append(line.replace("} else if", "if", 1))
            skipping = False
            continue
        if not skipping:
            out.append(line)
    return "".join(out)


LAUNCH = re.compile(r"<<<([^<>]*?)>>>")


def on_current_stream(code: str) -> str:
    """CUDA source whose kernel launches go to torch's current stream. SageAttention launches its kernels on the
    default stream: run eagerly they are correct (that stream waits for the others), but a CUDA graph captured
    on a side stream leaves them out, and the engine's check of its graphs then finds a different result and
    serves without graphs. On the current stream they are captured like any other kernel."""

    def launch(match: re.Match) -> str:
        parts = [part.strip() for part in match.group(1).split(",")]
        if len(parts) >= 4:
            return match.group(0)
        parts += ["0"] * (3 - len(parts))
        return "<<<" + ", ".join([*parts, "at::cuda::getCurrentCUDAStream()"]) + ">>>"

    patched = LAUNCH.sub(launch, code)
    if patched != code and "ATen/cuda/CUDAContext.h" not in patched:
        patched = "#include <ATen/cuda/CUDAContext.h>\n" + patched
    return patched


def patched_copy(source: Path, destination: Path) -> None:
    """A copy of the source's `csrc/` with its launches on the current stream and the engine's case alone."""
    shutil.copytree(source / "csrc", destination / "csrc")
    for cuda in (destination / "csrc").rglob("*.cu"):
        cuda.write_text(on_current_stream(cuda.read_text()))
    header = destination / "csrc" / "dispatch_utils.h"
    header.write_text(narrowed_dispatch(header.read_text()))


def assemble(source: Path, work: Path, entry: Path) -> None:
    """The source's `sageattention` package with the built extensions in it."""
    shutil.copytree(source / "sageattention", entry / "sageattention")
    for name in MODULES:
        shutil.copy(next((work / name).glob(f"{name}*.so")), entry / "sageattention" / f"{name}.so")


RECIPE = KernelRecipe(
    name="sage",
    title="SageAttention's Hopper kernels",
    pins=(Pin(REPOSITORY, PINNED_COMMIT),),
    source_env=SOURCE_ENV,
    cache_env=CACHE_ENV,
    cache_folder="sage-kernels",
    source_files=SOURCE_FILES,
    digest_folders=("csrc", "sageattention"),
    extensions=tuple(Extension(name, tuple(sources), tuple(ldflags)) for name, (sources, ldflags) in MODULES.items()),
    instantiated=INSTANTIATED,
    cxx_flags=tuple(CXX_FLAGS),
    nvcc_flags=tuple(NVCC_FLAGS),
    include_dirs=("csrc",),
    prepare=patched_copy,
    assemble=assemble,
    package_files=("sageattention/__init__.py", *(f"sageattention/{name}*.so" for name in MODULES)),
    other_gpus=f"install a sageattention package built for it (python setup.py install in a checkout of {REPOSITORY})",
)


def hopper_package(root: Path | None = None) -> Path:
    """The cache entry holding the `sageattention` package with the Hopper kernels for this torch and CUDA: from the
    cache, else built now (about a minute, at the first start only). Raises SageBuildError with the reason where it
    cannot be."""
    return kernel_build.hopper_package(RECIPE, root)


def activate(entry: Path) -> None:
    """Make `import sageattention` take the package in `entry`, also where another one was imported before."""
    kernel_build.activate(entry, ("sageattention",))


if __name__ == "__main__":
    raise SystemExit(kernel_build.main(RECIPE))
