"""How a managed server is started: argv and environment, never a shell.

Two launchers (`Launcher`, one per managed engine kind: studio.backend.engine_kinds names it) share one shape
(`LaunchSpec`, studio.backend.servers.launch_spec): the embedded engine, and `vllm serve MODEL --omni` (directly, or inside NVIDIA's docker recipe).
The API key goes through the environment (VLLM_API_KEY) so it never shows in argv, `ps` or logs.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from pathlib import Path

from studio.backend.engine_kinds import engine_kind
from studio.backend.servers.launch_spec import Launcher, LaunchSpec
from studio.backend.servers.machine import gpus_found
from studio.settings import EMBEDDED_ENGINE, ExposedEngineSettings, StudioSettings
from studio.settings_flags import flag_args

INSTALL_HINT = (
    "install vLLM-Omni into an environment (`pip install vllm vllm-omni`, see "
    "https://docs.vllm.ai/projects/vllm-omni) and point the studio at it with --vllm PATH "
    "or OMNI_STUDIO_VLLM_EXECUTABLE"
)
# Flags that widen what a server exposes (its address, files requests may read, or any setting at all: vLLM's
# --config file); extra args may not add them behind the user's back.
RISKY_FLAGS = ("--allowed-local-media-path", "--host", "--config")
# The vLLM-Omni levers: each typed setting and the `vllm serve --omni` flag it sets (guardrails off is its
# --no-guardrails). The Server view shows a lever only where the installed server's help lists its flag.
LEVER_FLAGS: dict[str, str] = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "cfg_parallel_size": "--cfg-parallel-size",
    "ulysses_degree": "--ulysses-degree",
    "ring_degree": "--ring-degree",
    "cache_backend": "--cache-backend",
    "quantization": "--quantization",
    "diffusion_attention_backend": "--diffusion-attention-backend",
    "enforce_eager": "--enforce-eager",
    "vae_tiling": "--vae-use-tiling",
    "init_timeout_s": "--init-timeout",
    "guardrails": "--no-guardrails",
}


log = logging.getLogger(__name__)


class LaunchError(ValueError):
    """A server that cannot be started as configured; the message says what to change."""


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
        flag = risky_flag(arg)
        if flag is None:
            continue
        written = "" if arg.split("=", 1)[0] == flag else f" (written {arg.split('=', 1)[0]})"
        if not allow_risky:
            raise LaunchError(
                f"extra serve args set {flag}{written}, which widens what the server exposes (its address, or "
                "files requests may read): confirm it with 'Allow exposure-widening serve args' in the "
                "Server view or --allow-risky-serve-args"
            )
        log.warning("extra serve args set %s (confirmed by the user): %s", flag, shlex.join(args))
    return args


def risky_flag(arg: str) -> str | None:
    """The flag of RISKY_FLAGS an argument may set, read as the servers' parsers read it, or None: argparse takes
    any unique prefix of a flag (`--hos`), vLLM's parser reads `_` as `-` and `--a.b` as a key of `--a`, and a value
    may follow `=`. A prefix of a risky flag is taken for it even where it is ambiguous (the guard cannot know every
    flag of the installed server; a server refuses an ambiguous one anyway)."""
    if not arg.startswith("--") or arg == "--":
        return None  # a value, a short flag, or the end of flags
    name = "--" + arg[2:].split("=", 1)[0].replace("_", "-").split(".", 1)[0]
    return next((flag for flag in RISKY_FLAGS if name != "--" and flag.startswith(name)), None)


def levers_missing(flags: frozenset[str]) -> list[str]:
    """The levers whose flag a server's help (`flags`, as variants.help_flags reads it) does not list."""
    return [name for name, flag in LEVER_FLAGS.items() if flag not in flags]


def world_size(settings: StudioSettings) -> int:
    """GPUs one replica takes: the product of its engine's degrees (vLLM-Omni: tensor parallel x cfg parallel x
    ulysses x ring; the embedded engine: cfg parallel x ulysses, it ignores the others)."""
    return engine_kind(settings).width(settings)


def check_parallelism(settings: StudioSettings, gpus: list[str] | None) -> None:
    needed = world_size(settings)
    if gpus is not None:
        have, where = len(gpus), f"--gpus {','.join(gpus)}"
    else:
        count = len(gpus_found())
        if count == 0 or settings.use_docker:
            return  # cannot know here; the server reports it
        have, where = count, "the GPUs visible to the studio"
    if needed > have:
        shape = engine_kind(settings).replica
        words = shape.words(settings) if shape is not None else f"width {needed}"
        raise LaunchError(f"{words} needs {needed} GPUs, but {where} give {have}")


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


