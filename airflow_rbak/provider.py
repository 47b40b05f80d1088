"""Airflow's provider entry point for airflow-rbak (named in pyproject's ``apache_airflow_provider``).

Airflow imports this on every start-up, before any DAG: it must stay free of
heavy imports (plain data only: it holds the rabbitmq connection form's tables,
which the hook imports from here, and the ``[rbak]`` configuration section, which
``settings.py`` reads), and it must exist, or ``import airflow`` fails for everyone
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
    "hosts": {
        "label": "Other cluster nodes",
        "description": "Tried in order after the host when it does not answer: host:port, comma-separated",
        "schema": {"type": ["string", "array", "null"]},
    },
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

#: The section of Airflow's configuration this provider reads (``[rbak]`` in airflow.cfg, ``AIRFLOW__RBAK__<OPTION>``).
CONFIG_SECTION = "rbak"


def _option(kind: str, default: str | None, example: str | None, description: str) -> dict[str, Any]:
    return {"description": description, "version_added": "0.1.0", "type": kind, "example": example, "default": default}


#: The ``[rbak]`` options in provider-info ``config`` form: what ``airflow config list`` shows, and the one copy of each
#: default (``settings.py`` reads the options through Airflow's configuration, or without Airflow from the environment).
CONFIG_OPTIONS: dict[str, dict[str, Any]] = {
    "storage_url": _option(
        "string", None, "s3://backups/rabbitmq?region=eu-west-1",
        "The default storage_url of every DAG, and of the rbak command without --path. Unset: the folder "
        "rbak-backups in the Airflow home, as a file:// URL. A URL holding credentials (any @, a signature) is "
        "refused: credentials come from storage_conn_id's connection or the cloud's own chain."),
    "storage_conn_id": _option(
        "string", None, "aws_backups",
        "The Airflow connection (type aws, wasb or google_cloud_platform) every task, the backups view and rbak (for "
        "the configured location) take storage credentials from; an operator's storage_conn_id overrides it. Unset: "
        "each cloud's own chain."),
    "encryption_conn_id": _option(
        "string", None, "rbak_encryption",
        "The Airflow connection whose password holds the storage location's encryption keys (id:base64-key, "
        "comma-separated, the writing key first); an operator's encryption_conn_id overrides it. Every object the "
        "tasks store is sealed with AES-256-GCM. Unset: the location is not encrypted.", ),
    "backup_schedule": _option(
        "string", "@daily", "0 2 * * *", "rbak_backup's schedule: a cron expression or preset; none for manual runs only."),
    "verify_schedule": _option(
        "string", None, "@weekly", "rbak_verify's schedule: a cron expression or preset; unset or none: manual runs only."),
    "freshness_schedule": _option(
        "string", "@hourly", "*/15 * * * *", "rbak_freshness's schedule; none: manual runs only."),
    "journal_schedule": _option(
        "string", "*/5 * * * *", "*/2 * * * *",
        "rbak_journal's schedule (each run archives the journal of every vhost in journal_vhosts); none: manual runs "
        "only."),
    "journal_vhosts": _option(
        "string", None, "prod,orders",
        "The journaled vhosts rbak_journal archives by default (comma-separated; rbak journal enable turns a vhost's "
        "journal on). Empty: none unless a run's vhosts param names them."),
    "drill_schedule": _option(
        "string", "@weekly", "0 4 * * 6",
        "rbak_drill's schedule; none: manual runs only. The DAG is paused when Airflow first sees it whatever this says."),
    "task_retries": _option(
        "integer", "3", "5",
        "Retries of every task of rbak_backup, rbak_restore and rbak_verify, after 1, 2, 4 ... minutes (at most 30 "
        "apart); rbak_freshness and rbak_drill never retry. Invalid settings, refusals and a held lock fail at once "
        "whatever this says."),
    "task_timeout_minutes": _option(
        "integer", "360", "720", "Every task's execution_timeout, in minutes: a task still running after this long fails."),
    "pool": _option(
        "string", "default_pool", "rbak",
        "The Airflow pool of the capture and publish tasks, the load on the broker (create it first: "
        "airflow pools set rbak 4 RabbitMQ)."),
    "max_active_queue_tasks": _option(
        "integer", "4", "8", "At most this many capture (backup) or publish (restore) tasks of one run at once."),
    "approval_timeout_hours": _option(
        "integer", "24", "4",
        "How long rbak_restore waits for a person to approve its plan (whole hours, at least 1); no answer counts as "
        "a rejection."),
    "failure_notifier": _option(
        "string", None, "my_alerts:slack_notifier",
        "module:name of the notifier every rbak task calls when it fails for good: an Airflow Notifier (an instance, "
        "or a BaseNotifier subclass taking no arguments) or a callback(context). Imported when the DAGs are parsed."),
    "progress_interval": _option(
        "float", "10", "30", "Seconds between progress lines in the capture and publish task logs."),
    "state_key": {**_option(
        "string", None, None,
        "The key (at least 32 characters) that seals the state the runs write to a storage location and read back: "
        "restore and capture checkpoints, import records. Unset: derived from [core] fernet_key, else a key file "
        "rbak-state.key in the Airflow home (one machine only). Every worker and the rbak command need the same key; "
        "changing it makes earlier state untrusted (checkpoints start again, older imports cannot be rolled back)."),
        "sensitive": True},
    "state_dir": _option(
        "string", None, "/mnt/shared/rbak-state",
        "An absolute path: a folder outside every backup location for the deployment's own state: the sealed "
        "ledger of delivery-limit stops, which a location's writers cannot undo. Unset: rbak-state in the Airflow "
        "home. Every worker and the rbak command need the same folder: put it on storage every worker shares when "
        "you add workers, writable only by the account the tasks run as."),
    "ui_locations": _option(
        "string", None, "s3://backups/eu s3://backups/us",
        "Further storage URLs the RabbitMQ backups view lists after storage_url, separated by spaces or newlines; "
        "read once per api-server process."),
    "allowed_storage_urls": _option(
        "string", None, "s3://backups/rabbitmq file:///mnt/restore-checkpoints",
        "Further storage locations the DAGs' params (storage_url, storage_urls, checkpoint_state, copy_to) may name, besides "
        "storage_url and ui_locations, which are always allowed: URLs separated by spaces or newlines, each allowing "
        "itself and every location below it (paths compared after normalisation, buckets exactly); * allows any "
        "location. A run naming another fails at its first task."),
    "allowed_conn_ids": _option(
        "string", "rabbitmq_default spark_default", "rabbitmq_default rabbitmq_dr spark_default",
        "The Airflow connections the DAGs' params (rabbitmq_conn_id, spark_conn_id) may name besides the shipped DAGs' "
        "default connections (rabbitmq_default, spark_default, rabbitmq_drill), which are always allowed, separated by "
        "spaces or newlines; * allows any. A run naming another fails at its first task."),
    "restore_approvers": _option(
        "string", None, "alice bob",
        "The Airflow users (ids, as the auth manager knows them) who may answer rbak_restore's approval, separated by "
        "spaces or newlines; Airflow refuses anyone else's answer. Unset: any user Airflow lets answer the task."),
    "approval_by_trigger_user_allowed": _option(
        "boolean", "False", "True",
        "Whether the user who triggered a restore may approve it. Off: their Approve does not count and the run keeps "
        "waiting for another approver."),
    "allow_skip_approval": _option(
        "boolean", "False", "True",
        "Whether a restore run may skip the approval with its skip_approval param (automation); off: such a run "
        "fails at approve, changing nothing. Dry runs never wait."),
    "retention": _option(
        "string", None, '{"keep_daily": 7, "keep_weekly": 5, "keep_monthly": 12}',
        "The backup location's retention, a JSON object with the keys of rbak_backup's retention param: what "
        "scheduled runs (and runs whose param is null) apply after each backup. A run's param may keep more (it is "
        "applied together with this rule), never less: a param setting a rule below this one fails at the first task, "
        "changing nothing. Unset: a run removes only what its param expires."),
    "copy_retention": _option(
        "string", None, '{"keep_last": 30}',
        "The second copy's retention (rbak_backup's copy task), bounding the copy_retention param as retention bounds "
        "the retention param."),
    "allow_retention_param_below_configured": _option(
        "boolean", "False", "True",
        "Whether a run's retention or copy_retention param may keep less than the configured rule; off: such a run "
        "fails at its first task, changing nothing."),
    "abandoned_grace_hours": _option(
        "float", "24", "72",
        "An incomplete backup whose run has not renewed its lock for this long (a DAG run renews it only while one of "
        "its tasks runs) is abandoned: rbak list says so, and each backup's retention (and rbak forget --abandoned) "
        "removes its folder and staging, never a segment a complete backup lists."),
}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, connection type, hooks, operators, extra links and configuration."""
    return {
        "package-name": "airflow-rbak",
        "name": "RBAK (RabbitMQ backup)",
        "description": "Back up and restore RabbitMQ messages and definitions in the RBAK format.",
        "versions": [__version__],
        "integrations": [{"integration-name": "RBAK", "external-doc-url": "https://www.rabbitmq.com/", "tags": ["service"]}],
        "operators": [{"integration-name": "RBAK", "python-modules": [
            "airflow_rbak.operators.backup", "airflow_rbak.operators.finalize", "airflow_rbak.operators.segments",
            "airflow_rbak.operators.spark", "airflow_rbak.operators.restore", "airflow_rbak.operators.restore_approval",
            "airflow_rbak.operators.second_copy"]}],
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
        "config": {CONFIG_SECTION: {
            "description": "RabbitMQ backups (airflow-rbak): the DAGs' default location, schedules and task limits.",
            "options": CONFIG_OPTIONS,
        }},
    }
