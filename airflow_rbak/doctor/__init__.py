"""The preflight (``rbak doctor``, and the backup DAG's first task): is this deployment ready for its first run?

Each check reports ok, warning or failure, with the fix in one line; every check runs whatever the others found
(restic's checker collects every error). The checks take what the Airflow face or ``rbak`` resolved (a
:class:`~airflow_rbak.doctor.deployment.Deployment`) and do their own I/O: the broker, the storage location, the
local Spark and Java. No Airflow.
"""

from __future__ import annotations

from airflow_rbak.doctor.deployment import Deployment, SecretSource, StateKeySetting
from airflow_rbak.doctor.findings import Finding, Report, Status
from airflow_rbak.doctor.preflight import run_preflight

__all__ = ["Deployment", "Finding", "Report", "SecretSource", "StateKeySetting", "Status", "run_preflight"]
