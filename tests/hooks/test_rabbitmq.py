"""RabbitMQHook: an Airflow connection (here from AIRFLOW_CONN_* JSON) becomes validated RabbitMQConnection settings."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.hooks.rabbitmq import RabbitMQHook, connection_from_airflow
from airflow_rbak.provider import CONN_FIELDS, get_provider_info

SECRET = "n0t-for-logs/9"


@pytest.fixture
def airflow_connection(monkeypatch):
    """Set ``AIRFLOW_CONN_<ID>`` to a JSON connection and return a function that does it."""

    def define(conn_id: str = "rabbitmq_default", **fields: object) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "rabbitmq", **fields}))

    return define


def test_get_conn_builds_every_setting_from_the_airflow_connection(airflow_connection):
    airflow_connection(
        host="mq.example", port=5673, login="backup", password=SECRET, schema="prod",
        extra={"management_port": 15673, "stream_port": "5553", "management_url": "https://mq.example/rabbitmq",
               "tls": "true", "tls_verify": False, "ca_file": "/etc/ca.pem", "heartbeat": 30, "timeout": "2.5"},
    )
    hook = RabbitMQHook()

    conn = hook.get_conn()

    assert isinstance(conn, RabbitMQConnection)
    assert (conn.host, conn.amqp_port, conn.management_port, conn.stream_port) == ("mq.example", 5673, 15673, 5553)
    assert (conn.username, conn.password, conn.heartbeat, conn.timeout) == ("backup", SECRET, 30, 2.5)
    assert (conn.tls, conn.tls_verify, conn.ca_file) == (True, False, "/etc/ca.pem")
    assert conn.management_base_url == "https://mq.example/rabbitmq"
    assert hook.vhost == "prod"


def test_a_named_connection_with_only_a_host_gets_the_defaults(airflow_connection):
    airflow_connection("mq_backup", host="10.0.0.5")

    conn = RabbitMQHook(rabbitmq_conn_id="mq_backup").get_conn()

    assert (conn.amqp_port, conn.management_port, conn.stream_port, conn.username) == (5672, 15672, 5552, "guest")
    assert conn.management_base_url == "http://10.0.0.5:15672"


def test_tls_without_a_port_uses_amqps_port_and_prefixed_extras_are_read():
    conn = connection_from_airflow("mq", None, "u", "p", {"extra__rabbitmq__tls": True, "extra__rabbitmq__stream_port": 6552})

    assert (conn.tls, conn.amqp_port, conn.stream_port) == (True, 5671, 6552)


def test_the_password_is_never_logged_nor_shown(airflow_connection, caplog, capsys):
    airflow_connection(host="mq.example", login="backup", password=SECRET)
    hook = RabbitMQHook()

    with caplog.at_level(logging.DEBUG):
        conn = hook.get_conn()

    logged = caplog.text + "".join(capsys.readouterr())  # Airflow 3 logs through structlog to stdout
    assert "mq.example" in logged  # it did log which broker it uses
    assert SECRET not in logged and SECRET not in repr(conn) and SECRET not in str(conn)


def test_an_unusable_connection_names_the_connection_and_hides_the_password(airflow_connection):
    airflow_connection("bad_mq", host="mq.example", password=SECRET, extra={"management_port": 99999})

    with pytest.raises(ConfigurationError, match="'bad_mq'.*management_port must be 1-65535") as refused:
        RabbitMQHook(rabbitmq_conn_id="bad_mq").get_conn()
    assert SECRET not in str(refused.value)


def test_identity_for_airflow():
    assert (RabbitMQHook.conn_name_attr, RabbitMQHook.default_conn_name) == ("rabbitmq_conn_id", "rabbitmq_default")
    assert (RabbitMQHook.conn_type, RabbitMQHook.hook_name) == ("rabbitmq", "RabbitMQ")
    (info,) = get_provider_info()["connection-types"]  # what Airflow reads
    assert info["hook-class-name"] == "airflow_rbak.hooks.rabbitmq.RabbitMQHook"
    assert info["conn-fields"] is CONN_FIELDS


def test_form_offers_management_and_stream_ports_and_tls_options():
    assert {"management_port", "stream_port", "management_url", "tls", "tls_verify", "ca_file", "cert_file", "key_file"} <= set(CONN_FIELDS)
    assert CONN_FIELDS["management_port"]["schema"]["default"] == 15672
    assert CONN_FIELDS["stream_port"]["schema"]["default"] == 5552


def test_ui_behaviour_relabels_the_standard_fields_and_gives_placeholders():
    (info,) = get_provider_info()["connection-types"]
    behaviour = info["ui-field-behaviour"]

    assert behaviour["relabeling"] == {"port": "AMQP port", "login": "Username", "schema": "Default vhost"}
    assert behaviour["placeholders"]["schema"] == "/"
    assert behaviour["placeholders"]["management_port"] == "15672"
    assert "password" not in behaviour["hidden-fields"]


def test_the_hosts_extra_names_the_clusters_other_nodes_as_a_list_or_a_comma_separated_text():
    listed = connection_from_airflow("mq1", 5672, "u", SECRET, {"hosts": ["mq2:5672", {"host": "mq3", "stream_port": 6552}],
                                                                "management_port": 15673})
    written = connection_from_airflow("mq1", None, "u", SECRET, {"extra__rabbitmq__hosts": "mq1, mq2:5673"})

    assert [(n.host, n.amqp_port, n.management_port, n.stream_port) for n in listed.nodes] == [
        ("mq1", 5672, 15673, 5552), ("mq2", 5672, 15673, 5552), ("mq3", 5672, 15673, 6552)]
    assert [str(n) for n in written.nodes] == ["mq1:5672", "mq2:5673"]
    with pytest.raises(ConfigurationError, match="hosts entry 1's port"):
        connection_from_airflow("mq1", None, "u", SECRET, {"hosts": "mq2:x"})
