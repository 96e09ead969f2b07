"""The engine's build of SageAttention's Hopper kernels (studio.engine.gpu.sage_build): the source changes it makes
(every launch on torch's current stream, the attention kernel for the engine's case alone), its cache key and cache,
where its source comes from, and every reason it refuses with. The build itself needs nvcc and a Hopper GPU: here it
is stood in for where a test needs one."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
import types
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from studio.engine.gpu import kernel_build, sage_build
from studio.engine.gpu.kernel_build import BuildKey, Pin
from studio.engine.gpu.sage_build import RECIPE, SageBuildError, narrowed_dispatch, on_current_stream

LAUNCHES = """#include <cuda.h>
void run() {
  QuantKernel<128, 64, true><<<grid, block>>>(x, y);
  kernel<<<grid, NUM_THREADS, sMemSize>>>(a);
  other<<<grid, block, 0, stream>>>(b);
}
"""
KEY = BuildKey(torch="2.11.0+cu130", cuda="13.0", commit=sage_build.PINNED_COMMIT, instantiated=sage_build.INSTANTIATED)


def build_problem(*facts):
    return kernel_build.build_problem(RECIPE, *facts)


def cached_package(root, key):
    return kernel_build.cached_package(RECIPE, root, key)


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


def test_the_pinned_sources_dispatch_narrows_to_head_dim_128_not_causal_bf16(tmp_path):
    """Against the dispatch header of the pinned commit, where a checkout of it is at hand (benchmarks carry one)."""
    header = Path(__file__).resolve().parents[2] / ".sage-src" / "csrc" / "dispatch_utils.h"
    if not header.is_file():
        pytest.skip("no SageAttention checkout in .sage-src")
    narrowed = narrowed_dispatch(header.read_text())
    assert "head_dim == 64" not in narrowed and "is_causal == 1" not in narrowed
    assert "head_dim == 128" in narrowed and "is_causal == 0" in narrowed


@pytest.mark.parametrize(
    ("facts", "said"),
    [
        ((None, "13.0", "/usr/bin/nvcc", "13.0"), "building SageAttention's Hopper kernels needs a CUDA GPU"),
        (((8, 9), "13.0", "/usr/bin/nvcc", "13.0"), "Hopper (compute capability 9.0) only, and this GPU is 8.9"),
        (((10, 0), "13.0", "/usr/bin/nvcc", "13.0"), "this GPU is 10.0"),
        (((9, 0), None, "/usr/bin/nvcc", "13.0"), "torch was built without CUDA"),
        (((9, 0), "13.0", None, None), "needs CUDA's compiler (nvcc) of CUDA 13.x"),
        (((9, 0), "13.0", "/opt/nvcc", None), "does not say which CUDA release"),
        (((9, 0), "13.0", "/opt/cuda12/bin/nvcc", "12.8"), "is CUDA 12.8 and torch was built with CUDA 13.0"),
    ],
)
def test_each_reason_the_kernels_cannot_be_built_is_said(facts, said):
    assert said in build_problem(*facts)


def test_a_hopper_gpu_with_nvcc_of_torchs_cuda_major_can_build():
    assert build_problem((9, 0), "13.0", "/usr/local/cuda/bin/nvcc", "13.2") is None


def test_the_cache_key_changes_with_torch_cuda_commit_and_arch_and_names_them():
    folders = {
        replace(KEY, **change).folder
        for change in ({}, {"torch": "2.12.0"}, {"cuda": "12.8"}, {"commit": "0" * 40}, {"arch": "sm_100a"})
    }
    assert len(folders) == 5
    assert KEY.folder.startswith(f"torch2.11.0_cu130-cuda13.0-{sage_build.PINNED_COMMIT[:12]}-sm_90a-")


def complete_entry(root: Path, key: BuildKey) -> Path:
    entry = root / key.folder
    package = entry / "sageattention"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("BUILT = True\n")
    for name in sage_build.MODULES:
        (package / f"{name}.so").write_bytes(b"\x7fELF")
    (entry / sage_build.MARKER).write_text(json.dumps({"key": asdict(key)}))
    return entry


def test_only_a_complete_entry_of_the_same_key_is_taken_from_the_cache(tmp_path):
    assert cached_package(tmp_path, KEY) is None
    entry = complete_entry(tmp_path, KEY)
    assert cached_package(tmp_path, KEY) == entry
    (entry / "sageattention" / "_fused.so").unlink()  # a build that stopped half-way
    assert cached_package(tmp_path, KEY) is None
    (entry / "sageattention" / "_fused.so").write_bytes(b"\x7fELF")
    other = replace(KEY, torch="2.12.0")
    (entry / sage_build.MARKER).write_text(json.dumps({"key": asdict(other)}))  # another key's build in this folder
    assert cached_package(tmp_path, KEY) is None


def stand_in_machine(monkeypatch, capability, nvcc=None, nvcc_cuda=None, torch_cuda="13.0"):
    """torch and the machine as hopper_package reads them, for a machine this test does not run on."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: capability is not None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: capability)
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(kernel_build, "find_nvcc", lambda: nvcc)
    monkeypatch.setattr(kernel_build, "nvcc_release", lambda _: nvcc_cuda)


