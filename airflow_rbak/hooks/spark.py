"""SparkSubmitHook for the RBAK jobs: ``local[*]`` when no Spark connection exists, and the right Python.

The provider's hook falls back to ``yarn`` when its connection is missing; a
backup tool should run out of the box, so this one falls back to a local
master. For a local master it also runs ``spark-submit`` and its Python
workers with the interpreter Airflow runs on (and its ``bin/`` first on
``PATH``), which is where ``airflow_rbak``'s dependencies are installed. For
any other master it ships an environment archive (:mod:`airflow_rbak.segments.shipping`)
that executors run, so they need nothing but Python and Spark.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowNotFoundException

from airflow_rbak.segments.shipping import ENV_ALIAS
from airflow_rbak.storage.credentials import STORAGE_ENV

DEFAULT_MASTER = "local[*]"


class RbakSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook with a local default master and a local Python environment for local masters."""

    def __init__(self, *args: Any, default_master: str = DEFAULT_MASTER,
                 executor_env: Callable[[], str] | None = None, **kwargs: Any) -> None:
        self._default_master = default_master
        super().__init__(*args, **kwargs)
        if self._connection["master"].startswith("local"):
            self._env_vars = {**local_python_env(), **(self._env_vars or {})}
        else:
            if executor_env is not None:
                self._ship_executor_env(executor_env())
            self._executor_credentials = storage_environment()

    def _ship_executor_env(self, archive: str) -> None:
        """Executors of a cluster run the Python of the archive (``spark_env``); the driver runs here, on this one."""
        self._archives = ",".join(filter(None, [self._archives, f"{archive}#{ENV_ALIAS}"]))
        self._conf = {**(self._conf or {}), "spark.pyspark.python": f"./{ENV_ALIAS}/bin/python",
                      "spark.pyspark.driver.python": sys.executable}

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """Submit; executors of a cluster get this task's storage credentials from a private properties file.

        Remote executors do not inherit the task's environment, and ``--conf`` would put the secret on a command
        line, so ``spark.executorEnv.AWS_*`` (``AZURE_STORAGE_*``, ``RBAK_GCS_KEYFILE_JSON``) go in a file only this
        user can read, removed when the job ends (Spark redacts their values in its UI and logs by its
        ``spark.redaction.regex``, which is widened to name the Azure and Google variables unless yours is set).
        """
        credentials = getattr(self, "_executor_credentials", None)
        if not credentials:
            return super().submit(application, **kwargs)
        given = self._properties_file
        fd, path = tempfile.mkstemp(prefix="rbak-spark-", suffix=".conf")  # mode 0600
        try:
            with os.fdopen(fd, "w") as handle:
                base = _base_properties(given)
                handle.write(base)
                if "spark.redaction.regex" not in base and "spark.redaction.regex" not in (self._conf or {}):
                    handle.write(f"spark.redaction.regex {REDACTION_REGEX}\n")
                handle.writelines(f"spark.executorEnv.{name} {_property_value(value)}\n"
                                  for name, value in credentials.items())
            self._properties_file = path
            return super().submit(application, **kwargs)
        finally:
            self._properties_file = given
            os.unlink(path)

    def _resolve_connection(self) -> dict[str, Any]:
        try:
            self.get_connection(self._conn_id)
            found = True
        except AirflowNotFoundException:
            found = False
        connection = super()._resolve_connection()
        if not found:
            self.log.info("No connection %r: using master %s", self._conn_id, self._default_master)
            connection["master"] = self._default_master
        return connection


#: Spark's default redaction pattern, and the storage variables whose names it does not catch.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|AZURE_STORAGE_|RBAK_GCS_KEYFILE"


def _property_value(value: str) -> str:
    """``value`` escaped for a Java properties file, which Spark reads it from (a backslash or newline is special)."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return "\\" + escaped if escaped.startswith(" ") else escaped


def storage_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage settings of this process's environment (a storage connection exports them there) to hand on."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in STORAGE_ENV if environ.get(name)}


def _base_properties(given: str | None) -> str:
    """What ``--properties-file`` replaces: the user's file, else ``spark-defaults.conf`` (both may be absent)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(os.environ.get("SPARK_HOME", ""), "conf")
    path = given or os.path.join(conf_dir, "spark-defaults.conf")
    if not os.path.isfile(path):
        return ""
    with open(path) as handle:
        text = handle.read()
    return text if text.endswith("\n") or not text else text + "\n"


def local_python_env(python: str = sys.executable, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment that makes spark-submit and its workers use ``python`` (unless already set)."""
    given = os.environ if environ is None else environ
    env = {name: given.get(name) or python for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    bin_dir = os.path.dirname(python)
    path = given.get("PATH", "")
    env["PATH"] = path if path.split(os.pathsep)[0] == bin_dir else os.pathsep.join(filter(None, [bin_dir, path]))
    return env
