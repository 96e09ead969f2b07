"""An mkdocs hook that writes the CLI reference page from the studio's own argparse parsers at build time, so that
the page lists exactly the flags `omni-studio COMMAND --help` lists: each command's usage, then each option with its
arguments, default and help.

docs/cli-reference.md holds the page's heading and the marker below; the hook puts the reference in its place."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- cli reference: the studio's parsers -->"


def _parser() -> argparse.ArgumentParser:
    # The repository's root first: the build may run from a checkout that is not installed.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from studio.cli import build_parser  # each command imports its heavy parts only when it runs

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> tuple[dict[str, argparse.ArgumentParser], dict[str, str]]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return dict(action.choices), helps


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
        return ""
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction) and action.default in (False, True):
        return ""  # a switch: its help says what it turns on or off
    if isinstance(action.default, list | tuple):
        return ", ".join(f"`{item}`" for item in action.default) if action.default else ""
    return f"`{action.default}`"


# The studio's flags default to None and name the setting's default in their help, as "(default: ...)".
DEFAULT_IN_HELP = re.compile(r"\s*\(default: ((?:[^()]|\([^()]*\))*)\)")


def _option(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if action.option_strings:
        metavar = (
            ""
            if action.nargs == 0
            else formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        )
        names = ", ".join(f"`{name}{' ' + metavar if metavar else ''}`" for name in action.option_strings)
    else:
        names = f"`{formatter._format_args(action, formatter._get_default_metavar_for_positional(action))}`"
    help_text = formatter._expand_help(action) if action.help else ""
    default = _default(action)
    named = DEFAULT_IN_HELP.findall(help_text)
    if named and not default:
        help_text = DEFAULT_IN_HELP.sub("", help_text)
        default = named[-1] if " " in named[-1] else f"`{named[-1]}`"  # prose stays prose
    # Paths under the checkout as the repository names them, not as this machine has them.
    text = f"| {_cell(names)} | {_cell(help_text)} | {_cell(default)} |"
    return text.replace(f"{ROOT}/", "")


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage lines without argparse's "usage: " prefix, the continuation lines moved left by as much."""
    prefix = "usage: "
    lines = parser.format_usage().strip().splitlines()
    return "\n".join([lines[0].removeprefix(prefix), *(line[len(prefix) :] for line in lines[1:])])


def _section(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = [f"## `omni-studio {name}`", ""]
    if summary:
        lines += [summary[:1].upper() + summary[1:] + ".", ""]
    lines += ["```text", _usage(parser), "```", ""]
    for group in parser._action_groups:
        # --help is on every command and says nothing of it
        actions = [
            a for a in group._group_actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
        ]
        if not actions:
            continue
        # Bold, not a heading: the same group names recur under every command.
        title = {"options": "options", "positional arguments": "arguments"}.get(group.title or "", group.title or "")
        lines += [f"**{title}**", ""]
        if group.description:
            lines += [_cell(group.description), ""]
        lines += ["| option | what it does | default |", "|---|---|---|"]
        lines += [_option(action, formatter) for action in actions]
        lines.append("")
    return lines


def reference_markdown() -> str:
    parser = _parser()
    commands, helps = _subcommands(parser)
    lines: list[str] = []
    for name, sub in commands.items():
        lines += _section(name, helps.get(name, ""), sub)
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference_markdown())
