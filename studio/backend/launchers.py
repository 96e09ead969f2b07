"""How a managed server is started: argv and environment, never a shell.

Two launchers share one shape (`LaunchSpec`): the embedded engine, and `vllm serve MODEL --omni` (directly,
or inside NVIDIA's docker recipe). The API key goes through the environment (VLLM_API_KEY) so it never
shows in argv, `ps` or logs.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from studio.config import StudioSettings

INSTALL_HINT = (
    "install vLLM-Omni into an environment (`pip install vllm vllm-omni`, see "
    "https://docs.vllm.ai/projects/vllm-omni) and point the studio at it with --vllm PATH "
    "or OMNI_STUDIO_VLLM_EXECUTABLE"
)
# Flags that widen what a server exposes; extra args may not add them behind the user's back.
RISKY_FLAGS = ("--allowed-local-media-path", "--host")


log = logging.getLogger(__name__)


class LaunchError(ValueError):
    """A server that cannot be started as configured; the message says what to change."""


@dataclass(frozen=True)
class LaunchSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the studio's environment
    secret_env: frozenset[str] = frozenset()  # names whose values must never be logged

    def display(self) -> str:
        """The command as it may be shown: secrets are only ever in env, which is not shown."""
        return shlex.join(self.argv)


def parse_gpus(gpus: str | None) -> list[str] | None:
    if gpus is None or not gpus.strip():
        return None
    parts = [part.strip() for part in gpus.split(",")]
    if not all(part.isdigit() for part in parts):
        raise LaunchError(f"--gpus takes GPU indices like 0,1,2,3, got {gpus!r}")
    if len(set(parts)) != len(parts):
        raise LaunchError(f"--gpus lists a GPU twice: {gpus!r}")
    return parts


def parse_extra_args(extra: str, allow_risky: bool = False) -> list[str]:
    """Split extra serve flags like a shell would, without running one. Flags that widen what the server
    exposes are refused unless the user confirmed them (`allow_risky`), and then logged as a warning."""
    if "\n" in extra or "\r" in extra or "\x00" in extra:
        raise LaunchError("extra serve args must be on one line (no newlines or NUL characters)")
    try:
        args = shlex.split(extra)
    except ValueError as exc:
        raise LaunchError(f"cannot parse extra serve args {extra!r}: {exc}") from exc
    for arg in args:
        for flag in RISKY_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                if not allow_risky:
                    raise LaunchError(
                        f"extra serve args set {flag}, which widens what the server exposes (its address, or "
                        "files requests may read): confirm it with 'Allow exposure-widening serve args' in the "
                        "Server view or --allow-risky-serve-args"
                    )
                log.warning("extra serve args set %s (confirmed by the user): %s", flag, shlex.join(args))
    return args


def world_size(settings: StudioSettings) -> int:
    return settings.tensor_parallel_size * settings.cfg_parallel_size * settings.ulysses_degree


def visible_gpu_count() -> int | None:
    """GPUs this process can see, or None if unknown (no torch or no CUDA)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return None


def check_parallelism(settings: StudioSettings, gpus: list[str] | None) -> None:
    needed = world_size(settings)
    if gpus is not None:
        have, where = len(gpus), f"--gpus {','.join(gpus)}"
    else:
        count = visible_gpu_count()
        if count is None or count == 0 or settings.use_docker:
            return  # cannot know here; the server reports it
        have, where = count, "the GPUs visible to the studio"
    if needed > have:
        raise LaunchError(
            f"tensor parallel {settings.tensor_parallel_size} x cfg parallel {settings.cfg_parallel_size} "
            f"x ulysses {settings.ulysses_degree} needs {needed} GPUs, but {where} give {have}"
        )


def find_vllm(executable: str) -> str:
    """The `vllm` command: a path, a venv directory holding bin/vllm, or a name on PATH."""
    candidate = Path(executable).expanduser()
    if candidate.is_dir():
        candidate = candidate / "bin" / "vllm"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(executable)
    if found:
        return found
    raise LaunchError(f"the `vllm` executable was not found ({executable!r}); {INSTALL_HINT}")


