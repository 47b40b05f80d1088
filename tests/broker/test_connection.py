"""RabbitMQConnection: URL parsing, validation at construction, and a password that never shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_rbak.broker.connection import BrokerAddress, RabbitMQConnection, nodes_from
from airflow_rbak.exceptions import ConfigurationError

SECRET = "s3cr3t/p@ss"


def test_url_gives_every_field():
    conn = RabbitMQConnection.from_url(
        "amqp://backup:s3cr3t%2Fp%40ss@mq.example:5673/?management_port=15673&stream_port=5553"
        "&heartbeat=30&timeout=2.5&management_url=https://mq.example/rabbitmq/"
    )

    assert (conn.host, conn.amqp_port, conn.management_port, conn.stream_port) == ("mq.example", 5673, 15673, 5553)
    assert (conn.username, conn.password) == ("backup", SECRET)
    assert (conn.heartbeat, conn.timeout, conn.tls) == (30, 2.5, False)
    assert conn.management_base_url == "https://mq.example/rabbitmq"


def test_amqps_url_turns_tls_on_with_its_default_port_and_https_management():
    conn = RabbitMQConnection.from_url("amqps://u:p@mq.example/?tls_verify=false&ca_file=/etc/ca.pem")

    assert (conn.tls, conn.amqp_port, conn.tls_verify, conn.ca_file) == (True, 5671, False, "/etc/ca.pem")
    assert conn.management_base_url == "https://mq.example:15672"


def test_url_without_credentials_keeps_the_defaults_and_overrides_win():
    conn = RabbitMQConnection.from_url("amqp://localhost", stream_port=6000)

    assert (conn.username, conn.password, conn.amqp_port, conn.stream_port) == ("guest", "guest", 5672, 6000)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h/", "amqp:// or amqps://"),
        ("amqp://h/?management_port=0", "management_port must be 1-65535"),
        ("amqp://h/?stream_port=abc", "stream_port must be a port number"),
        ("amqp://h/?management_url=ftp://x", "management_url must start with"),
        ("amqp://h/?cert_file=/c.pem", "cert_file and key_file go together"),
        ("amqp://h/?timeout=0", "timeout must be > 0"),
    ],
)
def test_bad_settings_are_refused_at_construction(url, message):
    with pytest.raises(ConfigurationError, match=message):
        RabbitMQConnection.from_url(url)


@pytest.mark.parametrize("host", ["", "a/b", "user@host", "two words"])
def test_a_host_must_be_a_bare_name(host):
    with pytest.raises(ConfigurationError, match="host must be"):
        RabbitMQConnection(host=host)


def test_password_never_appears_in_repr_str_or_errors():
    conn = RabbitMQConnection.from_url(f"amqp://backup:{SECRET.replace('/', '%2F').replace('@', '%40')}@mq.example/")

    assert SECRET not in repr(conn) and SECRET not in str(conn)
    assert "password='***'" in repr(conn)
    with pytest.raises(ConfigurationError) as refused:
        replace(conn, amqp_port=70000)
    assert SECRET not in str(refused.value)


def test_a_replaced_connection_is_validated_again_and_keeps_the_rest():
    conn = replace(RabbitMQConnection(username="u", password=SECRET), host="mq2")

    assert (conn.host, conn.username, conn.password) == ("mq2", "u", SECRET)


def test_ssl_context_only_with_tls_and_verification_can_be_turned_off():
    assert RabbitMQConnection().ssl_context() is None
    context = RabbitMQConnection(tls=True, tls_verify=False).ssl_context()
    assert context is not None and context.check_hostname is False


def test_pika_parameters_carry_vhost_credentials_and_tls():
    params = RabbitMQConnection(host="mq", amqp_port=5671, username="u", password=SECRET, tls=True).pika_parameters("prod")

    assert (params.host, params.port, params.virtual_host) == ("mq", 5671, "prod")
    assert (params.credentials.username, params.credentials.password) == ("u", SECRET)
    assert params.ssl_options is not None
    assert SECRET not in repr(params)


# --- A cluster's nodes ---------------------------------------------------------------------------------------------


def test_a_url_lists_the_clusters_other_nodes_with_its_own_management_and_stream_ports():
    conn = RabbitMQConnection.from_url(f"amqp://u:{SECRET.replace('/', '%2F').replace('@', '%40')}@mq1:5673/"
                                       "?management_port=15673&stream_port=5553&hosts=mq2,mq3:5674,[fd00::3]:5675")

    assert conn.nodes == (BrokerAddress("mq1", 5673, 15673, 5553), BrokerAddress("mq2", 5673, 15673, 5553),
                          BrokerAddress("mq3", 5674, 15673, 5553), BrokerAddress("fd00::3", 5675, 15673, 5553))
    assert conn.addresses == "mq1:5673, mq2:5673, mq3:5674, fd00::3:5675"
    assert conn.management_base_urls[:2] == ("http://mq1:15673", "http://mq2:15673")
    assert [(p.host, p.port) for p in conn.pika_parameters_all("v")] == [("mq1", 5673), ("mq2", 5673), ("mq3", 5674),
                                                                           ("fd00::3", 5675)]
    assert "mq3:5674" in repr(conn) and SECRET not in repr(conn)


def test_the_first_node_listed_again_is_tried_once_and_a_management_url_stands_for_every_node():
    conn = RabbitMQConnection(host="mq1", more_nodes=nodes_from(["mq1:5672", {"host": "mq2", "management_port": 8080}],
                                                                amqp_port=5672, management_port=15672, stream_port=5552),
                              management_url="https://lb.example/rabbitmq")

    assert conn.nodes == (BrokerAddress("mq1"), BrokerAddress("mq2", management_port=8080))
    assert conn.management_base_urls == ("https://lb.example/rabbitmq",)
    assert conn.at(conn.nodes[1]).more_nodes == () and conn.at(conn.nodes[1]).password == conn.password


@pytest.mark.parametrize(("hosts", "message"), [
    ("mq2:99999", "hosts entry 1's port must be 1-65535"),
    ([{"host": "mq2", "password": "x"}], "unknown keys"),
    (["mq2", 5], "hosts entry 2 must be"),
    ([{"amqp_port": 5672}], "host must be"),
    (",".join(f"mq{i}" for i in range(20)), "at most 16"),
    ("[fd00::1]x", "IPv6"),
])
def test_a_bad_node_list_is_refused_naming_the_entry_by_position(hosts, message):
    with pytest.raises(ConfigurationError, match=message):
        nodes_from(hosts, amqp_port=5672, management_port=15672, stream_port=5552)
