"""The compile cache across processes: a second engine process of the same key finds the first one's compiled graph,
and a damaged entry is ignored with a warning rather than loaded (on the CPU, where inductor compiles C++)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studio.config import PROJECT_ROOT
from studio.engine.gpu.compile_cache import ARTIFACTS, CacheKey, CompileCache

PROBE = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path

    import torch
    from torch._dynamo.utils import counters

    from studio.engine.gpu.compile_cache import CacheKey, CompileCache

    cache = CompileCache(Path(sys.argv[1]), CacheKey({"probe": 1}))
    warm = cache.open()
    cache.activate()
    fn = torch.compile(lambda x: torch.nn.functional.gelu(x * 2 + 1).sum(-1), dynamic=False)
    started = time.perf_counter()
    fn(torch.randn(4, 8))
    seconds = time.perf_counter() - started
    cache.save({"attention_backend": "default"})
    hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    print(json.dumps({"warm": warm, "hits": hits, "misses": misses, "seconds": seconds}))
    """
)


def test_a_second_process_reuses_the_first_ones_compile(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two processes of one key compile the same function: the second finds the first one's graph. Then the
    saved artifacts are damaged: the entry is ignored with a warning, not loaded."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    root = tmp_path / "root"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    env.pop("TRITON_CACHE_DIR", None)

    def probe() -> dict:
        done = subprocess.run(
            [sys.executable, str(script), str(root)], env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = probe()
    assert first["warm"] is False and first["misses"] >= 1 and first["hits"] == 0
    second = probe()
    assert second["warm"] is True and second["hits"] >= 1 and second["misses"] == 0
    cache = CompileCache(root, CacheKey({"probe": 1}))
    assert (cache.directory / ARTIFACTS).stat().st_size > 0 and (cache.directory / "inductor").is_dir()
    artifacts = cache.directory / ARTIFACTS
    artifacts.write_bytes(artifacts.read_bytes()[::-1])
    with caplog.at_level(logging.WARNING, logger="studio.engine.gpu.compile_cache"):
        assert cache.open() is False
    assert "checksum" in caplog.text and not (cache.directory / "inductor").exists()
