"""docs/cli.md is the ``rbak`` parser written out (scripts/cli_reference.py): a command or option added, changed or
removed in ``cli/main.py`` without regenerating the page fails here."""

from __future__ import annotations

import importlib.util
import re

from tests.dags.airflow_env import REPO

REGENERATE = "python scripts/cli_reference.py"


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_reference_is_what_the_parser_says():
    # Given the page as committed, When it is generated again from the parser, Then nothing differs
    assert (REPO / "docs" / "cli.md").read_text() == _generator().render(), (
        f"docs/cli.md is out of date with airflow_rbak/cli/main.py: run `{REGENERATE}` and commit docs/cli.md")


def test_the_reference_holds_every_command_and_help_only_option():
    from airflow_rbak.cli.main import build_parser

    page = (REPO / "docs" / "cli.md").read_text()
    commands = set(re.findall(r"^#+ `(rbak[^`]*)`$", page, re.M))
    # every subcommand's parser, walked as the generator does, has its section
    assert {prog for prog, _ in _walk(build_parser(), "rbak")} <= commands
    for option in ("--replace", "--workers N", "--include-users", "--max-decompressed-bytes N", "--wait SECONDS"):
        assert f"`{option}`" in page, option


def _walk(parser, prog):
    yield prog, parser
    for name, sub, _ in _generator()._subcommands(parser):
        yield from _walk(sub, f"{prog} {name}")
