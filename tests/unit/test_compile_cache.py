"""The compile cache: its key, its entries on disk, what it does with a corrupt or foreign entry (a real
torch.compile reused by a second process: tests/integration/test_compile_cache_processes.py)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from studio.config import TINY_WAN_DIR
from studio.engine.gpu import compile_cache
from studio.engine.gpu.compile_cache import MANIFEST, CacheKey, CompileCache, cache_key

SIZES = [(320, 192, 33), (832, 480, 33)]
OPTIONS = {"compile": "blocks", "cfg_parallel_size": 1, "ulysses_degree": 2}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A model directory of a config and a weights file (the cache keys a model by its files)."""
    root = tmp_path / "model"
    (root / "transformer").mkdir(parents=True)
    (root / "model_index.json").write_text('{"_class_name": "WanPipeline"}')
    (root / "transformer" / "config.json").write_text('{"num_layers": 30}')
    (root / "transformer" / "weights.safetensors").write_bytes(b"\0" * 64)
    return root


@pytest.fixture
def torch_cache_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`activate` points torch's cache folders into the entry through the environment: restored after."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "outside-inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "outside-triton"))


def key_of(model: Path, **changes: object) -> str:
    values: dict = {"sizes": SIZES, "max_batch": 8, "options": OPTIONS, **changes}
    return cache_key(str(model), "cpu", values["sizes"], values["max_batch"], values["options"]).digest


def test_the_key_is_stable_and_follows_what_it_depends_on(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = key_of(model)
    assert key_of(model) == first  # the same engine on the same machine: the same folder
    changed = {
        "sizes": key_of(model, sizes=[(1280, 720, 33)]),
        "max_batch": key_of(model, max_batch=1),
        "options": key_of(model, options={**OPTIONS, "ulysses_degree": 1}),
    }
    (model / "transformer" / "config.json").write_text('{"num_layers": 40}')
    changed["model config"] = key_of(model)
    (model / "transformer" / "weights.safetensors").write_bytes(b"\0" * 65)
    changed["model weights"] = key_of(model)
    real_machine, real_libraries = compile_cache.machine_facts, compile_cache.library_versions
    monkeypatch.setattr(compile_cache, "machine_facts", lambda device: {**real_machine(device), "driver": "999.1"})
    changed["driver"] = key_of(model)
    monkeypatch.setattr(compile_cache, "library_versions", lambda: {**real_libraries(), "torch": "9.9.9"})
    changed["torch"] = key_of(model)
    digests = [first, *changed.values()]
    assert len(set(digests)) == len(digests), changed
    # A hub id is keyed by its name.
    assert cache_key("org/model", "cpu", SIZES, 8, OPTIONS).fields["model"] == {"id": "org/model"}


def test_a_saved_entry_is_warm_at_the_next_start(tmp_path: Path) -> None:
    key = CacheKey({"model": "a"})
    cold = CompileCache(tmp_path / "root", key)
    assert cold.open() is False and not cold.warm and cold.choices == {}
    cold.save({"attention_backend": "_native_cudnn", "vae_channels_last": True})
    restart = CompileCache(tmp_path / "root", key)
    assert restart.open() is True and restart.warm
    assert restart.choices == {"attention_backend": "_native_cudnn", "vae_channels_last": True}
    # Another key: another folder, cold.
    other = CompileCache(tmp_path / "root", CacheKey({"model": "b"}))
    assert other.open() is False and other.directory != restart.directory
    # Each rank keeps its own part of one key's entry.
    rank1 = restart.for_rank(1)
    assert rank1.directory == restart.entry / "rank1" and rank1.open() is False


@pytest.mark.parametrize(
    "damage",
    ["not json {", json.dumps({"format": 1, "key": "another", "choices": {}}), json.dumps([1, 2])],
    ids=["unreadable", "another key", "wrong shape"],
)
def test_a_corrupt_manifest_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    key = CacheKey({"model": "a"})
    CompileCache(tmp_path, key).save({"attention_backend": "default"})
    (CompileCache(tmp_path, key).directory / MANIFEST).write_text(damage)
    cache = CompileCache(tmp_path, key)
    with caplog.at_level(logging.WARNING, logger="studio.engine.gpu.compile_cache"):
        assert cache.open() is False
    assert "ignored" in caplog.text and cache.choices == {} and cache.usable
    assert not (cache.directory / MANIFEST).exists()  # cleared, and made afresh by this start
    cache.save({"attention_backend": "default"})
    assert CompileCache(tmp_path, key).open() is True


def test_a_foreign_entry_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An entry copied in under another key's name (its key file says so) is not used."""
    mine, theirs = CacheKey({"model": "mine"}), CacheKey({"model": "theirs"})
    CompileCache(tmp_path, theirs).save({"attention_backend": "_native_flash"})
    (tmp_path / theirs.digest).rename(tmp_path / mine.digest)
    cache = CompileCache(tmp_path, mine)
    with caplog.at_level(logging.WARNING, logger="studio.engine.gpu.compile_cache"):
        assert cache.open() is False
    assert "another key" in caplog.text and cache.choices == {}
    assert json.loads((cache.entry / "key.json").read_text()) == mine.fields  # the entry is now this key's


def test_an_unwritable_root_leaves_the_cache_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "a-file"
    root.write_text("not a folder")
    cache = CompileCache(root, CacheKey({"model": "a"}))
    with caplog.at_level(logging.WARNING, logger="studio.engine.gpu.compile_cache"):
        assert cache.open() is False
    assert not cache.usable and "off for this start" in caplog.text
    cache.activate()
    cache.save({"attention_backend": "default"})  # neither raises
    assert root.read_text() == "not a folder"


def test_the_engine_keeps_its_picks_and_reads_them_back(tmp_path: Path, torch_cache_env: None) -> None:
    """The generator saves its picks after the warm-up; the next start reads them; bad picks are dropped."""
    from studio.engine.generator import VideoGenerator, _cached_picks

    key = cache_key(str(TINY_WAN_DIR), "cpu", [(32, 32, 5)], 1, {"compile": "off"})
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1, compile_cache=CompileCache(tmp_path, key))
    generator.load()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(generator.compile_cache.directory / "inductor")
    generator.warmup([(32, 32, 5)], max_batch=1)
    restart = CompileCache(tmp_path, key)
    assert restart.open() is True and restart.choices == {"attention_backend": "default"}
    assert _cached_picks(restart) == ("default", None)
    restart.choices = {"attention_backend": "made-up", "vae_channels_last": "yes"}
    assert _cached_picks(restart) == (None, None)
