"""A stand-in ``spark3-submit`` that records how it was started: fast hook and operator tests with no JVM.

It goes first on ``PATH`` under one of the names the Spark provider allows for its binary (``spark3-submit``), so
the venv's real ``spark-submit``, which a local master puts first on ``PATH``, does not hide it. The tests only
read what a real spark-submit would see: its arguments, its environment and the properties file it is given.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BINARY = "spark3-submit"

_SCRIPT = """#!{python}
import json, os, stat, sys
args = sys.argv[1:]
record = {{"args": args, "env": {{name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PATH")}}}}
if "--properties-file" in args:
    path = args[args.index("--properties-file") + 1]
    record["properties_file"] = path
    record["properties"] = open(path).read()
    record["properties_mode"] = stat.S_IMODE(os.stat(path).st_mode)
with open(os.environ["RBAK_FAKE_SPARK_RECORD"], "w") as handle:
    json.dump(record, handle)
print("fake spark-submit done")
sys.exit(int(os.environ.get("RBAK_FAKE_SPARK_EXIT", "0")))
"""


@dataclass(frozen=True)
class FakeSparkSubmit:
    """Where the stand-in writes what it saw; ``options`` select it as the hook's binary."""

    record_path: Path
    options: dict[str, Any]

    def seen(self) -> dict[str, Any]:
        """The last run's arguments, environment and properties file (text, mode)."""
        return json.loads(self.record_path.read_text())

    def option(self, name: str) -> list[str]:
        """Every value given to the spark-submit option ``name`` (``--conf``: ``key=value`` strings)."""
        args = self.seen()["args"]
        return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == name]


def install(folder: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int = 0) -> FakeSparkSubmit:
    """Put the stand-in first on ``PATH``; it exits with ``exit_code``."""
    bin_dir = folder / "fake-spark-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / BINARY
    script.write_text(_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("RBAK_FAKE_SPARK_RECORD", str(folder / "fake-spark-record.json"))
    monkeypatch.setenv("RBAK_FAKE_SPARK_EXIT", str(exit_code))
    return FakeSparkSubmit(folder / "fake-spark-record.json", {"spark_binary": BINARY})
