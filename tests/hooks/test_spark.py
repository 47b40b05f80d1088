"""RbakSparkSubmitHook and the options it is built with: a local master with this Python when no connection exists;
for a cluster, the executor environment archive and the storage credentials in a private properties file (every
cloud's variables, escaped as a Java properties file needs), never on a command line.

spark-submit is a stand-in here (``tests/fake_spark_submit.py``); ``tests/operators/test_spark_operators.py`` and
``tests/spark_jobs/test_cluster_executors.py`` run the real one."""

from __future__ import annotations

import json
import os
import re
import sys
import uuid

import pytest

from airflow_rbak.hooks.spark import (
    REDACTION_REGEX,
    RbakSparkSubmitHook,
    _property_value,
    executor_properties,
    local_python_env,
    submit_hook,
)
from airflow_rbak.storage.credentials import handed_on
from airflow_rbak.storage.keyring import new_key_text, parse_keyring, storage_keyring
from tests import fake_spark_submit

# java.util.Properties.load: a backslash escapes the next character (\n, \r, \t, \f name controls), and leading
# white space of a value is dropped unless escaped.
_JAVA_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}


def java_properties_value(written: str) -> str:
    """The value ``Properties.load`` reads from ``written`` (the text after the key's separator)."""
    text, out, i = written.lstrip(" \t\f"), [], 0
    while i < len(text):
        if text[i] == "\\":
            i += 1
            out.append(_JAVA_ESCAPES.get(text[i], text[i]))
        else:
            out.append(text[i])
        i += 1
    return "".join(out)


def test_the_azure_and_google_variables_are_handed_on_with_the_aws_ones():
    environ = {"AWS_ACCESS_KEY_ID": "a", "AZURE_STORAGE_CONNECTION_STRING": "AccountName=x;AccountKey=k",
               "RBAK_GCS_KEYFILE_JSON": '{"type":"service_account"}', "HOME": "/root", "AZURE_STORAGE_KEY": ""}

    assert handed_on(environ) == {k: environ[k] for k in
                                            ("AWS_ACCESS_KEY_ID", "AZURE_STORAGE_CONNECTION_STRING", "RBAK_GCS_KEYFILE_JSON")}


@pytest.mark.parametrize("value", ['{"private_key":"-----BEGIN\\nKEY\\n-----END\\n"}', " leading space",
                                   "tab\there\nnew line", "AccountKey=ab+/c==;EndpointSuffix=core.windows.net"])
def test_a_value_is_one_line_that_reads_back_unchanged(value):
    written = _property_value(value)

    assert "\n" not in written and java_properties_value(written) == value


def test_the_redaction_pattern_names_the_variables_spark_would_show():
    pattern = re.compile(REDACTION_REGEX)

    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "RBAK_GCS_KEYFILE_JSON", "AWS_SECRET_ACCESS_KEY",
                 "RBAK_ENCRYPTION_KEYS"):
        assert pattern.search(f"spark.executorEnv.{name}"), name


def test_without_a_connection_the_master_is_local_and_python_is_this_one(tmp_path, monkeypatch):
    # Given no stored connection
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    fake = fake_spark_submit.install(tmp_path, monkeypatch)

    # When a job is submitted through the hook
    with submit_hook("spark_default", {**fake.options, "application_args": ["--x"]}) as hook:
        hook.submit("job.py")

    # Then spark-submit runs a local master, with this interpreter for itself and its workers
    assert fake.option("--master") == ["local[*]"] and fake.seen()["args"][-2:] == ["job.py", "--x"]
    assert fake.seen()["env"]["PYSPARK_PYTHON"] in (sys.executable, os.environ.get("PYSPARK_PYTHON"))
    assert fake.seen()["env"]["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_each_hook_falls_back_to_its_own_master(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_RBAK_NO_SUCH_SPARK", raising=False)

    hooks = [RbakSparkSubmitHook(conn_id="rbak_no_such_spark", default_master=m) for m in ("local[2]", "local[3]")]

    assert [h.get_connection("rbak_no_such_spark").host for h in hooks] == ["local[2]", "local[3]"]


