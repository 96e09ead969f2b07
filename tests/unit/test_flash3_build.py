"""FlashAttention 3 for `--attention-backend flash3`: what the engine's build of it takes from the source (the one
forward kernel, CUTLASS's headers), the package it assembles, where the source comes from (flash-attention and its
CUTLASS submodule, each at its pinned commit), the reasons it refuses with, and the kernel routed through the engine's
attention op. The build itself needs nvcc and a Hopper GPU; the routing test stands in a module for the kernel."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import types
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from studio.engine.gpu import flash3_build, kernel_build
from studio.engine.gpu.flash3_build import INSTANTIATIONS, RECIPE
from studio.engine.gpu.kernel_build import BuildKey, KernelBuildError, Pin


def fake_source(path: Path) -> Path:
    """A flash-attention checkout's files the build reads, with another instantiation beside the engine's."""
    for name in (*RECIPE.source_files, "hopper/instantiations/flash_fwd_hdim64_fp16_sm90.cu"):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"// {name}\n")
    return path


def test_the_build_takes_the_bf16_and_fp8_forward_kernels_and_cutlass_headers(tmp_path):
    source = fake_source(tmp_path / "src")
    copy = tmp_path / "copy"
    RECIPE.prepare(source, copy)
    assert sorted(p.name for p in (copy / "hopper" / "instantiations").iterdir()) == sorted(
        Path(name).name for name in INSTANTIATIONS
    )
    assert (copy / "cutlass" / "include" / "cute" / "tensor.hpp").is_file()
    (extension,) = RECIPE.extensions
    assert all((copy / name).is_file() for name in extension.sources)
    assert all((copy / folder).is_dir() for folder in RECIPE.include_dirs)
    flags = RECIPE.nvcc_flags + RECIPE.cxx_flags
    assert "-DFLASHATTENTION_DISABLE_BACKWARD" in RECIPE.nvcc_flags
    assert "-DFLASHATTENTION_DISABLE_HDIM128" not in flags and "-DFLASHATTENTION_DISABLE_FP8" not in flags


def test_the_assembled_package_imports_as_flash_attention_3s_interface_says(tmp_path, monkeypatch):
    source = fake_source(tmp_path / "src")
    (source / "hopper" / "flash_attn_interface.py").write_text(
        "import flash_attn_3._C\nfrom flash_attn_config import CONFIG\nBUILT = CONFIG['build_flags']\n"
    )
    work = tmp_path / "work"
    (work / "_C").mkdir(parents=True)
    (work / "_C" / "_C.so").write_bytes(b"\x7fELF")
    entry = tmp_path / "entry"
    flash3_build.assemble(source, work, entry)
    key = BuildKey("2.11.0+cu130", "13.0", flash3_build.PINNED_COMMIT, instantiated=flash3_build.INSTANTIATED)
    (entry / kernel_build.MARKER).write_text(json.dumps({"key": asdict(key)}))
    assert kernel_build.cached_package(RECIPE, tmp_path, key) is None  # another folder than the key's
    shutil.move(entry, tmp_path / key.folder)
    assert kernel_build.cached_package(RECIPE, tmp_path, key) == tmp_path / key.folder
    # the package as the interface imports it (its extension stood in: a file that is not one cannot load)
    monkeypatch.setattr(sys, "path", list(sys.path))
    flash3_build.activate(tmp_path / key.folder)
    monkeypatch.setitem(sys.modules, "flash_attn_3._C", types.ModuleType("flash_attn_3._C"))
    interface = importlib.import_module("flash_attn_interface")
    assert interface.BUILT["FLASHATTENTION_DISABLE_HDIM128"] is False
    assert interface.BUILT["FLASHATTENTION_DISABLE_FP8"] is False
    assert interface.BUILT["FLASHATTENTION_DISABLE_BACKWARD"] is True
    for name in flash3_build.PACKAGES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("facts", "said"),
    [
        ((None, "13.0", "/usr/bin/nvcc", "13.0"), "building FlashAttention 3's Hopper kernel needs a CUDA GPU"),
        (((8, 0), "13.0", "/usr/bin/nvcc", "13.0"), "for Hopper (compute capability 9.0) only, and this GPU is 8.0"),
        (((9, 0), "13.0", None, None), "needs CUDA's compiler (nvcc) of CUDA 13.x"),
        (((9, 0), "13.0", "/opt/cuda12/bin/nvcc", "12.8"), "is CUDA 12.8 and torch was built with CUDA 13.0"),
    ],
)
def test_each_reason_the_kernel_cannot_be_built_is_said(facts, said):
    assert said in kernel_build.build_problem(RECIPE, *facts)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def committed(path: Path) -> str:
    git(path, "init", "-q")
    git(path, "add", ".")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "pinned")
    return git(path, "rev-parse", "HEAD")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_flash_attention_and_its_cutlass_are_fetched_at_their_pinned_commits(tmp_path):
    """As from GitHub, from repositories on disk: flash-attention without its submodule, CUTLASS into csrc/cutlass."""
    upstream = fake_source(tmp_path / "flash-attention")
    cutlass = tmp_path / "cutlass"
    shutil.move(upstream / "csrc" / "cutlass", cutlass)
    pins = (
        Pin(f"file://{upstream}", committed(upstream)),
        Pin(f"file://{cutlass}", committed(cutlass), "csrc/cutlass"),
    )
    fetched = kernel_build.fetch_pinned_source(RECIPE, tmp_path / "cache", pins)
    assert kernel_build.is_source_tree(RECIPE, fetched)
    assert git(fetched / "csrc" / "cutlass", "rev-parse", "HEAD") == pins[1].commit
    shutil.rmtree(cutlass)  # a second start needs no network
    assert kernel_build.fetch_pinned_source(RECIPE, tmp_path / "cache", pins) == fetched


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_cutlass_that_cannot_be_fetched_leaves_nothing_half_fetched(tmp_path):
    upstream = fake_source(tmp_path / "flash-attention")
    shutil.rmtree(upstream / "csrc")
    pins = (
        Pin(f"file://{upstream}", committed(upstream)),
        Pin(str(tmp_path / "unreachable"), "0" * 40, "csrc/cutlass"),
    )
    with pytest.raises(KernelBuildError, match=r"fetching .*unreachable at 000000000000 failed"):
        kernel_build.fetch_pinned_source(RECIPE, tmp_path / "cache", pins)
    assert list((tmp_path / "cache").iterdir()) == []


def test_off_a_gpu_flash3_is_refused_and_never_named_as_in_force():
    from studio.engine.gpu.flash3 import flash3_problem
    from studio.engine.gpu.gpu_setup import GpuSetup

    assert flash3_problem("cpu") == "FlashAttention 3 needs a CUDA GPU (this engine runs on cpu)"
    setup = GpuSetup("cpu", attention_backend="flash3")
    assert setup.own_attention == "flash3" and setup.attention_backend_setting == "auto"
    assert setup.attention_kernel == "default" and setup.levers == {}


def test_on_a_gpu_that_is_not_hopper_flash3_is_refused_without_a_build(monkeypatch):
    from studio.engine.gpu.flash3 import flash3_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (8, 0))
    monkeypatch.setattr(flash3_build, "hopper_package", lambda: pytest.fail("built for a GPU that is not Hopper"))
    assert flash3_problem("cuda") == (
        "FlashAttention 3's kernel is for Hopper GPUs (compute capability 9.0), and this GPU is 8.0"
    )


def test_on_hopper_without_the_kernel_the_engine_says_why_it_could_neither_import_nor_build(monkeypatch):
    from studio.engine.gpu.flash3 import flash3_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)  # not importable
    monkeypatch.setattr(flash3_build, "hopper_package", lambda: (_ for _ in ()).throw(KernelBuildError("no nvcc")))
    problem = flash3_problem("cuda")
    assert "cannot be imported" in problem and "cannot build FlashAttention 3's Hopper kernel here: no nvcc" in problem
