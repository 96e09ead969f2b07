"""SageAttention's Hopper kernels for `--attention-backend sage`, built by the engine at its first start on a Hopper
GPU where no usable `sageattention` package is importable, and kept in a cache for every start after.

The package index's `sageattention` (1.0.6) is SageAttention's Triton version, slower than cuDNN on Hopper
(benchmarks/RESULTS.md, attention kernels); the CUDA kernels that beat cuDNN (int8 q·k, fp8 p·v, wgmma) are built
from source for the machine's torch and CUDA. What the build does:

- the source: the folder that OMNI_STUDIO_SAGE_SOURCE names (a checkout of github.com/thu-ml/SageAttention), else
  that repository fetched at PINNED_COMMIT into the cache (git and network needed once);
- a copy of its `csrc/` with every kernel launch on torch's current stream (SageAttention launches on the default
  stream, which CUDA graphs captured on a side stream leave out) and the attention kernel instantiated for the
  engine's case alone (head_dim 128, not causal, no lse, bf16 out: minutes of nvcc instead of tens);
- the two extensions the Hopper path needs (`_qattn_sm90`, `_fused`) built for sm_90a with torch's extension
  builder and the machine's nvcc, each in its own process, at once;
- the `sageattention` package with them, under OMNI_STUDIO_SAGE_CACHE (default ~/.cache/omni-studio/sage-kernels),
  one folder per key (torch, CUDA, the source's commit, the arch), written last so that a half-built one is never
  taken; ranks of one request on one host share it under a file lock, so it is built once.

Where it cannot be built (not Hopper, no nvcc or one of another CUDA major than torch's, no source and no network),
the engine refuses to start with the reason (studio.engine.gpu.sage.sage_problem), as fp8 does.

    python -m studio.engine.gpu.sage_build        # builds (or finds) the kernels ahead of the first start
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPOSITORY = "https://github.com/thu-ml/SageAttention"
# The commit the engine's narrowed build and its current-stream launches were checked against.
PINNED_COMMIT = "d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5"
SOURCE_ENV = "OMNI_STUDIO_SAGE_SOURCE"
CACHE_ENV = "OMNI_STUDIO_SAGE_CACHE"
ARCH = "sm_90a"
FORMAT = 1  # the layout of a cache entry; a change of it is a change of key
MARKER = "build.json"  # written last: an entry without it is not complete
FETCH_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 1800
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
    "-gencode",
    "arch=compute_90a,code=sm_90a",  # wgmma needs sm_90a; the -arch shorthand also runs a plain sm_90 pass
]
# The attention extension instantiates its kernel for every head size, causal mode, lse return and output dtype (32
# variants per entry point, minutes of nvcc each); the engine calls one: head_dim 128, not causal, no lse, bf16.
NARROWED = {"head_dim": "64", "is_causal": "1", "return_lse": "1", "pytorch_dtype": "at::ScalarType::Half"}
INSTANTIATED = "head_dim 128, not causal, no lse, bf16 out"


# The workers run this module by its import name: `python -m` names it __main__, which a child cannot import.
MODULE_NAME = __spec__.name if __spec__ is not None else __name__


class SageBuildError(RuntimeError):
    """The Hopper kernels cannot be built or found here; the message says why in a user's words."""


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


@dataclass(frozen=True)
class BuildKey:
    """What a built package depends on; `folder` names its cache entry."""

    torch: str
    cuda: str
    commit: str
    arch: str = ARCH
    instantiated: str = INSTANTIATED
    format: int = FORMAT

    @property
    def folder(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]
        readable = f"torch{self.torch}-cuda{self.cuda}-{self.commit[:12]}-{self.arch}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", readable) + f"-{digest}"


def default_cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "omni-studio" / "sage-kernels"