def test_a_configured_cluster_gets_the_executor_environment_and_no_local_python(tmp_path, monkeypatch):
    # Given a stored connection to a standalone cluster
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://cluster", "port": 7077}')
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    fake = fake_spark_submit.install(tmp_path, monkeypatch)

    # When a job is submitted with an executor environment archive and options of its own
    options = {**fake.options, "archives": "extra.zip#extra", "conf": {"spark.executor.cores": "1"}}
    with submit_hook("spark_default", options, executor_env=lambda: "/cache/env.tar.gz") as hook:
        hook.submit("job.py")

    # Then the connection's master is used; executors run the archive's Python, the driver this one
    assert fake.option("--master") == ["spark://cluster:7077"]
    assert fake.option("--archives") == ["extra.zip#extra,/cache/env.tar.gz#rbakenv"]
    assert {"spark.executor.cores=1", "spark.pyspark.python=./rbakenv/bin/python",
            f"spark.pyspark.driver.python={sys.executable}"} <= set(fake.option("--conf"))
    assert fake.seen()["env"]["PYSPARK_PYTHON"] is None


def test_cluster_executors_get_the_credentials_from_a_private_file_never_a_command_line(tmp_path, monkeypatch):
    # Given a cluster connection, a task whose environment holds storage credentials, and a properties file of its own
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://cluster:7077"}')
    secret = f"rbak-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    given = tmp_path / "mine.conf"
    given.write_text("spark.ui.enabled false")
    fake = fake_spark_submit.install(tmp_path, monkeypatch)

    # When a job is submitted
    with submit_hook("spark_default", {**fake.options, "properties_file": str(given)}) as hook:
        hook.submit("job.py")
    seen = fake.seen()

    # Then the secret is on no argument; spark-submit read it from a file only this user could read, which starts
    # with the given file, names the variables to redact, and is gone once the job is over
    assert [arg for arg in seen["args"] if secret in arg] == []
    assert seen["properties_mode"] == 0o600 and seen["properties_file"] != str(given)
    assert seen["properties"].splitlines()[0] == "spark.ui.enabled false"
    assert f"spark.executorEnv.AWS_SECRET_ACCESS_KEY {secret}" in seen["properties"].splitlines()
    assert f"spark.redaction.regex {REDACTION_REGEX}" in seen["properties"].splitlines()
    assert not os.path.exists(seen["properties_file"]) and given.read_text() == "spark.ui.enabled false"


def test_a_local_master_inherits_the_credentials_and_gets_no_properties_file(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    fake = fake_spark_submit.install(tmp_path, monkeypatch)

    with submit_hook("spark_default", fake.options, default_master="local[2]") as hook:
        hook.submit("job.py")

    assert fake.option("--master") == ["local[2]"] and "properties" not in fake.seen()


def test_your_redaction_pattern_is_kept():
    written = executor_properties("spark.redaction.regex mine\n", {}, {"AWS_SECRET_ACCESS_KEY": "s"})

    assert written == "spark.redaction.regex mine\nspark.executorEnv.AWS_SECRET_ACCESS_KEY s\n"
    assert "spark.redaction.regex" not in executor_properties("", {"spark.redaction.regex": "x"}, {"A": "b"})


def test_local_python_env_puts_the_interpreter_first():
    env = local_python_env("/opt/venv/bin/python", {"PATH": "/usr/bin"})

    assert env == {"PYSPARK_PYTHON": "/opt/venv/bin/python", "PYSPARK_DRIVER_PYTHON": "/opt/venv/bin/python",
                   "PATH": "/opt/venv/bin:/usr/bin"}


@pytest.mark.parametrize("master", ["local[2]", "spark://cluster:7077"])
def test_the_tasks_encryption_keys_reach_the_job_in_the_private_file_on_any_master(tmp_path, monkeypatch, master):
    # Given a task whose storage was handed encryption keys (not in its environment)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": master}))
    monkeypatch.delenv("RBAK_ENCRYPTION_KEYS", raising=False)
    ring = parse_keyring(new_key_text("k1"))
    fake = fake_spark_submit.install(tmp_path, monkeypatch)

    # When a job is submitted
    with storage_keyring(ring), submit_hook("spark_default", fake.options) as hook:
        hook.submit("job.py")
    seen = fake.seen()

    # Then the keys are in the private properties file, redacted by name, and on no argument
    assert f"spark.executorEnv.RBAK_ENCRYPTION_KEYS {ring.to_text()}" in seen["properties"].splitlines()
    assert seen["properties_mode"] == 0o600 and re.search(REDACTION_REGEX, "spark.executorEnv.RBAK_ENCRYPTION_KEYS")
    assert [arg for arg in seen["args"] if ring.to_text().split(":")[1] in arg] == []
