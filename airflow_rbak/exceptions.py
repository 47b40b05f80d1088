"""The one error hierarchy of airflow_rbak.

Every layer raises a subclass of :class:`RbakError`; only hooks and operators
translate them into Airflow's exceptions.
"""

from __future__ import annotations


class RbakError(Exception):
    """Base of every error airflow_rbak raises on purpose."""


class ConfigurationError(RbakError, ValueError):
    """A setting or argument is invalid; raised at construction, before any I/O."""
