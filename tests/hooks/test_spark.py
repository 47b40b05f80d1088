"""What a cluster's executors are handed: every cloud's storage variables, escaped as a Java properties file needs."""

from __future__ import annotations

import re

import pytest

from airflow_rbak.hooks.spark import REDACTION_REGEX, _property_value, storage_environment

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

    assert storage_environment(environ) == {k: environ[k] for k in
                                            ("AWS_ACCESS_KEY_ID", "AZURE_STORAGE_CONNECTION_STRING", "RBAK_GCS_KEYFILE_JSON")}


@pytest.mark.parametrize("value", ['{"private_key":"-----BEGIN\\nKEY\\n-----END\\n"}', " leading space",
                                   "tab\there\nnew line", "AccountKey=ab+/c==;EndpointSuffix=core.windows.net"])
def test_a_value_is_one_line_that_reads_back_unchanged(value):
    written = _property_value(value)

    assert "\n" not in written and java_properties_value(written) == value


def test_the_redaction_pattern_names_the_variables_spark_would_show():
    pattern = re.compile(REDACTION_REGEX)

    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "RBAK_GCS_KEYFILE_JSON", "AWS_SECRET_ACCESS_KEY"):
        assert pattern.search(f"spark.executorEnv.{name}"), name