def test_a_second_start_loads_the_cached_build_without_a_compiler_or_building(tmp_path, monkeypatch):
    stand_in_machine(monkeypatch, (9, 0), nvcc=None)
    monkeypatch.delenv(sage_build.SOURCE_ENV, raising=False)
    monkeypatch.setattr(kernel_build, "build_package", lambda *_: pytest.fail("built again"))
    entry = complete_entry(tmp_path, KEY)
    assert sage_build.hopper_package(tmp_path) == entry


def test_without_a_cached_build_a_machine_that_cannot_build_is_refused_with_the_reason(tmp_path, monkeypatch):
    stand_in_machine(monkeypatch, (9, 0), nvcc=None)
    monkeypatch.delenv(sage_build.SOURCE_ENV, raising=False)
    with pytest.raises(SageBuildError, match="nvcc"):
        sage_build.hopper_package(tmp_path)
    stand_in_machine(monkeypatch, (8, 0), nvcc="/usr/bin/nvcc", nvcc_cuda="13.0")
    with pytest.raises(SageBuildError, match=r"this GPU is 8\.0"):
        sage_build.hopper_package(tmp_path)


def fake_source(path: Path) -> Path:
    for name in sage_build.SOURCE_FILES:
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"// {name}\n")
    return path


def test_a_given_source_is_checked_and_keys_the_build_by_its_contents(tmp_path, monkeypatch):
    monkeypatch.setenv(sage_build.SOURCE_ENV, str(tmp_path / "nothing"))
    with pytest.raises(SageBuildError, match="is not a source tree of SageAttention's Hopper kernels"):
        kernel_build.given_source(RECIPE)
    source = fake_source(tmp_path / "src")
    monkeypatch.setenv(sage_build.SOURCE_ENV, str(source))
    assert kernel_build.given_source(RECIPE) == source
    before = kernel_build.source_digest(source, RECIPE.digest_folders)
    (source / "sageattention" / "__pycache__").mkdir()
    (source / "sageattention" / "__pycache__" / "core.pyc").write_bytes(b"an import of it")
    assert kernel_build.source_digest(source, RECIPE.digest_folders) == before  # what Python caches is no change
    (source / "csrc" / "fused" / "fused.cu").write_text("// changed\n")
    assert kernel_build.source_digest(source, RECIPE.digest_folders) != before and before.startswith("source-")


def test_a_first_start_builds_from_the_given_source_once_and_says_where(tmp_path, monkeypatch, caplog):
    stand_in_machine(monkeypatch, (9, 0), nvcc="/usr/bin/nvcc", nvcc_cuda="13.0")
    source = fake_source(tmp_path / "src")
    monkeypatch.setenv(sage_build.SOURCE_ENV, str(source))
    built = []

    def build(recipe, src, root, key):
        built.append(src)
        return complete_entry(root, key)

    monkeypatch.setattr(kernel_build, "build_package", build)
    root = tmp_path / "cache"
    with caplog.at_level("WARNING", logger=kernel_build.__name__):
        first = sage_build.hopper_package(root)
    assert built == [source] and "first start only" in caplog.text and str(root) in caplog.text
    assert sage_build.hopper_package(root) == first and len(built) == 1


