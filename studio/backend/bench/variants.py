"""Server variants a bench compares: named sets of extra serve options, e.g. from a TOML file

    base = ""
    teacache = "--cache-backend tea_cache"
    fp8 = "--quantization fp8"
    eager = "--enforce-eager"

(or the same as a JSON object). A variant's options go to the server as extra serve args, after the settings'
own (--serve-args). Before any server starts, every flag a variant sets is looked up in the installed server's
own help (`vllm serve --omni --help=all`, `python -m studio.engine --help`): one it lacks is refused by name.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.backend.engine_kinds import engine_kind
from studio.config import StudioSettings

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
# The variant a bench runs when none are given: the settings as they are.
BASE = "base"
# Flags the bench sets itself for each replica: a variant setting them would change the layout, not the server.
LAYOUT_FLAGS = {
    "--tensor-parallel-size": "the layout's width sets it",
    "-tp": "the layout's width sets it",
    "--port": "each replica gets its own",
    "--model": "the bench serves the settings' model",
}
# Reading a server's help imports its whole stack (vLLM: about 15 s on a small CPU).
HELP_TIMEOUT_S = 300.0
# An option in an argparse help: a line's first column (indented a little; help text wrapped under it is indented
# further), its names separated by ", ".
_OPTION_COLUMN = re.compile(r"^ {1,8}(-[-\w.]*\w.*?)(?:\s{2,}|$)")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)")


class VariantError(ValueError):
    """A variant that cannot run, said in one line that names it (and the flag)."""


@dataclass(frozen=True)
class Variant:
    name: str
    args: str  # extra serve args of its own, one line, split as a shell would

    def __str__(self) -> str:
        return self.name


def parse_variants(value: Any) -> dict[str, str]:
    """Variants as {name: serve args}: a mapping, or TOML or JSON text (a table of name = "args")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("{") else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise VariantError(f'variants take name = "serve args" lines (TOML) or a JSON object: {exc}') from None
    if not isinstance(value, Mapping):
        raise VariantError('variants take name = "serve args" lines (TOML) or a JSON object')
    variants: dict[str, str] = {}
    for name, args in value.items():
        if not NAME.match(str(name)):
            raise VariantError(f"variant name {name!r}: letters, digits, '.', '_' or '-', at most 40")
        if isinstance(args, list) and all(isinstance(arg, str) for arg in args):
            args = shlex.join(args)
        if not isinstance(args, str):
            raise VariantError(f'variant {name!r}: its serve args are one string, e.g. "--enforce-eager"')
        try:
            shlex.split(args)
        except ValueError as exc:
            raise VariantError(f"variant {name!r}: cannot split {args!r}: {exc}") from None
        if "\n" in args or "\r" in args:
            raise VariantError(f"variant {name!r}: its serve args are one line")
        variants[str(name)] = args.strip()
    return variants


def load_variants(path: Path) -> dict[str, str]:
    """A variants file: JSON where it ends in .json, TOML otherwise."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            return parse_variants(json.loads(text))
        except json.JSONDecodeError as exc:
            raise VariantError(f"{path}: not JSON: {exc}") from None
    try:
        return parse_variants(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise VariantError(f"{path}: not TOML: {exc}") from None


def variants_of(given: Mapping[str, str]) -> list[Variant]:
    """The variants a bench runs: those given, or the settings as they are."""
    return [Variant(name, args) for name, args in given.items()] or [Variant(BASE, "")]


def baseline_variant(variants: list[Variant]) -> Variant:
    """The variant the others are compared with: the first that adds no serve args of its own (the settings as
    they are), else the first given."""
    return next((variant for variant in variants if not variant.args), variants[0])


def serve_args(settings: StudioSettings, variant: Variant) -> str:
    """What the server of this variant gets as extra serve args: the settings' own, then the variant's."""
    return " ".join(part for part in (settings.extra_serve_args.strip(), variant.args) if part)


def flags_in(args: list[str]) -> list[str]:
    """The flags among split serve args (a value after `=` dropped); values such as -1 are not flags."""
    return [arg.split("=", 1)[0] for arg in args if _FLAG.fullmatch(arg.split("=", 1)[0])]


def help_flags(text: str) -> frozenset[str]:
    """Every option an argparse help lists (each of its names: `--quantization QUANTIZATION, -q QUANTIZATION`)."""
    flags: set[str] = set()
    for line in text.splitlines():
        column = _OPTION_COLUMN.match(line)
        if column:
            flags.update(_FLAG.findall(column.group(1)))
    return frozenset(flags)


def help_command(settings: StudioSettings) -> list[str]:
    """The installed server's own help: the command the studio would launch, asked for every option."""
    launcher = engine_kind(settings).launcher
    if launcher is None:
        raise VariantError(
            f"variants are serve options of servers the bench starts; the {settings.engine} engine starts none"
        )
    return launcher.help_command(settings)


@functools.lru_cache(maxsize=8)
def _server_flags(command: tuple[str, ...]) -> frozenset[str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VariantError(f"cannot read the installed server's flags (`{shlex.join(command)}`): {exc}") from None
    flags = help_flags(done.stdout)
    if done.returncode != 0 or not flags:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise VariantError(
            f"cannot read the installed server's flags (`{shlex.join(command)}` exited {done.returncode}): {tail[0]}"
        )
    return flags


def server_flags(settings: StudioSettings) -> frozenset[str]:
    """The flags the installed server takes, read from its help (once per command in a process)."""
    from studio.backend.servers.launchers import LaunchError

    try:
        command = help_command(settings)
    except LaunchError as exc:
        raise VariantError(f"cannot read the installed server's flags: {exc}") from None
    return _server_flags(tuple(command))


def _known(flag: str, flags: frozenset[str], loose_flags: bool) -> bool:
    if flag in flags:
        return True
    if loose_flags:
        # vLLM's parser reads --max_model_len as --max-model-len, and --compilation-config.mode as a key of
        # --compilation-config.
        name = flag.replace("_", "-")
        return name in flags or name.split(".", 1)[0] in flags
    return False


def check_variants(settings: StudioSettings, variants: list[Variant]) -> None:
    """Refuse, before any server starts, a variant that sets a flag the installed server does not have, one
    that sets what the layout sets, or one whose args the launcher would refuse (exposure-widening flags)."""
    from studio.backend.servers.launchers import LaunchError, parse_extra_args

    flags_of: dict[str, list[str]] = {}
    for variant in variants:
        try:
            parse_extra_args(serve_args(settings, variant), settings.allow_risky_serve_args)
        except LaunchError as exc:
            raise VariantError(f"variant {variant.name!r}: {exc}") from None
        flags_of[variant.name] = flags_in(shlex.split(variant.args))
        for flag in flags_of[variant.name]:
            if flag in LAYOUT_FLAGS:
                raise VariantError(f"variant {variant.name!r} sets {flag}, which {LAYOUT_FLAGS[flag]}")
    if not any(flags_of.values()):
        return
    known = server_flags(settings)
    where = shlex.join(help_command(settings))
    launcher = engine_kind(settings).launcher
    loose = launcher is not None and launcher.loose_flags
    for variant in variants:
        for flag in flags_of[variant.name]:
            if not _known(flag, known, loose):
                raise VariantError(
                    f"variant {variant.name!r}: the installed server has no flag {flag} (it is not in `{where}`)"
                )