def lever_args(settings: StudioSettings) -> list[str]:
    """The levers' flags for `vllm serve --omni`: each only where it is set (or differs from the server's
    default), so an unset lever leaves the installed server's own default in place. Tensor parallel and the init
    timeout are always given: the studio plans GPUs and waits by them."""
    flag = LEVER_FLAGS
    argv = [flag["tensor_parallel_size"], str(settings.tensor_parallel_size)]
    if settings.cfg_parallel_size > 1:
        argv += [flag["cfg_parallel_size"], str(settings.cfg_parallel_size)]
    if settings.ulysses_degree > 1:
        argv += [flag["ulysses_degree"], str(settings.ulysses_degree)]
    if settings.ring_degree is not None:
        argv += [flag["ring_degree"], str(settings.ring_degree)]
    for name in ("cache_backend", "quantization", "diffusion_attention_backend"):
        value = getattr(settings, name)
        if value:
            argv += [flag[name], value]
    if settings.enforce_eager:
        argv.append(flag["enforce_eager"])
    if settings.vae_tiling:
        argv.append(flag["vae_tiling"])
    argv += [flag["init_timeout_s"], str(int(settings.init_timeout_s))]
    if not settings.guardrails:
        argv.append(flag["guardrails"])
    return argv


def _serve_flags(settings: StudioSettings, host: str, port: int) -> list[str]:
    argv = ["--omni", "--host", host, "--port", str(port)]
    if settings.served_model_name:
        argv += ["--served-model-name", settings.served_model_name]
    if settings.model_class_name:
        argv += ["--model-class-name", settings.model_class_name]
    argv += lever_args(settings)
    if settings.log_stats:
        argv.append("--log-stats")
    # Extra args come last: where one repeats a lever's flag (a bench variant's), the server takes the extra one.
    return argv + parse_extra_args(settings.extra_serve_args, settings.allow_risky_serve_args)


def _key_env(settings: StudioSettings) -> tuple[dict[str, str], frozenset[str]]:
    key = settings.api_key_value()
    return ({"VLLM_API_KEY": key}, frozenset({"VLLM_API_KEY"})) if key else ({}, frozenset())


def vllm_omni_launch(settings: StudioSettings, port: int, host: str = "127.0.0.1") -> LaunchSpec:
    """`vllm serve MODEL --omni ...` on `host` (loopback unless a cluster node's address is given), on the GPUs
    given."""
    gpus = parse_gpus(settings.gpus)
    check_parallelism(settings, gpus)
    if settings.use_docker:
        return docker_launch(settings, port, gpus, host)
    argv = [
        find_vllm(settings.vllm_executable),
        "serve",
        settings.model,
        *_serve_flags(settings, host, port),
    ]
    env, secrets = _key_env(settings)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    if settings.hf_home is not None:
        env["HF_HOME"] = str(settings.hf_home)
    return LaunchSpec(name="vllm-omni", argv=argv, env=env, secret_env=secrets)


def docker_launch(settings: StudioSettings, port: int, gpus: list[str] | None, host: str = "127.0.0.1") -> LaunchSpec:
    """NVIDIA's recipe: the server listens on 8000 inside the container, published on `host` only (loopback
    unless a cluster node's address is given)."""
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
        f"{host}:{port}:8000",
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


def engine_setting_args(settings: StudioSettings, exposed: ExposedEngineSettings = EMBEDDED_ENGINE) -> list[str]:
    """The engine's flags for the engine settings the studio offers (studio.settings.embedded): each one the settings
    set away from the engine's default, under the engine's own flag (a switch as --x or --no-x)."""
    fields = exposed.engine.model_fields
    return [
        arg for name, value in exposed.engine_values(settings).items() for arg in flag_args(name, fields[name], value)
    ]


def embedded_launch(
    settings: StudioSettings, port: int, output_dir: Path | None = None, host: str = "127.0.0.1"
) -> LaunchSpec:
    """The project's own engine, as a subprocess of the same Python, listening on `host`."""
    argv = [sys.executable, "-m", "studio.engine", "--model", settings.model, "--host", host, "--port", str(port)]
    if settings.served_model_name:
        argv += ["--served-model-name", settings.served_model_name]
    if not settings.guardrails:
        argv.append("--no-guardrails")
    argv += engine_setting_args(settings)
    # One request across GPUs: the engine's own cfg and sequence parallelism (it has no tensor parallelism). The
    # other vLLM-Omni levers (ring, cache, quantization, attention backend, eager, VAE tiling) have no engine flag.
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


def vllm_omni_help(settings: StudioSettings) -> list[str]:
    """`vllm serve --omni --help=all` as the studio would launch vllm (vLLM's plain --help lists option groups
    only; --help=all lists every flag)."""
    serve = ["serve", "--omni", "--help=all"]
    if settings.use_docker:
        return ["docker", "run", "--rm", settings.docker_image, "vllm", *serve]
    return [find_vllm(settings.vllm_executable), *serve]


def embedded_help(settings: StudioSettings) -> list[str]:
    return [sys.executable, "-m", "studio.engine", "--help"]


EMBEDDED_LAUNCHER = Launcher(
    launch=lambda settings, port, host: embedded_launch(settings, port, host=host),
    help_command=embedded_help,
    loose_flags=False,
)
VLLM_OMNI_LAUNCHER = Launcher(launch=vllm_omni_launch, help_command=vllm_omni_help, loose_flags=True)


def launch_for(settings: StudioSettings, port: int, host: str = "127.0.0.1") -> LaunchSpec:
    """`host`: the address the server binds; loopback, except a replica on a cluster node the studio reaches
    by the node's address."""
    kind = engine_kind(settings)
    if kind.launcher is None:
        raise LaunchError(f"{kind.label} are not started by the studio; give their URLs instead")
    return kind.launcher.launch(settings, port, host)
