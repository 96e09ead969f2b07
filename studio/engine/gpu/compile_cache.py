"""What the engine's start-up compiles and measures, kept on disk so that the next start of the same engine on
the same machine reuses it instead of doing it again.

One folder per key under the cache root; the key is everything the kept work depends on: the model (its
files), the warmed shapes, the engine's settings that change what is compiled, the ranks, the GPU and its
driver, and the versions of Python, torch, CUDA, cuDNN, Triton, diffusers, transformers and the engine's own
code. A changed key is another folder: that start compiles afresh. Each rank keeps its own part:

    <root>/<digest>/key.json              the key, in full (an entry whose key differs is foreign)
    <root>/<digest>/rank<r>/inductor/     torch.compile's caches: FX graphs, AOT graphs, autotuning results
    <root>/<digest>/rank<r>/triton/       compiled Triton kernels (the compiler's and the engine's own)
    <root>/<digest>/rank<r>/artifacts.bin torch.compiler's portable cache artifacts, loaded at start
    <root>/<digest>/rank<r>/manifest.json the engine's own picks (attention kernel, VAE layout), the artifacts'
                                          checksum; written last, so an entry without it is not complete
    <root>/latent-rgb/<fingerprint>.json  latent RGB maps fitted at start-up for the previews, one per VAE
                                          (studio.engine.latent_rgb: a VAE's map, whatever the key)

An entry that cannot be read, fails its checksum or was made for another key is logged and started afresh;
a root that cannot be written leaves the cache off for that start. Neither stops the engine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

# The layout of an entry; a change of it is a change of key.
FORMAT = 1
KEY_FILE = "key.json"
MANIFEST = "manifest.json"
ARTIFACTS = "artifacts.bin"
ENGINE_SOURCES = Path(__file__).resolve().parent
# Small files of a model are hashed whole; weights by name, size and modification time (hashing gigabytes
# would cost what the cache saves).
HASHED_FILE_BYTES = 1 << 20


def default_cache_root() -> Path:
    return Path.home() / ".cache" / "omni-studio" / "engine-compile"


@dataclass(frozen=True)
class CacheKey:
    """What kept work depends on, as plain JSON values; `digest` names its folder."""

    fields: dict[str, Any]

    def canonical(self) -> str:
        return json.dumps(self.fields, sort_keys=True, separators=(",", ":"), default=str)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:32]


def model_fingerprint(model: str) -> dict[str, str]:
    """A model directory by its contents (its JSON files hashed, weights by size and time); a hub id as is."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return {"id": model}
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path)
        if not file.is_file() or any(part.startswith(".") for part in relative.parts):
            continue
        stat = file.stat()
        digest.update(relative.as_posix().encode() + b"\0")
        if file.suffix in (".json", ".txt", ".model") and stat.st_size <= HASHED_FILE_BYTES:
            digest.update(file.read_bytes())
        else:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return {"files": digest.hexdigest()}


def _gpu_driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML here: the kernel module's own line, else unknown
        try:
            return Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts(device: str) -> dict[str, Any]:
    """The device the work was done for: the GPU's model, capability, memory and driver; or the CPU's model
    and the vector instructions torch compiles for."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {
            "device": "cuda",
            "gpu": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30),
            "driver": _gpu_driver(),
        }
    return {
        "device": device,
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "isa": torch.backends.cpu.get_cpu_capability(),
    }


def _version(*distributions: str) -> str | None:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def engine_source_digest() -> str:
    """The engine's own code: kernels and the way the transformer is set up are part of what is compiled."""
    digest = hashlib.sha256()
    for file in sorted(ENGINE_SOURCES.rglob("*.py")):
        digest.update(file.relative_to(ENGINE_SOURCES).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def library_versions() -> dict[str, Any]:
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": ".".join(str(part) for part in sys.version_info[:3]),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "triton": _version("triton", "pytorch-triton"),
        "diffusers": _version("diffusers"),
        "transformers": _version("transformers"),
        "engine": engine_source_digest(),
    }


def cache_key(
    model: str,
    device: str,
    sizes: Sequence[tuple[int, int, int]],
    max_batch: int,
    options: dict[str, Any],
) -> CacheKey:
    """The key of an engine's start-up work: `sizes` and `max_batch` are the warmed shapes; `options` the
    settings that change what is compiled (compile, its mode, the attention backend asked for, graphs,
    kernels, tuning, the ranks)."""
    return CacheKey(
        {
            "format": FORMAT,
            "model": model_fingerprint(model),
            "shapes": {"sizes": [list(size) for size in sizes], "max_batch": max_batch},
            "options": options,
            "machine": machine_facts(device),
            "libraries": library_versions(),
        }
    )


def _write_atomically(path: Path, data: bytes) -> None:
    # A reader sees the old file or the new one, never half of one.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class CorruptEntry(ValueError):
    """The entry on disk cannot be used: why, in words."""