def find_nvcc() -> str | None:
    """The CUDA compiler torch's extension builder would use: CUDA_HOME's (or CUDA_PATH's), else the PATH's."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(variable)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def nvcc_release(nvcc: str) -> str | None:
    """The CUDA release `nvcc --version` names ("13.0"), or None where it cannot be read."""
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


def build_problem(
    capability: tuple[int, int] | None, torch_cuda: str | None, nvcc: str | None, nvcc_cuda: str | None
) -> str | None:
    """None where the Hopper kernels can be built here; else why not. `capability` is the GPU's (None: no CUDA
    GPU), `torch_cuda` the CUDA torch was built with, `nvcc` the compiler found and `nvcc_cuda` its release."""
    if capability is None:
        return "SageAttention's kernels need a CUDA GPU"
    if capability != (9, 0):
        return (
            f"the engine builds SageAttention's kernels for Hopper (compute capability 9.0) only, and this GPU is "
            f"{capability[0]}.{capability[1]}: install a sageattention package built for it "
            f"(python setup.py install in a checkout of {REPOSITORY})"
        )
    if not torch_cuda:
        return "this torch was built without CUDA, so no CUDA extension can be built against it"
    if nvcc is None:
        return (
            f"building SageAttention's Hopper kernels needs CUDA's compiler (nvcc) of CUDA {torch_cuda.split('.')[0]}.x, "
            "and none was found in CUDA_HOME or on PATH: install the CUDA toolkit, or set CUDA_HOME"
        )
    if nvcc_cuda is None:
        return f"{nvcc} does not say which CUDA release it is (nvcc --version)"
    if nvcc_cuda.split(".")[0] != torch_cuda.split(".")[0]:
        return (
            f"{nvcc} is CUDA {nvcc_cuda} and torch was built with CUDA {torch_cuda}: an extension must be built with "
            "the CUDA major torch was built with (set CUDA_HOME to such a toolkit)"
        )
    return None


def is_source_tree(path: Path) -> bool:
    return all((path / name).is_file() for name in SOURCE_FILES)


def source_digest(path: Path) -> str:
    """A local source tree by its contents (what is built from it): the key of a build from it."""
    digest = hashlib.sha256()
    for file in sorted([*(path / "csrc").rglob("*"), *(path / "sageattention").rglob("*.py")]):
        if file.is_file():
            digest.update(str(file.relative_to(path)).encode())
            digest.update(file.read_bytes())
    return "source-" + digest.hexdigest()[:16]


def given_source() -> Path | None:
    """The source tree OMNI_STUDIO_SAGE_SOURCE names, checked; None where it names none."""
    configured = os.environ.get(SOURCE_ENV)
    if not configured:
        return None
    path = Path(configured).expanduser()
    if not is_source_tree(path):
        missing = [name for name in SOURCE_FILES if not (path / name).is_file()]
        raise SageBuildError(f"{SOURCE_ENV}={configured} is not a SageAttention source tree (it has no {missing[0]})")
    return path


def fetch_pinned_source(root: Path, commit: str = PINNED_COMMIT, repository: str = REPOSITORY) -> Path:
    """The repository at `commit` under `root` (fetched once: a complete checkout there is taken as it is)."""
    target = root / f"source-{commit[:12]}"
    if is_source_tree(target):
        return target
    git = shutil.which("git")
    if git is None:
        raise SageBuildError(
            f"no SageAttention source was given ({SOURCE_ENV}) and there is no git to fetch {repository}"
        )
    partial = root / f".fetching-{commit[:12]}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log.info("fetching %s at %s into %s", repository, commit[:12], target)
    steps = (["init", "-q"], ["fetch", "-q", "--depth", "1", repository, commit], ["checkout", "-q", "FETCH_HEAD"])
    try:
        for step in steps:
            done = subprocess.run(
                [git, "-C", str(partial), *step], capture_output=True, text=True, timeout=FETCH_TIMEOUT_S
            )
            if done.returncode != 0:
                raise SageBuildError(
                    f"no SageAttention source was given ({SOURCE_ENV}) and fetching {repository} at {commit[:12]} "
                    f"failed: {(done.stderr or done.stdout).strip()[-300:]}"
                )
    except subprocess.TimeoutExpired as exc:
        raise SageBuildError(f"fetching {repository} took over {FETCH_TIMEOUT_S} s: {exc}") from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if not is_source_tree(partial):
        shutil.rmtree(partial, ignore_errors=True)
        raise SageBuildError(f"{repository} at {commit[:12]} is not the SageAttention source the engine builds")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def build_key(commit: str) -> BuildKey:
    import torch

    return BuildKey(torch=torch.__version__, cuda=str(torch.version.cuda), commit=commit)


def cached_package(root: Path, key: BuildKey) -> Path | None:
    """The folder holding a complete `sageattention` package built for `key`, or None."""
    entry = root / key.folder
    try:
        recorded = json.loads((entry / MARKER).read_text())
    except (OSError, ValueError):
        return None
    package = entry / "sageattention"
    complete = all(any(package.glob(f"{name}*.so")) for name in MODULES) and (package / "__init__.py").is_file()
    return entry if complete and recorded.get("key") == asdict(key) else None


@contextlib.contextmanager
def locked(root: Path, key: BuildKey) -> Iterator[None]:
    """One builder of a key at a time on this host (the ranks of one request start together)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key.folder}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def patched_copy(source: Path, destination: Path) -> Path:
    """A copy of the source's `csrc/` with its launches on the current stream and the engine's case alone."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(source / "csrc", destination / "csrc")
    for cuda in (destination / "csrc").rglob("*.cu"):
        cuda.write_text(on_current_stream(cuda.read_text()))
    header = destination / "csrc" / "dispatch_utils.h"
    header.write_text(narrowed_dispatch(header.read_text()))
    return destination


def build_one(source: Path, name: str, build_dir: Path) -> Path:
    """Build one extension with torch's builder (in this process); the path of its shared object."""
    import torch
    from torch.utils.cpp_extension import load

    sources, ldflags = MODULES[name]
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    build_dir.mkdir(parents=True, exist_ok=True)
    load(
        name=name,
        sources=[str(source / s) for s in sources],
        extra_cflags=[*CXX_FLAGS, abi],
        extra_cuda_cflags=[*NVCC_FLAGS, abi],
        extra_ldflags=ldflags,
        extra_include_paths=[str(source / "csrc")],
        build_directory=str(build_dir),
        verbose=True,
    )
    return next(build_dir.glob(f"{name}*.so"))


