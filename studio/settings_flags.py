"""argparse options built from the fields of a pydantic model, so that a setting's flag, type, choices, default and
help are declared once, on the field (studio/settings/, studio/backend/bench/config.py); the CLI and the engine's
own `python -m studio.engine` both make their flags here, and a launcher gives a setting to a server's flag here.

A field's flag is `--` + its name in kebab case, or the names its `json_schema_extra` lists under "flags". A list
field takes one comma-separated value (the model's validator splits it), or, where `json_schema_extra` says
"repeat", the flag once per item. A flag not given leaves its destination None, so the model's own default (or the
environment) applies.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


class ArgumentContainer(Protocol):
    """A parser or an argument group of one."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action: ...


def flags(*names: str) -> dict[str, object]:
    """The command-line names of a field, where its kebab-case name is not (or not only) the flag: the field's
    `json_schema_extra`."""
    return {"flags": names}


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def flag_names(name: str, field: FieldInfo) -> list[str]:
    return list(_extra(field).get("flags") or ["--" + name.replace("_", "-")])


def _without_none(annotation: Any) -> Any:
    """The plain type of a field: Optional and Annotated (shared constrained types) taken off; pydantic checks
    the constraints after parsing."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = args[0] if len(args) == 1 else str
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _default_text(field: FieldInfo) -> str:
    default = field.default
    if isinstance(default, bool):
        return f" (default: {'on' if default else 'off'})"
    if default in (PydanticUndefined, None, "") or "default" in (field.description or ""):
        return ""
    return f" (default: {default})"


def _argument(name: str, field: FieldInfo) -> dict[str, Any]:
    if not field.description:
        raise ValueError(f"{name} has no description: every flag needs one")
    kind = _without_none(field.annotation)
    metavar = flag_names(name, field)[0].lstrip("-").replace("-", "_").upper()
    options: dict[str, Any] = {"default": None, "help": field.description + _default_text(field), "metavar": metavar}
    if field.is_required():
        options["required"] = True
    if kind is bool:
        options.update(action=argparse.BooleanOptionalAction, metavar=None)
    elif typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        options.update(choices=choices, type=type(choices[0]), metavar=None)
    elif typing.get_origin(kind) is list:
        if _extra(field).get("repeat"):
            (item,) = typing.get_args(kind)
            options.update(action="append", type=item)
        else:
            options["metavar"] = f"{metavar},..."
    elif kind in (int, float, Path):
        options["type"] = kind
    elif kind not in (str, SecretStr):
        raise TypeError(f"no command-line form for {name}: {kind!r}")
    return options


def add_model_flags(
    parser: ArgumentContainer,
    model: type[BaseModel],
    names: Iterable[str] | None = None,
    *,
    dest_prefix: str = "",
) -> None:
    """One option per field of `model` (those in `names`, in that order, or all). `dest_prefix` keeps two models'
    fields of one name apart in one parser."""
    for name in names or model.model_fields:
        field = model.model_fields[name]
        parser.add_argument(*flag_names(name, field), dest=dest_prefix + name, **_argument(name, field))


def model_values(
    args: argparse.Namespace, model: type[BaseModel], names: Iterable[str] | None = None, *, dest_prefix: str = ""
) -> dict[str, Any]:
    """The fields of `model` that were given on the command line (their flags added by add_model_flags)."""
    values = {}
    for name in names or model.model_fields:
        value = getattr(args, dest_prefix + name, None)
        if value is not None:
            values[name] = value
    return values


def flag_args(name: str, field: FieldInfo, value: Any) -> list[str]:
    """The arguments that give `value` to the field's flag, as a parser of add_model_flags reads them: a switch as
    --x or --no-x, a list as one comma-separated value (or the flag once per item, where it says "repeat")."""
    flag = flag_names(name, field)[0]
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag.removeprefix("--")]
    if isinstance(value, SecretStr):
        raise ValueError(f"{name} is a secret: it goes in the environment, never in arguments")
    if isinstance(value, list | tuple):
        if _extra(field).get("repeat"):
            return [part for item in value for part in (flag, str(item))]
        return [flag, ",".join(str(item) for item in value)]
    return [flag, str(value)]


def validation_text(exc: ValidationError) -> str:
    """Every problem of a settings model in one line: `field: message; ...`."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" if err["loc"] else err["msg"] for err in exc.errors()
    )
