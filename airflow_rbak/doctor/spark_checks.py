"""Where a local Spark step runs: ``spark-submit`` on the ``PATH`` it runs with, and Java 17 or later (Spark 4)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from airflow_rbak.doctor.deployment import Deployment
from airflow_rbak.doctor.findings import Finding, failure, ok

MIN_JAVA = 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def spark_findings(d: Deployment) -> list[Finding]:
    """Nothing when no Spark step is checked; a cluster master is the cluster's business."""
    master = d.spark_master
    if master is None:
        return []
    if not master.startswith("local"):
        return [ok("spark", f"connection {d.spark_conn_id!r} submits to {master}: Java there is the cluster's; "
                   "spark-submit runs here, " + _submit_state(d))]
    found = []
    submit = shutil.which("spark-submit", path=d.search_path)
    if submit is None:
        found.append(failure("spark", f"connection {d.spark_conn_id!r} runs Spark locally ({master}) and spark-submit "
                             "is not on the PATH the Spark steps run with", "pip install pyspark into Airflow's "
                             "environment (airflow-rbak[spark]), or put Spark's bin folder on PATH"))
    java = java_finding(d)
    if submit is not None and java.status.value == "ok":
        return [ok("spark", f"{master}: spark-submit {submit}; {java.detail}")]
    return found + ([java] if java.status.value != "ok" else [])


def _submit_state(d: Deployment) -> str:
    submit = shutil.which("spark-submit", path=d.search_path)
    return f"found at {submit}" if submit else "and is not on PATH (pip install pyspark)"


def java_finding(d: Deployment) -> Finding:
    """``java -version`` of ``$JAVA_HOME/bin/java``, else the ``java`` on the search path."""
    java = os.path.join(d.java_home, "bin", "java") if d.java_home else shutil.which("java", path=d.search_path)
    if not java or not os.access(java, os.X_OK):
        return failure("java", f"no java {'in JAVA_HOME ' + str(d.java_home) if d.java_home else 'on PATH'}: local "
                       "Spark needs Java", f"install Java {MIN_JAVA} or later (e.g. apt-get install "
                       "openjdk-17-jre-headless), or set JAVA_HOME")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return failure("java", f"{java} -version failed: {type(exc).__name__}", f"install Java {MIN_JAVA} or later")
    version = java_major(done.stderr + done.stdout)
    if version is None or version < MIN_JAVA:
        return failure("java", f"{java} is Java {version or 'of an unknown version'}: Spark 4 needs {MIN_JAVA} or later",
                       f"install Java {MIN_JAVA} or later and point JAVA_HOME at it")
    return ok("java", f"Java {version} ({java})")


def java_major(text: str) -> int | None:
    """The major version in ``java -version``'s output: ``"17.0.15"`` is 17, ``"1.8.0_392"`` is 8."""
    match = _VERSION.search(text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major
