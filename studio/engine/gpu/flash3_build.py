"""FlashAttention 3's Hopper forward kernel for `--attention-backend flash3`, built by the engine at its first start on
a Hopper GPU and kept in a cache for every start after (studio.engine.gpu.kernel_build does the building; this is
what FlashAttention 3's build needs).

FlashAttention 3 (github.com/Dao-AILab/flash-attention, its `hopper/` folder) is exact attention written for Hopper's
wgmma and bulk copies, faster than cuDNN's at the engine's shapes (benchmarks/RESULTS.md, attention kernels). It is
not on the package index, and its full build instantiates every head size, dtype and feature (an hour of nvcc); the
engine builds the two kernels it calls: the forward at head_dim 128, not causal, in bf16 (`--attention-backend flash3`)
and in fp8 (`flash3-fp8`), with no split, paging, softcap, local window, GQA packing or varlen (about a minute). What
it builds:

- the source: the folder that OMNI_STUDIO_FLASH3_SOURCE names (a checkout of flash-attention with its `csrc/cutlass`
  submodule), else flash-attention and CUTLASS fetched at the pinned commits into the cache;
- the extension `flash_attn_3._C` (its forward, and the scheduler's metadata it reads), with the interface module
  `flash_attn_interface` and the build's flags in `flash_attn_config`, under OMNI_STUDIO_FLASH3_CACHE (default
  ~/.cache/omni-studio/flash3-kernels).

Where it cannot be built, the engine refuses to start with the reason (studio.engine.gpu.flash3.flash3_problem).

    python -m studio.engine.gpu.flash3_build        # builds (or finds) the kernel ahead of the first start
"""

from __future__ import annotations

import shutil
from pathlib import Path

from studio.engine.gpu import kernel_build
from studio.engine.gpu.kernel_build import HOPPER_NVCC_FLAGS, Extension, KernelRecipe, Pin

REPOSITORY = "https://github.com/Dao-AILab/flash-attention"
PINNED_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"
# flash-attention's csrc/cutlass submodule at that commit.
CUTLASS = Pin("https://github.com/NVIDIA/cutlass", "7127592069c2fe01b041e174ba4345ef9b279671", "csrc/cutlass")
SOURCE_ENV = "OMNI_STUDIO_FLASH3_SOURCE"
CACHE_ENV = "OMNI_STUDIO_FLASH3_CACHE"
INSTANTIATIONS = (
    "hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu",
    "hopper/instantiations/flash_fwd_hdim128_e4m3_sm90.cu",
)
SOURCE_FILES = (
    "hopper/flash_api_stable.cpp",
    "hopper/flash_prepare_scheduler.cu",
    "hopper/flash_attn_interface.py",
    *INSTANTIATIONS,
    "csrc/cutlass/include/cute/tensor.hpp",
)
# Everything FlashAttention 3 can leave out, left out: the engine calls the forward at head_dim 128 alone, in bf16 and
# in fp8.
DISABLED = (
    "BACKWARD",
    "SPLIT",
    "PAGEDKV",
    "APPENDKV",
    "LOCAL",
    "SOFTCAP",
    "PACKGQA",
    "FP16",
    "VARLEN",
    "CLUSTER",
    "HDIM64",
    "HDIM96",
    "HDIM192",
    "HDIM256",
    "SM8x",
)
FEATURE_FLAGS = (
    *(f"-DFLASHATTENTION_DISABLE_{name}" for name in DISABLED),
    "-DFLASH_ATTENTION_DISABLE_HDIMDIFF64",
    "-DFLASH_ATTENTION_DISABLE_HDIMDIFF192",
)
BUILT = ("HDIM128", "FP8")  # what the build flags leave in
INSTANTIATED = "forward, head_dim 128, bf16 and fp8, not causal; no split, paging, softcap, window, varlen or cluster"
CXX_FLAGS = (
    "-O3",
    "-std=c++17",
    "-DPy_LIMITED_API=0x03090000",
    # flash_api_stable.cpp speaks torch's stable ABI from this version on
    "-DTORCH_TARGET_VERSION=0x0209000000000000",
    *FEATURE_FLAGS,
)
NVCC_FLAGS = (
    "-O3",
    "-std=c++17",
    "--ftemplate-backtrace-limit=0",
    "--use_fast_math",
    "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",  # the wgmma shapes the kernel uses
    "-DCUTLASS_ENABLE_GDC_FOR_SM90",
    "-DCUTLASS_DEBUG_TRACE_LEVEL=0",
    "-DNDEBUG",
    "--threads=4",
    *HOPPER_NVCC_FLAGS,
    *FEATURE_FLAGS,
)
PACKAGES = ("flash_attn_3", "flash_attn_interface", "flash_attn_config")


def copy_sources(source: Path, copy: Path) -> None:
    """What the build reads: the `hopper/` folder without the other instantiations, and CUTLASS's headers."""
    built = {Path(instantiation).name for instantiation in INSTANTIATIONS}
    shutil.copytree(
        source / "hopper",
        copy / "hopper",
        ignore=lambda folder, names: [n for n in names if folder.endswith("instantiations") and n not in built],
    )
    shutil.copytree(source / "csrc" / "cutlass" / "include", copy / "cutlass" / "include")


def assemble(source: Path, work: Path, entry: Path) -> None:
    """`flash_attn_3._C`, the interface module, and its config saying what was built."""
    package = entry / "flash_attn_3"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""FlashAttention 3, as the engine built it (flash_attn_interface)."""\n')
    shutil.copy(next((work / "_C").glob("_C*.so")), package / "_C.so")
    shutil.copy(source / "hopper" / "flash_attn_interface.py", entry / "flash_attn_interface.py")
    built = {f"FLASHATTENTION_DISABLE_{name}": name in DISABLED for name in (*DISABLED, *BUILT)}
    (entry / "flash_attn_config.py").write_text(f"CONFIG = {{'build_flags': {built!r}}}\n")


RECIPE = KernelRecipe(
    name="flash3",
    title="FlashAttention 3's Hopper kernel",
    pins=(Pin(REPOSITORY, PINNED_COMMIT), CUTLASS),
    source_env=SOURCE_ENV,
    cache_env=CACHE_ENV,
    cache_folder="flash3-kernels",
    source_files=SOURCE_FILES,
    digest_folders=("hopper", "csrc/cutlass/include"),
    extensions=(
        Extension(
            "_C",
            ("hopper/flash_api_stable.cpp", *INSTANTIATIONS, "hopper/flash_prepare_scheduler.cu"),
        ),
    ),
    instantiated=INSTANTIATED,
    cxx_flags=CXX_FLAGS,
    nvcc_flags=NVCC_FLAGS,
    include_dirs=("hopper", "cutlass/include"),
    prepare=copy_sources,
    assemble=assemble,
    package_files=("flash_attn_3/_C.so", "flash_attn_interface.py", "flash_attn_config.py"),
    other_gpus="FlashAttention 3 is for Hopper GPUs; on others the engine's default attention (auto) serves",
)


def hopper_package(root: Path | None = None) -> Path:
    """The cache entry holding FlashAttention 3's forward built for this torch and CUDA: from the cache, else built now
    (about a minute, at the first start only). Raises KernelBuildError with the reason where it cannot be."""
    return kernel_build.hopper_package(RECIPE, root)


def activate(entry: Path) -> None:
    """Make `import flash_attn_interface` take the build in `entry`."""
    kernel_build.activate(entry, PACKAGES)


if __name__ == "__main__":
    raise SystemExit(kernel_build.main(RECIPE))