@dataclass
class CompileCache:
    """One rank's part of one key's entry. `open` reads it, `activate` points torch's caches into it, `save`
    keeps this start's work in it. `choices`: the engine's picks read from a complete entry (empty when cold)."""

    root: Path
    key: CacheKey
    rank: int = 0
    choices: dict[str, Any] = field(default_factory=dict)
    warm: bool = False
    usable: bool = True
    _artifacts: bytes | None = field(default=None, repr=False)

    @property
    def entry(self) -> Path:
        return Path(self.root) / self.key.digest

    @property
    def directory(self) -> Path:
        return self.entry / f"rank{self.rank}"

    def for_rank(self, rank: int) -> CompileCache:
        """The same key's part of another rank (not yet opened)."""
        return replace(self, rank=rank, choices={}, warm=False, usable=True, _artifacts=None)

    # --- reading -------------------------------------------------------------------------------------------

    def open(self) -> bool:
        """Read this rank's part. True: a complete entry of this key was there (its picks now in `choices`).
        A corrupt or foreign entry is logged and cleared; an unwritable root turns the cache off (`usable`)."""
        self.choices, self.warm, self._artifacts = {}, False, None
        try:
            problem = self._foreign_key()
            if problem is None:
                self._read()
                self.warm = True
                log.info("compile cache %s: warm (%s)", self.directory, sorted(self.choices))
                return True
        except FileNotFoundError:
            problem = None  # no complete entry: a cold start
        except (CorruptEntry, OSError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            log.warning("compile cache %s ignored and made afresh: %s", self.directory, problem)
            self._clear()
        self._prepare()
        return False

    def _foreign_key(self) -> str | None:
        key_file = self.entry / KEY_FILE
        if not key_file.exists():
            if self.directory.exists():
                return "its key file is missing"
            raise FileNotFoundError(key_file)
        try:
            stored = json.loads(key_file.read_text())
        except (OSError, ValueError) as exc:
            return f"its key file cannot be read ({exc})"
        if stored != json.loads(self.key.canonical()):
            return "it was made for another key"
        return None

    def _read(self) -> None:
        manifest = json.loads((self.directory / MANIFEST).read_text())
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CorruptEntry("the manifest is not one of this format")
        if manifest.get("key") != self.key.digest:
            raise CorruptEntry("the manifest names another key")
        choices = manifest.get("choices")
        if not isinstance(choices, dict):
            raise CorruptEntry("the manifest has no choices")
        artifacts = manifest.get("artifacts")
        if artifacts is not None:
            if not isinstance(artifacts, dict) or not isinstance(artifacts.get("sha256"), str):
                raise CorruptEntry("the manifest's artifacts record is malformed")
            try:
                data = (self.directory / ARTIFACTS).read_bytes()
            except FileNotFoundError:
                raise CorruptEntry("the compile artifacts named by the manifest are missing") from None
            if hashlib.sha256(data).hexdigest() != artifacts["sha256"]:
                raise CorruptEntry("the compile artifacts fail their checksum")
            self._artifacts = data
        self.choices = choices

    def _clear(self) -> None:
        try:
            if self.directory.exists():
                shutil.rmtree(self.directory)
            key_file = self.entry / KEY_FILE
            if key_file.exists():
                key_file.unlink()
        except OSError as exc:
            log.warning("compile cache %s cannot be cleared (%s): off for this start", self.directory, exc)
            self.usable = False

    def _prepare(self) -> None:
        if not self.usable:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            key_file = self.entry / KEY_FILE
            if not key_file.exists():
                _write_atomically(key_file, json.dumps(self.key.fields, indent=1, sort_keys=True, default=str).encode())
        except OSError as exc:
            log.warning("compile cache %s cannot be written (%s): off for this start", self.directory, exc)
            self.usable = False

    # --- using ---------------------------------------------------------------------------------------------

    def activate(self) -> None:
        """Point torch.compile's and Triton's on-disk caches into this entry (before anything compiles), and
        load the saved compile artifacts of a warm entry."""
        if not self.usable:
            return
        # torch reads both at each compile; set here, they hold for the rest of the process.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.directory / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(self.directory / "triton")
        if self._artifacts:
            try:
                torch.compiler.load_cache_artifacts(self._artifacts)
            except Exception as exc:  # torch's own format: whatever it raises, this start compiles afresh
                log.warning("compile cache artifacts in %s not loaded: %s: %s", self.directory, type(exc).__name__, exc)

    def save(self, choices: dict[str, Any]) -> None:
        """Keep this start's picks and compile artifacts (the manifest last: until it is written the entry
        reads as cold)."""
        if not self.usable:
            return
        artifacts: bytes | None = None
        try:
            saved = torch.compiler.save_cache_artifacts()
            artifacts = saved[0] if saved else None
        except Exception as exc:  # artifacts are a bonus over the cache folders: keep the rest
            log.warning("compile artifacts not saved: %s: %s", type(exc).__name__, exc)
        if not artifacts:
            artifacts = self._artifacts  # nothing new compiled: keep what was loaded
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "key": self.key.digest,
            "choices": choices,
            "artifacts": None,
            "saved_at": time.time(),
        }
        try:
            self._prepare()
            if not self.usable:
                return
            if artifacts:
                _write_atomically(self.directory / ARTIFACTS, artifacts)
                manifest["artifacts"] = {"sha256": hashlib.sha256(artifacts).hexdigest(), "bytes": len(artifacts)}
            _write_atomically(self.directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        except OSError as exc:
            log.warning("compile cache %s not saved: %s", self.directory, exc)
            return
        self.choices, self._artifacts = dict(choices), artifacts
        log.info("compile cache %s saved (%s)", self.directory, sorted(choices))
