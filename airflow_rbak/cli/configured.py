"""What ``rbak`` takes from the ``[rbak]`` options: the location a command works on when ``--path`` is not given.

The rule, for every command: ``--path``, else ``[rbak] storage_url`` as Airflow would read it. Where Airflow is
installed that is Airflow's configuration (airflow.cfg under ``$AIRFLOW_HOME`` or ``$AIRFLOW_CONFIG``,
``AIRFLOW__RBAK__STORAGE_URL``, its ``_CMD`` and ``_SECRET`` forms), loaded only when a command needs it, so a
command given ``--path`` never loads Airflow; without Airflow, the ``AIRFLOW__RBAK__STORAGE_URL`` variable alone.
Unset either way: ``$AIRFLOW_HOME/rbak-backups``, the DAGs' default. The configured location is opened with the
configured ``[rbak] storage_conn_id`` (an Airflow connection), as the DAGs' tasks open it; a ``--path`` with each
cloud's own chain (environment, profile, role).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.credentials import use_credentials
from airflow_rbak.storage.keyring import Keyring, use_keyring

if TYPE_CHECKING:
    from airflow_rbak.settings import RbakSettings
    from airflow_rbak.storage.sealed import StateSeal


def airflow_conf() -> Any | None:
    """Airflow's configuration where Airflow is installed, else None."""
    try:
        from airflow.configuration import conf  # the one import of Airflow here: pyproject's airflow-face contract
    except ImportError:
        return None
    return conf


def cli_settings() -> RbakSettings:
    """The ``[rbak]`` options from Airflow's configuration where Airflow is installed, else from the environment.

    The settings module (every option's checks, the access rules) is imported here, by the commands that read an
    option, not by one given ``--path``."""
    from airflow_rbak.settings import RbakSettings, airflow_lookup, environment_lookup

    conf = airflow_conf()
    return RbakSettings(environment_lookup() if conf is None else airflow_lookup(conf))


def command_settings(args: argparse.Namespace) -> RbakSettings:
    """The ``[rbak]`` options a command applies (retention, the abandoned grace): as :func:`cli_settings` reads them,
    but from the environment alone for a command given ``--path``, which never loads Airflow."""
    from airflow_rbak.settings import RbakSettings, environment_lookup

    return RbakSettings(environment_lookup()) if getattr(args, "path", None) else cli_settings()


def state_seal() -> StateSeal:
    """The seal of state objects (``RbakSettings.state_seal``), with ``[core] fernet_key`` as Airflow reads it, else
    ``AIRFLOW__CORE__FERNET_KEY``: the key the DAGs' tasks use, so ``rbak`` opens what they sealed.

    Airflow's configuration is loaded only when it can say more than the environment: not when
    ``AIRFLOW__RBAK__STATE_KEY`` is set (it wins there too), nor where there is no ``airflow.cfg`` (a machine kept
    for disaster recovery: ``rbak restore --path`` imports nothing of Airflow there)."""
    from airflow_rbak.settings import RbakSettings, airflow_home, airflow_lookup, environment_lookup

    has_config = Path(os.environ.get("AIRFLOW_CONFIG") or airflow_home() / "airflow.cfg").is_file()
    conf = airflow_conf() if has_config and not environment_lookup()("state_key") else None
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
    """The storage URL a command works on: ``--path``, else the configured ``storage_url``, whose storage this
    process then opens with the configured ``storage_conn_id``'s credentials (until ``main`` ends the command), and
    unless ``--encryption-conn-id`` names keys, the configured ``encryption_conn_id``'s keys."""
    if args.path:
        return str(args.path)
    settings = cli_settings()
    _use_connection(settings.storage_conn_id())
    if not getattr(args, "encryption_conn_id", None) and settings.encryption_conn_id():
        use_keyring(encryption_keyring(settings.encryption_conn_id()))  # main's block restores the previous keys
    return settings.storage_url()


def existing_location(args: argparse.Namespace) -> Storage:
    """The command's location (``--path``, else the configured one), opened and refused when it does not exist (a
    typo must not read as "no backups")."""
    storage = open_storage(location(args))
    storage.check_location()
    return storage


def _use_connection(conn_id: str | None) -> None:
    """Hand the connection's credentials to the storage layer; None leaves each cloud's own chain."""
    if not conn_id:
        return
    try:
        from airflow_rbak.hooks.storage import connection_credentials  # Airflow's connections: only where it is installed
    except ImportError:
        raise ConfigurationError(f"[rbak] storage_conn_id {conn_id!r} names an Airflow connection, and Airflow is not "
                                 "installed here: unset it, or give --path and the cloud's own credentials") from None
    use_credentials(connection_credentials(conn_id))
