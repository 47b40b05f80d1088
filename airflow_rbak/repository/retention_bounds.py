"""What a run's ``retention`` param may ask of a location whose administrator set a retention (no Airflow here).

Whoever may trigger ``rbak_backup`` may set its ``retention`` and ``copy_retention`` params, so a param is a
request: the administrator's rule (``[rbak] retention``, ``[rbak] copy_retention``) bounds it. A param may keep
*more*: it is applied together with the administrator's rule (a union: a backup that rule keeps is never
deleted, :attr:`RetentionPolicy.floor`). A param that sets a rule *below* the administrator's (a smaller count, a
shorter ``max_age_days``) would delete what the administrator keeps, and is refused before the run touches
anything, naming the rule, unless the administrator allows it (``allow_retention_param_below_configured``). A rule
the param leaves unset is the administrator's. A null or empty param is the administrator's rule itself, which is
what scheduled runs apply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.retention import COUNT_SETTINGS, RetentionPolicy

log = package_logger(__name__)


class RetentionBelowConfiguredError(ConfigurationError):
    """A run's retention param keeps less than the administrator's rule, which does not allow that."""


def shortfalls(requested: RetentionPolicy, configured: RetentionPolicy) -> list[str]:
    """Each rule ``requested`` sets below ``configured``'s, as ``keep_last 1 < 5``; [] when it keeps at least as much.

    A rule ``requested`` leaves unset is not a shortfall: the administrator's rule applies beside it.
    """
    found = []
    for name in (*COUNT_SETTINGS, "max_age_days"):
        mine, theirs = getattr(requested, name), getattr(configured, name)
        if mine is not None and theirs is not None and mine < theirs:
            found.append(f"{name} {mine} < {theirs}")
    return found


def bounded_policy(requested: Mapping[str, Any] | RetentionPolicy | None, configured: RetentionPolicy, *,
                   allow_below: bool, param: str = "retention", option: str = "retention") -> RetentionPolicy:
    """The policy a run applies: ``requested`` (the run's ``param``) bounded by ``configured`` (``[rbak] option``).

    Raises :class:`RetentionBelowConfiguredError` for a param below the configured rule unless ``allow_below``;
    then the param alone applies (the administrator allowed it), and a warning says so.
    """
    asked = requested if isinstance(requested, RetentionPolicy) else RetentionPolicy.from_json(requested)
    if not asked.own_rules_active:
        return configured
    if not configured.active:
        return asked
    short = shortfalls(asked, configured)
    if short and not allow_below:
        raise RetentionBelowConfiguredError(
            f"the {param} param {_shown(asked)} keeps less than [rbak] {option} {_shown(configured)} ({', '.join(short)}); "
            f"a run may keep more than the configured rule, never less (an administrator may allow it with [rbak] "
            f"allow_retention_param_below_configured). Nothing was changed")
    if short:
        log.warning("the %s param %s keeps less than [rbak] %s %s (%s): allowed by [rbak] "
                    "allow_retention_param_below_configured", param, _shown(asked), option, _shown(configured),
                    ", ".join(short))
        return asked
    return replace(asked, floor=configured)


def _shown(policy: RetentionPolicy) -> str:
    return json.dumps(policy.rules(), sort_keys=True)
