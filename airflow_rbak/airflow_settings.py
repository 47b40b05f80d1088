"""The ``[rbak]`` options as Airflow's configuration holds them: what the DAGs, operators and view read.

Airflow's configuration is airflow.cfg, ``AIRFLOW__RBAK__<OPTION>`` variables, their ``_CMD`` and ``_SECRET`` forms
and the secrets backend; it knows each option's default from the provider info (``provider.CONFIG_OPTIONS``). Read
at run time (when a DAG is parsed, when a task runs), never cached here.
"""

from __future__ import annotations

from airflow.configuration import conf

from airflow_rbak.settings import RbakSettings, airflow_lookup


def rbak_settings() -> RbakSettings:
    """The options now, from Airflow's configuration."""
    return RbakSettings(airflow_lookup(conf))
