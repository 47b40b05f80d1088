"""What ``rbak`` takes from the ``[rbak]`` options: the location a command works on when ``--path`` is not given.

The rule, for every command: ``--path``, else ``[rbak] storage_url`` as Airflow would read it. Where Airflow is
installed that is Airflow's configuration (airflow.cfg under ``$AIRFLOW_HOME`` or ``$AIRFLOW_CONFIG``,
``AIRFLOW__RBAK__STORAGE_URL``, its ``_CMD`` and ``_SECRET`` forms), loaded only when a command needs it, so a
command given ``--path`` never loads Airflow; without Airflow, the ``AIRFLOW__RBAK__STORAGE_URL`` variable alone.
Unset either way: ``$AIRFLOW_HOME/rbak-backups``, the DAGs' default.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from airflow_rbak.settings import RbakSettings, airflow_home, airflow_lookup, environment_lookup
from airflow_rbak.storage.keyring import Keyring
from airflow_rbak.storage.sealed import StateSeal


def _airflow_conf() -> Any | None:
    """Airflow's configuration where Airflow is installed, else None."""
    try:
        from airflow.configuration import conf  # the one import of Airflow here: pyproject's airflow-face contract
    except ImportError:
        return None
    return conf


def cli_settings() -> RbakSettings:
    """The ``[rbak]`` options from Airflow's configuration where Airflow is installed, else from the environment."""
    conf = _airflow_conf()
    return RbakSettings(environment_lookup() if conf is None else airflow_lookup(conf))


def state_seal() -> StateSeal:
    """The seal of state objects (``RbakSettings.state_seal``), with ``[core] fernet_key`` as Airflow reads it, else
    ``AIRFLOW__CORE__FERNET_KEY``: the key the DAGs' tasks use, so ``rbak`` opens what they sealed.

    Airflow's configuration is loaded only when it can say more than the environment: not when
    ``AIRFLOW__RBAK__STATE_KEY`` is set (it wins there too), nor where there is no ``airflow.cfg`` (a machine kept
    for disaster recovery: ``rbak restore --path`` imports nothing of Airflow there)."""
    has_config = Path(os.environ.get("AIRFLOW_CONFIG") or airflow_home() / "airflow.cfg").is_file()
    conf = _airflow_conf() if has_config and not environment_lookup()("state_key") else None
    if conf is None:
        return RbakSettings(environment_lookup()).state_seal(os.environ.get("AIRFLOW__CORE__FERNET_KEY"))
    return RbakSettings(airflow_lookup(conf)).state_seal(conf.get("core", "fernet_key", fallback=None))


def encryption_keyring(encryption_conn_id: str | None) -> Keyring | None:
    """The keys the connection ``--encryption-conn-id`` names, read through Airflow (loaded only then); None without
    the option: every storage then takes ``RBAK_ENCRYPTION_KEYS``'s, if set, else none (a plain location)."""
    if not encryption_conn_id:
        return None
    from airflow_rbak.hooks.encryption import connection_keyring  # Airflow's connections and secrets backends

    return connection_keyring(encryption_conn_id)


def location(args: argparse.Namespace) -> str:
    """The storage URL a command works on: ``--path``, else the configured ``storage_url``."""
    return str(args.path) if args.path else cli_settings().storage_url()
