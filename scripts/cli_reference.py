"""Write docs/cli.md, the reference of every ``rbak`` command, from the argument parser itself (``cli/main.py``).

    python scripts/cli_reference.py           # regenerate docs/cli.md (after adding or changing a command)
    python scripts/cli_reference.py --check   # exit 1 when docs/cli.md is not what the parser says

Every command and option the parser knows is listed, ``--help``-only ones included; hidden options
(``help=argparse.SUPPRESS``) are not. tests/test_cli_reference.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "cli.md"
sys.path.insert(0, str(REPO))

HEADER = """# The `rbak` command reference

Generated from `rbak`'s argument parser by `python scripts/cli_reference.py`: do not edit by hand. How the commands
fit together (where a command finds its location, `latest`, exit codes) is in
[operations](operations.md#the-rbak-command-line); what to do about an error, in [troubleshooting](troubleshooting.md).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """The parser's subcommands in the order they were added: (name, parser, one-line help)."""
    found = []
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            found += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return found


def _signature(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{flag}`" for flag in action.option_strings)
    choices = "{" + ",".join(action.choices) + "}" if action.choices else None
    value = f" {action.metavar or choices or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        notes = [n for n in ("required" if action.required and action.option_strings else "",
                             "repeatable" if isinstance(action, argparse._AppendAction) else "") if n]
        helptext = (action.help or "") % {"default": action.default, "prog": parser.prog} if action.help else ""
        rows.append(f"| {_signature(action)} | {_cell(helptext)}{' (' + ', '.join(notes) + ')' if notes else ''} |")
    return ["| argument | what it does |", "|---|---|", *rows] if rows else []


def _section(name: str, parser: argparse.ArgumentParser, summary: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    if parser.description or summary:
        lines += [_cell(parser.description or summary), ""]
    lines += ["```", parser.format_usage().strip(), "```", ""]
    lines += _options(parser)
    if parser.epilog and parser.epilog.startswith("examples:"):
        lines += ["", "Examples:", "", "```sh", *(line.strip() for line in parser.epilog.splitlines()[1:]), "```"]
    lines.append("")
    for sub_name, sub, sub_help in _subcommands(parser):
        lines += _section(sub_name, sub, sub_help, min(level + 1, 4))
    return lines


def render() -> str:
    """docs/cli.md as the parser says it should be."""
    import os

    os.environ["COLUMNS"] = "120"  # usage lines wrap at the terminal's width: fix it, so the file is the same anywhere
    from airflow_rbak.cli.main import build_parser

    parser = build_parser()
    parser.prog = "rbak"
    lines = [HEADER, "## `rbak`", "", _cell(parser.description or ""), "", "```", parser.format_usage().strip(), "```", "",
             *_options(parser), "", _cell(parser.epilog or ""), "", "Commands: " + ", ".join(
                 f"[`{name}`](#{_anchor(sub.prog)})" for name, sub, _ in _subcommands(parser)) + ".", ""]
    for name, sub, summary in _subcommands(parser):
        lines += _section(name, sub, summary, 2)
    return "\n".join(lines).rstrip() + "\n"


def _anchor(prog: str) -> str:
    return prog.replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    text = render()
    if check:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is not what the parser says: run python scripts/cli_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
