"""Airflow's provider entry point for airflow-rbak (named in pyproject's ``apache_airflow_provider``).

Airflow imports this on every start-up, before any DAG: it must stay free of
heavy imports (plain data only; the hook fields are literal copies checked
by the tests), and it must exist, or ``import airflow`` fails for everyone
who has airflow-rbak installed.
"""

from __future__ import annotations

from typing import Any

from airflow_rbak import __version__

# Literal copies of airflow_rbak.hooks.rabbitmq.CONN_FIELDS / UI_FIELD_BEHAVIOUR (importing the hook here would
# import the Task SDK while Airflow loads providers); tests/test_provider.py checks they stay equal.
_CONN_FIELDS: dict[str, Any] = {
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

_UI_FIELD_BEHAVIOUR: dict[str, Any] = {'hidden-fields': [],
 'relabeling': {'port': 'AMQP port', 'login': 'Username', 'schema': 'Default vhost'},
 'placeholders': {'host': 'rabbitmq.example.com',
                  'port': '5672 (5671 with TLS)',
                  'login': 'backup',
                  'password': "the user's password",
                  'schema': '/',
                  'extra': '{"management_port": 15672, "stream_port": 5552, "tls": false}',
                  'management_port': '15672',
                  'stream_port': '5552',
                  'ca_file': '/etc/ssl/certs/rabbitmq-ca.pem'}}

def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, connection type, hooks, operators and extra links."""
    return {
        "package-name": "airflow-rbak",
        "name": "RBAK (RabbitMQ backup)",
        "description": "Back up and restore RabbitMQ messages and definitions in the RBAK format.",
        "versions": [__version__],
        "integrations": [{"integration-name": "RBAK", "external-doc-url": "https://www.rabbitmq.com/", "tags": ["service"]}],
        "operators": [{"integration-name": "RBAK", "python-modules": [
            "airflow_rbak.operators.backup", "airflow_rbak.operators.finalize", "airflow_rbak.operators.spark_steps",
            "airflow_rbak.operators.spark", "airflow_rbak.operators.restore", "airflow_rbak.operators.restore_approval"]}],
        "hooks": [{"integration-name": "RBAK", "python-modules": [
            "airflow_rbak.hooks.rabbitmq", "airflow_rbak.hooks.spark"]}],
        "connection-types": [{
            "connection-type": "rabbitmq",
            "hook-class-name": "airflow_rbak.hooks.rabbitmq.RabbitMQHook",
            "hook-name": "RabbitMQ",
            "conn-fields": _CONN_FIELDS,
            "ui-field-behaviour": _UI_FIELD_BEHAVIOUR,
        }],
        "extra-links": ["airflow_rbak.links.RbakManifestLink", "airflow_rbak.links.RabbitMQQueueLink"],
    }
