"""Write docs/operations.md's version tables from the one table of version rules (``airflow_rbak/broker/versions.py``).

    python scripts/version_table.py           # regenerate the tables (after adding or changing a rule)
    python scripts/version_table.py --check   # exit 1 when docs/operations.md's tables are not the generated ones

Each table sits between a pair of markers (``<!-- version-table:PART -->`` ... ``<!-- /version-table:PART -->``):
``backup`` under "What each RabbitMQ version changes for a backup", ``restore`` under "From RabbitMQ 3.10 to 4.x".
A column per series the tests run on; a cell says "the same" where the version is in the previous column's step, and
"from X.Y:" where a step starts between two measured series. tests/broker/test_versions.py runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "operations.md"
sys.path.insert(0, str(REPO))

from airflow_rbak.broker.versions import ANY, MEASURED_SERIES, VERSION_RULES, VersionRule, series_text  # noqa: E402

#: The column that says what airflow-rbak does, by table.
CODE_COLUMN = {"backup": "what a backup does", "restore": "what a restore does"}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def series_cells(rule: VersionRule) -> list[str]:
    """What the broker does on each measured series, as the table's cells."""
    cells, previous = [], None
    for series in MEASURED_SERIES:
        step = rule.step(series)
        if step is previous:
            cells.append("the same")
        else:
            starts_between = step.since not in (ANY, series)
            cells.append(f"from {series_text(step.since)}: {step.broker}" if starts_between else step.broker)
        previous = step
    return cells


def heading(part: str) -> str:
    """The table's header row: the one a reader (and tests/test_docs_named_tests.py) finds it by."""
    columns = ["what changes", *(series_text(s) for s in MEASURED_SERIES), CODE_COLUMN[part], "shown by"]
    return "| " + " | ".join(columns) + " |"


def table(part: str) -> str:
    """The Markdown table of the rules listed in ``part``'s table."""
    lines = [heading(part), "|" + "---|" * (len(MEASURED_SERIES) + 3)]
    for rule in VERSION_RULES:
        if part not in rule.parts:
            continue
        shown = ", ".join(f"`{node}`" for node in rule.shown_by)
        cells = [rule.change, *series_cells(rule), rule.code, shown]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def begin(part: str) -> str:
    return (f"<!-- version-table:{part}: generated from airflow_rbak/broker/versions.py by "
            "scripts/version_table.py; do not edit by hand -->")


def end(part: str) -> str:
    return f"<!-- /version-table:{part} -->"


def render(document: str) -> str:
    """``document`` with every marked table replaced by the generated one; a missing marker is an error."""
    for part in CODE_COLUMN:
        pattern = re.compile(re.escape(begin(part)) + r"\n.*?" + re.escape(end(part)), re.S)
        if len(pattern.findall(document)) != 1:
            raise SystemExit(f"{OUTPUT}: expected one pair of markers for the {part} table")
        generated = f"{begin(part)}\n{table(part)}\n{end(part)}"
        document = pattern.sub(lambda _, text=generated: text, document)
    return document


def main(argv: list[str]) -> int:
    current = OUTPUT.read_text()
    wanted = render(current)
    if "--check" in argv:
        if current != wanted:
            print(f"{OUTPUT.relative_to(REPO)} is out of date: run python scripts/version_table.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
