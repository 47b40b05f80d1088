"""SparkSubmitHook for the RBAK jobs: ``local[*]`` when no Spark connection exists, and the right Python.

The provider's hook falls back to ``yarn`` when its connection is missing; a
backup tool should run out of the box, so this one falls back to a local
master. For a local master it also runs ``spark-submit`` and its Python
workers with the interpreter Airflow runs on (and its ``bin/`` first on
``PATH``), which is where ``airflow_rbak``'s dependencies are installed. For
any other master it ships an environment archive (:mod:`airflow_rbak.spark_env`)
that executors run, so they need nothing but Python and Spark.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowNotFoundException

from airflow_rbak.spark_env import ENV_ALIAS

DEFAULT_MASTER = "local[*]"


class RbakSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook with a local default master and a local Python environment for local masters."""

    def __init__(self, *args: Any, default_master: str = DEFAULT_MASTER,
                 executor_env: Callable[[], str] | None = None, **kwargs: Any) -> None:
        self._default_master = default_master
        super().__init__(*args, **kwargs)
        if self._connection["master"].startswith("local"):
            self._env_vars = {**local_python_env(), **(self._env_vars or {})}
        elif executor_env is not None:
            self._ship_executor_env(executor_env())

    def _ship_executor_env(self, archive: str) -> None:
        """Executors of a cluster run the Python of the archive (``spark_env``); the driver runs here, on this one."""
        self._archives = ",".join(filter(None, [self._archives, f"{archive}#{ENV_ALIAS}"]))
        self._conf = {**(self._conf or {}), "spark.pyspark.python": f"./{ENV_ALIAS}/bin/python",
                      "spark.pyspark.driver.python": sys.executable}

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


def local_python_env(python: str = sys.executable, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment that makes spark-submit and its workers use ``python`` (unless already set)."""
    environ = os.environ if environ is None else environ
    env = {name: environ.get(name) or python for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    bin_dir = os.path.dirname(python)
    path = environ.get("PATH", "")
    env["PATH"] = path if path.split(os.pathsep)[0] == bin_dir else os.pathsep.join(filter(None, [bin_dir, path]))
    return env