def test_the_build_workers_run_the_builder_by_its_import_name_also_when_it_runs_as_a_script(tmp_path, monkeypatch):
    # `python -m studio.engine.gpu.sage_build` runs the module as __main__, which a worker process cannot import.
    with warnings.catch_warnings():  # runpy's note that the module was imported already: here it is on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        as_script = runpy.run_module("studio.engine.gpu.kernel_build", run_name="__mp_main__", alter_sys=True)
    assert as_script["MODULE_NAME"] == "studio.engine.gpu.kernel_build"
    commands = []

    class Worker:
        def __init__(self, command, **_):
            commands.append(command)

        def wait(self, timeout=None):
            return 1

    monkeypatch.setattr(kernel_build.subprocess, "Popen", Worker)
    source = fake_source(tmp_path / "src")
    (source / "csrc" / "dispatch_utils.h").write_text("// the dispatch macros\n")
    with pytest.raises(SageBuildError, match="building _qattn_sm90 failed"):
        kernel_build.build_package(RECIPE, source, tmp_path / "cache", KEY)
    assert sorted(command[command.index("--build-one") + 1] for command in commands) == sorted(sage_build.MODULES)
    assert all(command[1:5] == ["-m", "studio.engine.gpu.kernel_build", "--recipe", "sage"] for command in commands)


def test_no_source_and_no_git_is_refused_with_the_setting_to_give(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda _: None)
    with pytest.raises(SageBuildError, match=sage_build.SOURCE_ENV):
        kernel_build.fetch_pinned_source(RECIPE, tmp_path)


def test_no_source_and_no_network_is_refused_with_gits_reason(tmp_path):
    with pytest.raises(SageBuildError, match=r"fetching .* failed"):
        kernel_build.fetch_pinned_source(RECIPE, tmp_path, (Pin(str(tmp_path / "unreachable"), "0" * 40),))
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-fetched is left behind


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_pinned_commit_is_fetched_once_into_the_cache(tmp_path):
    """As from github.com/thu-ml/SageAttention, from a repository on disk: that commit, not the branch's head."""
    upstream = fake_source(tmp_path / "upstream")
    git(upstream, "init", "-q")
    git(upstream, "add", ".")
    git(upstream, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "pinned")
    pinned = git(upstream, "rev-parse", "HEAD")
    (upstream / "csrc" / "fused" / "fused.cu").write_text("// later\n")
    git(upstream, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "later")
    root = tmp_path / "cache"
    fetched = kernel_build.fetch_pinned_source(RECIPE, root, (Pin(f"file://{upstream}", pinned),))
    assert (fetched / "csrc" / "fused" / "fused.cu").read_text() == "// csrc/fused/fused.cu\n"
    assert git(fetched, "rev-parse", "HEAD") == pinned
    shutil.rmtree(upstream)  # a second start needs no network
    assert kernel_build.fetch_pinned_source(RECIPE, root, (Pin(f"file://{upstream}", pinned),)) == fetched


def test_the_built_package_is_imported_in_place_of_one_imported_before(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "sageattention", types.ModuleType("sageattention"))  # the index's, say
    monkeypatch.setitem(sys.modules, "sageattention.core", types.ModuleType("sageattention.core"))
    entry = complete_entry(tmp_path, KEY)
    sage_build.activate(entry)
    import sageattention

    assert sageattention.BUILT is True and sys.path[0] == str(entry)
    del sys.modules["sageattention"]


def test_on_hopper_without_a_usable_package_the_engine_says_why_it_could_neither_import_nor_build(monkeypatch):
    from studio.engine.gpu.sage import sage_problem

    stand_in_machine(monkeypatch, (9, 0), nvcc=None)
    monkeypatch.setitem(sys.modules, "sageattention", None)  # not importable
    monkeypatch.setattr(sage_build, "hopper_package", lambda: (_ for _ in ()).throw(SageBuildError("no nvcc here")))
    problem = sage_problem("cuda")
    assert (
        "cannot be imported" in problem and "cannot build SageAttention's Hopper kernels here: no nvcc here" in problem
    )


def test_on_other_gpus_the_engine_does_not_build_and_names_the_missing_kernels(monkeypatch):
    from studio.engine.gpu.sage import sage_problem

    stand_in_machine(monkeypatch, (8, 0), nvcc="/usr/bin/nvcc", nvcc_cuda="13.0")
    core = types.ModuleType("sageattention.core")
    core.SM80_ENABLED = False  # the index's Triton-only package
    package = types.ModuleType("sageattention")
    package.core = core
    monkeypatch.setitem(sys.modules, "sageattention", package)
    monkeypatch.setitem(sys.modules, "sageattention.core", core)
    monkeypatch.setattr(sage_build, "hopper_package", lambda: pytest.fail("built for a GPU that is not Hopper"))
    assert sage_problem("cuda") == (
        "the importable sageattention package has no kernels of compute capability 8.0 (SM80_ENABLED is false)"
    )
    stand_in_machine(monkeypatch, (7, 5))
    assert sage_problem("cuda") == "SageAttention has no kernel for compute capability 7.5"
