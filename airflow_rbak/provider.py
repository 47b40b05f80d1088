"""Airflow's provider entry point for airflow-rbak (named in pyproject's ``apache_airflow_provider``).

Airflow imports this on every start-up, before any DAG: it must stay free of
heavy imports (plain data only: it holds the rabbitmq connection form's tables,
which the hook imports from here), and it must exist, or ``import airflow`` fails for everyone
who has airflow-rbak installed.
"""

from __future__ import annotations

from typing import Any

from airflow_rbak import __version__

#: Extra fields of the rabbitmq connection form, in provider-info ``conn-fields`` form. The one copy: the hook
#: (``hooks/rabbitmq.py``) builds Airflow 2's form from it, and cannot be imported here (it imports the Task SDK,
#: which must not load while Airflow loads providers). The port defaults are ``broker/connection.py``'s
#: (``tests/test_provider.py`` holds them equal).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "management_port": {"label": "Management API port", "schema": {"type": ["integer", "null"], "default": 15672}},
    "stream_port": {"label": "Stream protocol port", "schema": {"type": ["integer", "null"], "default": 5552}},
    "management_url": {
        "label": "Management API URL",
        "description": "Overrides host and management port, e.g. https://mq.example/rabbitmq",
        "schema": {"type": ["string", "null"]},
    },
    "tls": {"label": "Use TLS (amqps and https)", "schema": {"type": ["boolean", "null"], "default": False}},
    "tls_verify": {"label": "Verify TLS certificates", "schema": {"type": ["boolean", "null"], "default": True}},
    "ca_file": {"label": "CA certificate file", "schema": {"type": ["string", "null"]}},
    "cert_file": {"label": "Client certificate file", "schema": {"type": ["string", "null"]}},
    "key_file": {"label": "Client key file", "schema": {"type": ["string", "null"]}},
    "timeout": {"label": "Timeout (seconds)", "schema": {"type": ["number", "null"], "default": 10}},
}

#: Relabels and placeholders of the standard fields, in provider-info ``ui-field-behaviour`` form.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"port": "AMQP port", "login": "Username", "schema": "Default vhost"},
    "placeholders": {
        "host": "rabbitmq.example.com",
        "port": "5672 (5671 with TLS)",
        "login": "backup",
        "password": "the user's password",
        "schema": "/",
        "extra": '{"management_port": 15672, "stream_port": 5552, "tls": false}',
        "management_port": "15672",
        "stream_port": "5552",
        "ca_file": "/etc/ssl/certs/rabbitmq-ca.pem",
    },
}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, connection type, hooks, operators and extra links."""
    return {
        "package-name": "airflow-rbak",
        "name": "RBAK (RabbitMQ backup)",
        "description": "Back up and restore RabbitMQ messages and definitions in the RBAK format.",
        "versions": [__version__],
        "integrations": [{"integration-name": "RBAK", "external-doc-url": "https://www.rabbitmq.com/", "tags": ["service"]}],
        "operators": [{"integration-name": "RBAK", "python-modules": [
            "airflow_rbak.operators.backup", "airflow_rbak.operators.finalize", "airflow_rbak.operators.segments",
            "airflow_rbak.operators.spark", "airflow_rbak.operators.restore", "airflow_rbak.operators.restore_approval"]}],
        "hooks": [{"integration-name": "RBAK", "python-modules": [
            "airflow_rbak.hooks.rabbitmq", "airflow_rbak.hooks.spark"]}],
        "connection-types": [{
            "connection-type": "rabbitmq",
            "hook-class-name": "airflow_rbak.hooks.rabbitmq.RabbitMQHook",
            "hook-name": "RabbitMQ",
            "conn-fields": CONN_FIELDS,
            "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
        }],
        "extra-links": ["airflow_rbak.links.RbakManifestLink", "airflow_rbak.links.RabbitMQQueueLink"],
    }
