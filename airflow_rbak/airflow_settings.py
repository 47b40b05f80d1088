"""The ``[rbak]`` options as Airflow's configuration holds them: what the DAGs, operators and view read.

Airflow's configuration is airflow.cfg, ``AIRFLOW__RBAK__<OPTION>`` variables, their ``_CMD`` and ``_SECRET`` forms
and the secrets backend; it knows each option's default from the provider info (``provider.CONFIG_OPTIONS``). Read
at run time (when a DAG is parsed, when a task runs), never cached here.
"""

from __future__ import annotations

from airflow.configuration import conf

from airflow_rbak.settings import RbakSettings, airflow_lookup
from airflow_rbak.storage.sealed import StateSeal


def rbak_settings() -> RbakSettings:
    """The options now, from Airflow's configuration."""
    return RbakSettings(airflow_lookup(conf))


def state_seal() -> StateSeal:
    """The seal of the state objects the tasks write and read back (``RbakSettings.state_seal``, with Airflow's
    ``[core] fernet_key``)."""
    return rbak_settings().state_seal(conf.get("core", "fernet_key", fallback=None))
