"""CUDA kernels that are not on the package index, built by the engine at its first start on a Hopper GPU and kept
in a cache for every start after: SageAttention's 8-bit attention (studio.engine.gpu.sage_build) and FlashAttention
3's exact attention (studio.engine.gpu.flash3_build). Each is described by a `KernelRecipe`; this module does what
they share:

- the source: the folder the recipe's setting names (a checkout), else its repositories fetched at pinned commits
  into the cache (git and network needed once);
- a copy of what is built, changed as the recipe says (the engine's case alone: minutes of nvcc instead of tens);
- each extension built for sm_90a with torch's extension builder and the machine's nvcc, each in its own process,
  at once;
- the importable package the recipe assembles from them, under its cache folder, one folder per key (torch, CUDA,
  the source's commit, the arch, what is instantiated), marked complete last so that a half-built one is never
  taken; ranks of one request on one host share it under a file lock, so it is built once.

Where a recipe cannot be built (not Hopper, no nvcc or one of another CUDA major than torch's, no source and no
network), `hopper_package` raises KernelBuildError with the reason in a user's words: the engine refuses to start.
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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ARCH = "sm_90a"
HOPPER_NVCC_FLAGS = ("-gencode", "arch=compute_90a,code=sm_90a")  # wgmma needs sm_90a; -arch also runs an sm_90 pass
MARKER = "build.json"  # written last: an entry without it is not complete
FETCH_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 1800
# The workers run this module by its import name: `python -m` names it __main__, which a child cannot import.
MODULE_NAME = __spec__.name if __spec__ is not None else __name__
# The recipes by name, as a worker process is told which to build: each module holds its RECIPE.
RECIPE_MODULES = {"sage": "studio.engine.gpu.sage_build", "flash3": "studio.engine.gpu.flash3_build"}


class KernelBuildError(RuntimeError):
    """The kernels cannot be built or found here; the message says why in a user's words."""


@dataclass(frozen=True)
class Pin:
    """A repository at the commit a recipe was checked against, fetched into `into` of the source tree."""

    repository: str
    commit: str
    into: str = ""


@dataclass(frozen=True)
class Extension:
    """One CUDA extension: its module name, its sources in the copy that is built, and its linker flags."""

    name: str
    sources: tuple[str, ...]
    ldflags: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelRecipe:
    """How one kind of kernels is built. `prepare(source, copy)` writes into `copy` what is built (changed for the
    engine's case); `assemble(source, work, entry)` puts the importable package into a cache entry from the built
    extensions under `work/<extension name>/`; `package_files` are what a complete entry holds."""

    name: str
    title: str  # "SageAttention's Hopper kernels"
    pins: tuple[Pin, ...]  # the first is the project's own repository: its commit keys the build
    source_env: str
    cache_env: str
    cache_folder: str
    source_files: tuple[str, ...]  # a source tree holds these
    digest_folders: tuple[str, ...]  # what keys a build from a given tree
    extensions: tuple[Extension, ...]
    instantiated: str
    cxx_flags: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    include_dirs: tuple[str, ...]  # in the copy
    prepare: Callable[[Path, Path], None]
    assemble: Callable[[Path, Path, Path], None]
    package_files: tuple[str, ...]
    other_gpus: str  # what a user of another GPU can do instead
    format: int = 1


@dataclass(frozen=True)
class BuildKey:
    """What a built package depends on; `folder` names its cache entry."""

    torch: str
    cuda: str
    commit: str
    arch: str = ARCH
    instantiated: str = ""
    format: int = 1

    @property
    def folder(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]
        readable = f"torch{self.torch}-cuda{self.cuda}-{self.commit[:12]}-{self.arch}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", readable) + f"-{digest}"


def recipe_named(name: str) -> KernelRecipe:
    return importlib.import_module(RECIPE_MODULES[name]).RECIPE


def default_cache_root(recipe: KernelRecipe) -> Path:
    configured = os.environ.get(recipe.cache_env)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "omni-studio" / recipe.cache_folder


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
    recipe: KernelRecipe,
    capability: tuple[int, int] | None,
    torch_cuda: str | None,
    nvcc: str | None,
    nvcc_cuda: str | None,
) -> str | None:
    """None where the recipe's kernels can be built here; else why not. `capability` is the GPU's (None: no CUDA
    GPU), `torch_cuda` the CUDA torch was built with, `nvcc` the compiler found and `nvcc_cuda` its release."""
    if capability is None:
        return f"building {recipe.title} needs a CUDA GPU"
    if capability != (9, 0):
        return (
            f"the engine builds {recipe.title} for Hopper (compute capability 9.0) only, and this GPU is "
            f"{capability[0]}.{capability[1]}: {recipe.other_gpus}"
        )
    if not torch_cuda:
        return "this torch was built without CUDA, so no CUDA extension can be built against it"
    if nvcc is None:
        return (
            f"building {recipe.title} needs CUDA's compiler (nvcc) of CUDA {torch_cuda.split('.')[0]}.x, and none was "
            "found in CUDA_HOME or on PATH: install the CUDA toolkit, or set CUDA_HOME"
        )
    if nvcc_cuda is None:
        return f"{nvcc} does not say which CUDA release it is (nvcc --version)"
    if nvcc_cuda.split(".")[0] != torch_cuda.split(".")[0]:
        return (
            f"{nvcc} is CUDA {nvcc_cuda} and torch was built with CUDA {torch_cuda}: an extension must be built with "
            "the CUDA major torch was built with (set CUDA_HOME to such a toolkit)"
        )
    return None


