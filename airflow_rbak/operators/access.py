"""The ``[rbak]`` access rules applied to a running task: a param naming what an administrator did not allow fails it.

Every operator that touches storage or a broker calls :func:`refuse_unlisted_params` before it opens anything
(``StorageConnectionMixin.pre_execute``), and so do the first tasks of ``rbak_verify`` and ``rbak_freshness``: the
first task of each DAG fails without retries (a retry would only be refused again), and nothing after it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.exceptions import ConfigurationError


def refuse_unlisted_params(params: Mapping[str, Any] | None) -> None:
    """Fail the task when a param names a storage location or connection the ``[rbak]`` allowlists leave out."""
    try:
        refusals = rbak_settings().access_policy().refusals(params or {})
    except ConfigurationError as exc:
        raise AirflowFailException(f"rbak access check failed: invalid setting: {exc}") from exc
    if refusals:
        raise AirflowFailException("rbak refused the run before touching anything: " + "; ".join(refusals))