def _serve_flags(settings: StudioSettings, host: str, port: int) -> list[str]:
    argv = ["--omni", "--host", host, "--port", str(port)]
    if settings.served_model_name:
        argv += ["--served-model-name", settings.served_model_name]
    argv += ["--tensor-parallel-size", str(settings.tensor_parallel_size)]
    if settings.cfg_parallel_size > 1:
        argv += ["--cfg-parallel-size", str(settings.cfg_parallel_size)]
    if settings.ulysses_degree > 1:
        argv += ["--ulysses-degree", str(settings.ulysses_degree)]
    if settings.model_class_name:
        argv += ["--model-class-name", settings.model_class_name]
    argv += ["--init-timeout", str(int(settings.init_timeout_s))]
    if not settings.guardrails:
        argv.append("--no-guardrails")
    if settings.log_stats:
        argv.append("--log-stats")
    return argv + parse_extra_args(settings.extra_serve_args, settings.allow_risky_serve_args)


def _key_env(settings: StudioSettings) -> tuple[dict[str, str], frozenset[str]]:
    key = settings.api_key_value()
    return ({"VLLM_API_KEY": key}, frozenset({"VLLM_API_KEY"})) if key else ({}, frozenset())


def vllm_omni_launch(settings: StudioSettings, port: int) -> LaunchSpec:
    """`vllm serve MODEL --omni ...` on loopback, on the GPUs given."""
    gpus = parse_gpus(settings.gpus)
    check_parallelism(settings, gpus)
    if settings.use_docker:
        return docker_launch(settings, port, gpus)
    argv = [
        find_vllm(settings.vllm_executable),
        "serve",
        settings.model,
        *_serve_flags(settings, "127.0.0.1", port),
    ]
    env, secrets = _key_env(settings)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    if settings.hf_home is not None:
        env["HF_HOME"] = str(settings.hf_home)
    return LaunchSpec(name="vllm-omni", argv=argv, env=env, secret_env=secrets)


def docker_launch(settings: StudioSettings, port: int, gpus: list[str] | None) -> LaunchSpec:
    """NVIDIA's recipe: the server listens on 8000 inside the container, published on loopback only."""
    hf_home = Path(settings.hf_home or Path.home() / ".cache" / "huggingface")
    gpu_arg = "all" if gpus is None else f'"device={",".join(gpus)}"'
    env, secrets = _key_env(settings)
    argv = [
        "docker",
        "run",
        "--rm",
        "--gpus",
        gpu_arg,
        "-p",
        f"127.0.0.1:{port}:8000",
        "--ipc=host",
        "-v",
        f"{hf_home}:/root/.cache/huggingface",
        "-e",
        "VLLM_USE_DEEP_GEMM=0",
    ]
    if env:
        argv += ["-e", "VLLM_API_KEY"]  # the name only: docker copies the value from our environment
    argv += [settings.docker_image, "vllm", "serve", settings.model, *_serve_flags(settings, "0.0.0.0", 8000)]
    return LaunchSpec(name="vllm-omni-docker", argv=argv, env=env, secret_env=secrets)


def embedded_launch(settings: StudioSettings, port: int, output_dir: Path | None = None) -> LaunchSpec:
    """The project's own engine, as a subprocess of the same Python."""
    argv = [
        sys.executable,
        "-m",
        "studio.engine",
        "--model",
        settings.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        settings.device,
        "--blocklist",
        str(settings.blocklist),
    ]
    if settings.served_model_name:
        argv += ["--served-model-name", settings.served_model_name]
    if not settings.guardrails:
        argv.append("--no-guardrails")
    if settings.engine_threads:
        argv += ["--threads", str(settings.engine_threads)]
    # One request across GPUs: the engine's own cfg and sequence parallelism (it has no tensor parallelism).
    if settings.cfg_parallel_size > 1:
        argv += ["--cfg-parallel-size", str(settings.cfg_parallel_size)]
    if settings.ulysses_degree > 1:
        argv += ["--ulysses-degree", str(settings.ulysses_degree)]
    if output_dir is not None:
        argv += ["--output-dir", str(output_dir)]
    # The engine's own levers (a bench variant, or the Server view's extra args), checked as vLLM-Omni's are.
    argv += parse_extra_args(settings.extra_serve_args, settings.allow_risky_serve_args)
    env, secrets = _key_env(settings)
    env["PYTHONUNBUFFERED"] = "1"
    if settings.engine_threads:
        # The native thread pools (OpenMP, MKL) size themselves from these before torch is imported.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(settings.engine_threads)
    gpus = parse_gpus(settings.gpus)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return LaunchSpec(name="embedded", argv=argv, env=env, secret_env=secrets)


def launch_for(settings: StudioSettings, port: int) -> LaunchSpec:
    if settings.engine == "embedded":
        return embedded_launch(settings, port)
    if settings.engine == "vllm-omni":
        return vllm_omni_launch(settings, port)
    raise LaunchError("remote servers are not started by the studio; give their URLs instead")
