"""The mend of torch's kernel tuning cache lookup (studio.engine.gpu.compile_fixes): which launch a cached pick
gives, and where the mend is applied. The lookup itself runs only on a GPU with Triton
(benchmarks/gpu/engine_restart.py measures it there)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from studio.engine.gpu import compile_fixes
from studio.engine.gpu.compile_fixes import cached_pick


@dataclass
class Config:
    kwargs: dict = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 1
    found_by_coordesc: bool = False


@dataclass
class Result:
    config: Config


def hashable(config: Config) -> tuple:
    return (*sorted(config.kwargs.items()), config.num_warps)


def test_a_tuned_pick_among_the_compiled_configs_is_launched_and_not_tuned_again() -> None:
    results = [Result(Config({"XBLOCK": 64})), Result(Config({"XBLOCK": 128}))]
    narrowed, to_compile = cached_pick(results, [Config({"XBLOCK": 128}, found_by_coordesc=True)], hashable)
    assert narrowed == [results[1]] and to_compile is None
    assert results[1].config.found_by_coordesc  # what stops torch from timing it again


def test_a_single_config_kernel_gets_its_tuned_pick_even_when_the_tuning_moved_it() -> None:
    results = [Result(Config({"XBLOCK": 64}))]
    same, _ = cached_pick(results, [Config({"XBLOCK": 64}, found_by_coordesc=True)], hashable)
    assert same == results and results[0].config.found_by_coordesc
    moved = Config({"XBLOCK": 256}, num_warps=8, found_by_coordesc=True)
    narrowed, to_compile = cached_pick([Result(Config({"XBLOCK": 64}))], [moved], hashable)
    assert narrowed is None and to_compile is moved


@pytest.mark.parametrize(
    "cached",
    [[], [Config({"XBLOCK": 64})], [Config({"XBLOCK": 64}), Config({"XBLOCK": 128})]],
    ids=["miss", "untuned pick", "no single pick"],
)
def test_without_a_tuned_pick_torch_s_own_path_stands(cached: list[Config]) -> None:
    results = [Result(Config({"XBLOCK": 64}))]
    assert cached_pick(results, cached, hashable) == (None, None)
    assert not results[0].config.found_by_coordesc


def test_the_mend_is_applied_only_where_torch_has_the_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_fixes, "_applied", False)
    monkeypatch.setattr(compile_fixes.torch, "__version__", "2.12.0+cu130")
    assert compile_fixes.keep_cached_kernel_tuning() is False
    monkeypatch.setattr(compile_fixes.torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(compile_fixes.torch.cuda, "is_available", lambda: False)
    assert compile_fixes.keep_cached_kernel_tuning() is False  # no GPU: no Triton kernels to tune
    assert compile_fixes.torch_version() == (2, 11)


def test_on_an_affected_torch_the_lookup_runs_torch_s_own_first_then_the_cached_pick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch._inductor.runtime import triton_heuristics

    calls: list[str] = []
    monkeypatch.setattr(triton_heuristics.CachingAutotuner, "recheck_autotune_cache", lambda *_: calls.append("torch"))
    tuned = Config({"XBLOCK": 128}, found_by_coordesc=True)
    monkeypatch.setattr(triton_heuristics, "check_autotune_cache", lambda configs, *_: ([tuned], None, {}))
    monkeypatch.setattr(compile_fixes, "_applied", False)
    monkeypatch.setattr(compile_fixes.torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(compile_fixes.torch.cuda, "is_available", lambda: True)
    assert compile_fixes.keep_cached_kernel_tuning() is True

    class Autotuner:
        def __init__(self) -> None:
            self.inductor_meta = {"coordinate_descent_tuning": True}
            self.filename = "kernel.py"
            self.compile_results = [Result(Config({"XBLOCK": 64})), Result(Config({"XBLOCK": 128}))]

    kernel = Autotuner()
    triton_heuristics.CachingAutotuner.recheck_autotune_cache(kernel, lambda: None)
    assert calls == ["torch"]
    assert [r.config.kwargs for r in kernel.compile_results] == [{"XBLOCK": 128}]
    assert kernel.compile_results[0].config.found_by_coordesc
