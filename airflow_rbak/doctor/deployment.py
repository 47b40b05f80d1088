"""What the preflight checks: the settings and facts the Airflow face or ``rbak`` resolved, no secret in a repr."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.storage.keyring import Keyring


@dataclass(frozen=True)
class SecretSource:
    """Where a key was read from (``where``: never the key), and whether a copy outside Airflow is evident.

    ``outside_airflow`` is None when that cannot be told from here.
    """

    where: str
    outside_airflow: bool | None


@dataclass(frozen=True)
class StateKeySetting:
    """How the state key would be resolved (``storage.sealed.resolve_state_key``), without resolving it.

    ``state_key``: the ``[rbak] state_key`` text (secret: checked for length, never shown) and where it is set;
    ``fernet_key_set``: ``[core] fernet_key`` has a key; ``key_file``: the one-machine fallback.
    """

    state_key: str | None = field(default=None, repr=False)
    source: SecretSource | None = None
    fernet_key_set: bool = False
    key_file: Path | None = None


@dataclass(frozen=True)
class PausedDags:
    """The rbak DAGs' paused state as the metadata database holds it (None: never parsed there), or why it cannot be
    read (``unknown``)."""

    paused: dict[str, bool | None] = field(default_factory=dict)
    paused_at_creation: bool = True
    unknown: str | None = None


@dataclass(frozen=True)
class Deployment:
    """One deployment as a backup would meet it.

    ``connection`` None: no broker could be named (``broker_problem`` says why). ``vhosts``: the backup's vhosts
    param (None: every vhost the user sees). ``keyring``: the configured encryption keys (None: none) and
    ``keys_source`` where they come from. ``spark_master``: the Spark connection's master (None: no Spark step is
    checked); ``search_path``: the ``PATH`` a local spark-submit runs with. ``paused``: None where it is not read.
    """

    storage_url: str
    connection: RabbitMQConnection | None
    broker_name: str
    broker_problem: str | None = None
    vhosts: tuple[str, ...] | None = None
    include_definitions: bool = True
    probe_rights: bool = True
    keyring: Keyring | None = field(default=None, repr=False)
    keys_source: SecretSource | None = None
    keys_problem: str | None = None
    state_key: StateKeySetting = field(default_factory=StateKeySetting)
    spark_master: str | None = None
    spark_conn_id: str = "spark_default"
    search_path: str | None = None
    java_home: str | None = None
    paused: PausedDags | None = None
