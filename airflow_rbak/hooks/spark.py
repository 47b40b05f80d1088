"""SparkSubmitHook for the RBAK jobs, built from the provider's documented arguments only.

The provider's hook falls back to ``yarn`` when its connection is missing; a backup tool should run out of the
box, so :class:`RbakSparkSubmitHook` falls back to a local master. :func:`submit_hook` completes the spark-submit
options for the master before it builds the hook. With a local master, ``spark-submit`` and its Python workers run
the interpreter Airflow runs on (its ``bin/`` first on ``PATH``), where ``airflow_rbak``'s dependencies are
installed. With any other master, executors run a shipped environment archive
(:mod:`airflow_rbak.segments.shipping`), so they need nothing but Python and Spark. The storage credentials the task
was handed (a storage connection's) reach the job's driver and executors, on any master, in a private properties
file, never on a command line or in the task's environment.

Only the hook's constructor, ``submit``, ``on_kill`` and the ``get_connection`` it inherits from ``BaseHook`` are
used (``tests/hooks/test_provider_surface.py`` holds that), so any provider release in the range of pyproject.toml
works.
"""

from __future__ import annotations

import os
import site
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_rbak.display import package_logger
from airflow_rbak.segments.shipping import ENV_ALIAS, build_executor_env
from airflow_rbak.storage.credentials import current_credentials, handed_on
from airflow_rbak.storage.keyring import current_keyring

DEFAULT_MASTER = "local[*]"

#: Spark's default redaction pattern, and the storage variables whose names it does not catch.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|AZURE_STORAGE_|RBAK_GCS_KEYFILE|RBAK_ENCRYPTION_KEYS"

log = package_logger(__name__)


class RbakSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook whose missing connection means ``default_master`` (``local[*]``) rather than ``yarn``.

    Every other argument is the provider's own (``conf``, ``py_files``, ``archives``, ``env_vars``,
    ``properties_file``, ``application_args``, executor settings...).
    """

    def __init__(self, *, default_master: str = DEFAULT_MASTER, look_up: bool = True, **kwargs: Any) -> None:
        self.default_master = default_master
        self.look_up = look_up
        super().__init__(**kwargs)

    # An instance method (BaseHook's is a classmethod), so that each hook falls back to its own master: the
    # provider's hook looks its connection up through ``self`` (on construction, and for YARN's status).
    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
        """The stored connection ``conn_id``, else (or without ``look_up``) a ``spark`` connection to
        :attr:`default_master`."""
        return (stored_connection(conn_id) if self.look_up else None) or local_connection(conn_id, self.default_master)


def stored_connection(conn_id: str) -> Connection | None:
    """The connection ``conn_id`` as Airflow has it (environment, secrets backend or database); None if none."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def local_connection(conn_id: str, master: str) -> Connection:
    """An unstored ``spark`` connection to ``master``: what the hook reads when ``conn_id`` does not exist."""
    return Connection(conn_id=conn_id, conn_type="spark", host=master)


@contextmanager
def submit_hook(conn_id: str, options: Mapping[str, Any], *, default_master: str = DEFAULT_MASTER,
                executor_env: Callable[[], str] | None = None,
                master: str | None = None) -> Iterator[RbakSparkSubmitHook]:
    """A hook for one submit to ``conn_id``'s master, with ``options`` (the hook's arguments) completed for it.

    ``master`` given (a command line names it): that master, and no connection is looked up.

    Local master: ``env_vars`` run spark-submit and its workers on this interpreter, which otherwise inherit the
    task's environment. Any other master: the archive ``executor_env()`` builds (if given) becomes the executors'
    Python. The credentials the task was handed (any master), and on a cluster those of the task's environment
    otherwise, go to the job in a private properties file that is removed when the block ends.
    """
    connection = local_connection(conn_id, master) if master else stored_connection(conn_id)
    if connection is None:
        log.info("No connection %r: Spark master %s", conn_id, default_master)
    handed = current_credentials()
    if ((connection.host if connection else default_master) or "").startswith("local"):
        settings, credentials = local_options(options), handed.environment() if handed is not None else {}
    else:
        settings = cluster_options(options, executor_env() if executor_env is not None else None)
        credentials = handed_on()
    keyring = current_keyring()  # the location's keys travel as its credentials do: the file, never a command line
    credentials = {**credentials, **(keyring.environment() if keyring is not None else {})}
    with credentials_properties_file(settings.get("properties_file"), settings.get("conf") or {}, credentials) as path:
        yield RbakSparkSubmitHook(conn_id=conn_id, default_master=master or default_master, look_up=master is None,
                                  **{**settings, "properties_file": path})