def is_source_tree(recipe: KernelRecipe, path: Path) -> bool:
    return all((path / name).is_file() for name in recipe.source_files)


def source_digest(path: Path, folders: tuple[str, ...]) -> str:
    """A local source tree by the contents of `folders` (what is built from it): the key of a build from it."""
    digest = hashlib.sha256()
    files = sorted(
        file
        for folder in folders
        for file in (path / folder).rglob("*")
        if file.is_file() and "__pycache__" not in file.parts
    )
    for file in files:
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return "source-" + digest.hexdigest()[:16]


def given_source(recipe: KernelRecipe) -> Path | None:
    """The source tree the recipe's setting names, checked; None where it names none."""
    configured = os.environ.get(recipe.source_env)
    if not configured:
        return None
    path = Path(configured).expanduser()
    if not is_source_tree(recipe, path):
        missing = next(name for name in recipe.source_files if not (path / name).is_file())
        raise KernelBuildError(
            f"{recipe.source_env}={configured} is not a source tree of {recipe.title} (it has no {missing})"
        )
    return path


def _fetch(git: str, folder: Path, pin: Pin, recipe: KernelRecipe) -> None:
    steps = (
        ["init", "-q"],
        ["fetch", "-q", "--depth", "1", pin.repository, pin.commit],
        ["checkout", "-q", "FETCH_HEAD"],
    )
    folder.mkdir(parents=True, exist_ok=True)
    for step in steps:
        try:
            done = subprocess.run(
                [git, "-C", str(folder), *step], capture_output=True, text=True, timeout=FETCH_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as exc:
            raise KernelBuildError(f"fetching {pin.repository} took over {FETCH_TIMEOUT_S} s: {exc}") from exc
        if done.returncode != 0:
            raise KernelBuildError(
                f"no source of {recipe.title} was given ({recipe.source_env}) and fetching {pin.repository} at "
                f"{pin.commit[:12]} failed: {(done.stderr or done.stdout).strip()[-300:]}"
            )


def fetch_pinned_source(recipe: KernelRecipe, root: Path, pins: tuple[Pin, ...] | None = None) -> Path:
    """The recipe's repositories at their pinned commits under `root` (fetched once: a complete checkout there is
    taken as it is)."""
    pins = pins or recipe.pins
    target = root / f"source-{pins[0].commit[:12]}"
    if is_source_tree(recipe, target):
        return target
    git = shutil.which("git")
    if git is None:
        raise KernelBuildError(
            f"no source of {recipe.title} was given ({recipe.source_env}) and there is no git to fetch {pins[0].repository}"
        )
    partial = root / f".fetching-{pins[0].commit[:12]}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    log.info("fetching %s into %s", ", ".join(f"{pin.repository} at {pin.commit[:12]}" for pin in pins), target)
    try:
        for pin in pins:
            _fetch(git, partial / pin.into if pin.into else partial, pin, recipe)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if not is_source_tree(recipe, partial):
        shutil.rmtree(partial, ignore_errors=True)
        raise KernelBuildError(f"{pins[0].repository} at {pins[0].commit[:12]} is not the source the engine builds")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def build_key(recipe: KernelRecipe, commit: str) -> BuildKey:
    import torch

    return BuildKey(
        torch=torch.__version__,
        cuda=str(torch.version.cuda),
        commit=commit,
        instantiated=recipe.instantiated,
        format=recipe.format,
    )


def cached_package(recipe: KernelRecipe, root: Path, key: BuildKey) -> Path | None:
    """The cache entry holding a complete package built for `key`, or None."""
    entry = root / key.folder
    try:
        recorded = json.loads((entry / MARKER).read_text())
    except (OSError, ValueError):
        return None
    complete = all(any(entry.glob(pattern)) for pattern in recipe.package_files)
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


def build_one(recipe: KernelRecipe, source: Path, name: str, build_dir: Path) -> Path:
    """Build one extension with torch's builder (in this process); the path of its shared object."""
    import torch
    from torch.utils.cpp_extension import load

    extension = next(e for e in recipe.extensions if e.name == name)
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    build_dir.mkdir(parents=True, exist_ok=True)
    load(
        name=extension.name,
        sources=[str(source / s) for s in extension.sources],
        extra_cflags=[*recipe.cxx_flags, abi],
        extra_cuda_cflags=[*recipe.nvcc_flags, abi],
        extra_ldflags=list(extension.ldflags),
        extra_include_paths=[str(source / folder) for folder in recipe.include_dirs],
        build_directory=str(build_dir),
        verbose=True,
    )
    return next(build_dir.glob(f"{name}*.so"))


def build_package(recipe: KernelRecipe, source: Path, root: Path, key: BuildKey) -> Path:
    """Build every extension at once, each in its own process (their logs in the entry's build/), and assemble the
    package into the key's entry; the entry."""
    entry = root / key.folder
    shutil.rmtree(entry, ignore_errors=True)
    work = entry / "build"
    copy = work / "src"
    shutil.rmtree(copy, ignore_errors=True)
    recipe.prepare(source, copy)
    started = time.perf_counter()
    jobs = str(max(1, (os.cpu_count() or 2) // len(recipe.extensions)))
    # The workers run this module by name: the folder that holds `studio`, whatever the engine's working directory.
    package_root, path = str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")
    env = {
        **os.environ,
        "MAX_JOBS": jobs,
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path])),
    }
    workers = {}
    for extension in recipe.extensions:
        command = [sys.executable, "-m", MODULE_NAME, "--recipe", recipe.name, "--build-one", extension.name]
        log_file = (work / f"{extension.name}.log").open("w")
        workers[extension.name] = subprocess.Popen(
            [*command, "--source", str(copy), "--build-dir", str(work)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
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
        raise KernelBuildError(f"building {failed[0]} failed (log: {work / failed[0]}.log):\n{tail}")
    recipe.assemble(source, work, entry)
    seconds = round(time.perf_counter() - started, 1)
    (entry / MARKER).write_text(json.dumps({"key": asdict(key), "source": str(source), "build_s": seconds}))
    log.info("%s built in %.0f s", recipe.title, seconds)
    return entry


def hopper_package(recipe: KernelRecipe, root: Path | None = None) -> Path:
    """The cache entry holding the recipe's package built for this torch and CUDA: from the cache, else built now (a
    minute or a few, at the first start only). Raises KernelBuildError with the reason where it cannot be."""
    import torch

    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    nvcc = find_nvcc()
    problem = build_problem(recipe, capability, torch.version.cuda, nvcc, nvcc_release(nvcc) if nvcc else None)
    root = root or default_cache_root(recipe)
    source = given_source(recipe)
    key = build_key(
        recipe, source_digest(source, recipe.digest_folders) if source is not None else recipe.pins[0].commit
    )
    if (found := cached_package(recipe, root, key)) is not None:
        return found
    if problem is not None:  # a cached build needs no compiler; a new one does
        raise KernelBuildError(problem)
    with locked(root, key):
        if (found := cached_package(recipe, root, key)) is not None:  # another rank built it meanwhile
            return found
        log.warning(
            "building %s for torch %s, CUDA %s: first start only, a minute or a few; cached in %s",
            recipe.title,
            key.torch,
            key.cuda,
            root / key.folder,
        )
        return build_package(recipe, source or fetch_pinned_source(recipe, root), root, key)


def activate(entry: Path, packages: tuple[str, ...]) -> None:
    """Make imports of `packages` take those in `entry`, also where others of those names were imported before."""
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]
    if str(entry) in sys.path:
        sys.path.remove(str(entry))
    sys.path.insert(0, str(entry))
    importlib.invalidate_caches()


def main(recipe: KernelRecipe | None = None, argv: list[str] | None = None) -> int:
    """Build (or find) a recipe's kernels ahead of the engine's first start; a build worker with --build-one."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=recipe.name if recipe else None, choices=sorted(RECIPE_MODULES))
    parser.add_argument("--build-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--build-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.recipe is None:
        parser.error(f"--recipe is one of {', '.join(sorted(RECIPE_MODULES))}")
    recipe = recipe_named(args.recipe)
    if args.build_one:  # one extension, in a worker process of build_package
        build_one(recipe, args.source, args.build_one, args.build_dir / args.build_one)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        entry = hopper_package(recipe)
    except KernelBuildError as exc:
        print(f"{recipe.title} cannot be built here: {exc}", file=sys.stderr)
        return 1
    print(f"{recipe.title}: {entry}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