def build_package(source: Path, root: Path, key: BuildKey) -> Path:
    """Build both extensions at once, each in its own process (their logs in the entry's build/), and put them with
    the source's `sageattention` package into the key's entry; the entry."""
    entry = root / key.folder
    shutil.rmtree(entry, ignore_errors=True)
    work = entry / "build"
    patched = patched_copy(source, work / "src")
    started = time.perf_counter()
    jobs = str(max(1, (os.cpu_count() or 2) // len(MODULES)))
    # The workers run this module by name: the folder that holds `studio`, whatever the engine's working directory.
    package_root, path = str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")
    workers = {}
    for name in MODULES:
        log_file = (work / f"{name}.log").open("w")
        workers[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                MODULE_NAME,
                "--build-one",
                name,
                "--source",
                str(patched),
                "--build-dir",
                str(work),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MAX_JOBS": jobs, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path]))},
        )
    failed = []
    for name, worker in workers.items():
        try:
            code = worker.wait(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            code = -1
        if code != 0:
            failed.append(name)
    if failed:
        tail = (work / f"{failed[0]}.log").read_text(errors="replace")[-1500:]
        raise SageBuildError(f"building {failed[0]} failed (log: {work / failed[0]}.log):\n{tail}")
    shutil.copytree(source / "sageattention", entry / "sageattention")
    for name in MODULES:
        shutil.copy(next((work / name).glob(f"{name}*.so")), entry / "sageattention" / f"{name}.so")
    seconds = round(time.perf_counter() - started, 1)
    (entry / MARKER).write_text(json.dumps({"key": asdict(key), "source": str(source), "build_s": seconds}))
    log.info("SageAttention's Hopper kernels built in %.0f s", seconds)
    return entry


def hopper_package(root: Path | None = None) -> Path:
    """The folder holding the `sageattention` package with the Hopper kernels built for this torch and CUDA: from the
    cache, else built now (a few minutes, at the first start only). Raises SageBuildError with the reason where it
    cannot be."""
    import torch

    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    nvcc = find_nvcc()
    problem = build_problem(capability, torch.version.cuda, nvcc, nvcc_release(nvcc) if nvcc else None)
    root = root or default_cache_root()
    source = given_source()
    key = build_key(source_digest(source) if source is not None else PINNED_COMMIT)
    if (found := cached_package(root, key)) is not None:
        return found
    if problem is not None:  # a cached build needs no compiler; a new one does
        raise SageBuildError(problem)
    with locked(root, key):
        if (found := cached_package(root, key)) is not None:  # another rank built it meanwhile
            return found
        log.warning(
            "building SageAttention's Hopper kernels (int8 q·k, fp8 p·v) for torch %s, CUDA %s: first start only, a "
            "few minutes; cached in %s",
            key.torch,
            key.cuda,
            root / key.folder,
        )
        return build_package(source or fetch_pinned_source(root), root, key)


def activate(entry: Path) -> None:
    """Make `import sageattention` take the package in `entry`, also where another one was imported before."""
    for name in [m for m in sys.modules if m == "sageattention" or m.startswith("sageattention.")]:
        del sys.modules[name]
    if str(entry) in sys.path:
        sys.path.remove(str(entry))
    sys.path.insert(0, str(entry))
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--build-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build_one:  # one extension, in a worker process of build_package
        build_one(args.source, args.build_one, args.build_dir / args.build_one)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        entry = hopper_package()
    except SageBuildError as exc:
        print(f"SageAttention's Hopper kernels cannot be built here: {exc}", file=sys.stderr)
        return 1
    print(f"SageAttention's Hopper kernels: {entry} (the engine takes them with --attention-backend sage)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