def submit_application(application: str, application_args: Sequence[str], master: str) -> None:
    """Run ``application`` with spark-submit on ``master`` through the provider's hook, as the operators run their
    jobs, for a caller outside a task (``rbak search --placement spark``); the provider's ``AirflowException`` says
    why it failed. On a cluster master the executors get the environment archive."""
    options = {"name": "rbak-search", "application_args": list(application_args)}
    with submit_hook("spark_default", options, master=master, executor_env=build_executor_env) as hook:
        hook.submit(application)


def local_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with spark-submit and its Python workers on this interpreter and this ``airflow_rbak``
    (``env_vars`` given win)."""
    return {**options, "env_vars": {**local_python_env(), **checkout_path(), **(options.get("env_vars") or {})}}


def checkout_path(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``PYTHONPATH`` led by the folder this ``airflow_rbak`` was imported from, where that is a checkout rather than
    an installation (no ``site-packages``): the job then runs the task's own code, not another copy installed here.
    Empty for an installed package, whose folder must not come before the standard library."""
    folder = str(Path(__file__).resolve().parents[2])
    given = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    if folder in site.getsitepackages() or Path(folder).name in ("site-packages", "dist-packages"):
        return {}
    return {"PYTHONPATH": os.pathsep.join(filter(None, [folder, given]))}


def cluster_options(options: Mapping[str, Any], archive: str | None) -> dict[str, Any]:
    """``options`` with executors on the Python of the environment ``archive``; the driver runs here, on this one.

    No archive (the cluster has ``airflow_rbak`` installed): ``options`` unchanged.
    """
    if archive is None:
        return dict(options)
    archives = ",".join(filter(None, [options.get("archives"), f"{archive}#{ENV_ALIAS}"]))
    conf = {**(options.get("conf") or {}), "spark.pyspark.python": f"./{ENV_ALIAS}/bin/python",
            "spark.pyspark.driver.python": sys.executable}
    return {**options, "archives": archives, "conf": conf}


@contextmanager
def credentials_properties_file(given: str | None, conf: Mapping[str, Any],
                                credentials: Mapping[str, str]) -> Iterator[str | None]:
    """The properties file to submit with: ``given``, or with ``credentials`` a private copy that adds them.

    Remote executors do not inherit the task's environment, credentials handed to the task are not in it, and
    ``--conf`` would put the secret on a command line, so ``spark.executorEnv.AWS_*`` (``AZURE_STORAGE_*``,
    ``RBAK_GCS_KEYFILE_JSON``) go in a file only this user can read, removed when the block ends; the job's driver
    takes them from there too (``segments/jobs/common.py``). ``--properties-file`` replaces ``spark-defaults.conf``,
    so the copy starts with the given file, else that one.
    """
    if not credentials:
        yield given
        return
    fd, path = tempfile.mkstemp(prefix="rbak-spark-", suffix=".conf")  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(executor_properties(_base_properties(given), conf, credentials))
        yield path
    finally:
        os.unlink(path)


def executor_properties(base: str, conf: Mapping[str, Any], credentials: Mapping[str, str]) -> str:
    """``base`` plus each credential as ``spark.executorEnv.NAME``, and the redaction pattern unless one is set.

    Spark redacts the values in its UI and logs by ``spark.redaction.regex``, widened here to name the Azure and
    Google variables.
    """
    lines = [base]
    if "spark.redaction.regex" not in base and "spark.redaction.regex" not in conf:
        lines.append(f"spark.redaction.regex {REDACTION_REGEX}\n")
    lines += [f"spark.executorEnv.{name} {_property_value(value)}\n" for name, value in credentials.items()]
    return "".join(lines)


def _property_value(value: str) -> str:
    """``value`` escaped for a Java properties file, which Spark reads it from (a backslash or newline is special)."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return "\\" + escaped if escaped.startswith(" ") else escaped


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
