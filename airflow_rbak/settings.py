"""The provider's ``[rbak]`` options, typed and checked in one place (see docs/configuration.md).

The options, their defaults and descriptions are ``provider.CONFIG_OPTIONS`` (what ``airflow config list`` shows).
:class:`RbakSettings` reads them through a *lookup* (option name to its configured text, or None), so this module
needs no Airflow: the Airflow face (``airflow_settings.py``) looks them up in Airflow's configuration, and so does the
``rbak`` command (``cli/configured.py``) where Airflow is installed; without Airflow it reads ``AIRFLOW__RBAK__<OPTION>`` from the
environment, the variables Airflow itself reads for the section. Reading makes no I/O (the DAGs read the options when
they are parsed): a default storage folder is created by the first backup, not by parsing.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_rbak.access import DEFAULT_CONN_IDS, AccessPolicy, ApprovalRules, check_allowed_locations
from airflow_rbak.doctor.deployment import SecretSource, StateKeySetting
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.provider import CONFIG_OPTIONS, CONFIG_SECTION
from airflow_rbak.repository.retention import RetentionPolicy
from airflow_rbak.repository.retention_bounds import bounded_policy
from airflow_rbak.storage.sealed import KEY_FILE_NAME, StateSeal, resolve_state_key
from airflow_rbak.storage.url import credentials_refusal, holds_credentials

#: An option's configured text, or None when it is not set.
Lookup = Callable[[str], "str | None"]

#: The environment variables the options replaced. None is read any more; one still set is refused, naming where its
#: value goes now, so that a deployment is never left on a default it did not choose (a backup written elsewhere).
RETIRED_VARIABLES: dict[str, str] = {
    "RBAK_STORAGE_URL": "storage_url", "RBAK_STORAGE_CONN_ID": "storage_conn_id",
    "RBAK_BACKUP_SCHEDULE": "backup_schedule", "RBAK_VERIFY_SCHEDULE": "verify_schedule",
    "RBAK_FRESHNESS_SCHEDULE": "freshness_schedule", "RBAK_TASK_RETRIES": "task_retries",
    "RBAK_TASK_TIMEOUT_MINUTES": "task_timeout_minutes", "RBAK_POOL": "pool",
    "RBAK_MAX_ACTIVE_QUEUE_TASKS": "max_active_queue_tasks", "RBAK_APPROVAL_TIMEOUT_HOURS": "approval_timeout_hours",
    "RBAK_FAILURE_NOTIFIER": "failure_notifier", "RBAK_PROGRESS_INTERVAL": "progress_interval",
    "RBAK_UI_LOCATIONS": "ui_locations",
}


def environment_name(option: str) -> str:
    """The variable that sets ``option`` for Airflow and for ``rbak`` alike: ``AIRFLOW__RBAK__<OPTION>``."""
    return f"AIRFLOW__{CONFIG_SECTION.upper()}__{option.upper()}"


def environment_lookup(environ: Mapping[str, str] | None = None) -> Lookup:
    """Options from ``AIRFLOW__RBAK__<OPTION>`` variables: how ``rbak`` reads them where Airflow is not installed."""
    env = os.environ if environ is None else environ
    return lambda option: env.get(environment_name(option))


def airflow_lookup(conf: Any) -> Lookup:
    """Options from Airflow's configuration object: airflow.cfg, ``AIRFLOW__RBAK__*``, ``_cmd`` / ``_secret``."""
    return lambda option: conf.get(CONFIG_SECTION, option, fallback=None)


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, else ``~/airflow`` (Airflow's own default)."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


def default_checkpoint_state() -> str:
    """The restore DAG's checkpoints: ``backup``, objects in the backup's own storage, so any worker resumes."""
    return "backup"


class RbakSettings:
    """The ``[rbak]`` options as the DAGs, operators, view and ``rbak`` use them; each error names the option."""

    def __init__(self, lookup: Lookup, environ: Mapping[str, str] | None = None) -> None:
        retired = sorted(name for name in RETIRED_VARIABLES if (os.environ if environ is None else environ).get(name))
        if retired:
            raise ConfigurationError("no longer read: " + "; ".join(
                f"${name} (set [{CONFIG_SECTION}] {RETIRED_VARIABLES[name]} in airflow.cfg, or "
                f"${environment_name(RETIRED_VARIABLES[name])})" for name in retired))
        self._lookup = lookup

    def text(self, option: str) -> str:
        """The option's configured text, stripped; unset or blank, its default ('' when it has none)."""
        value = self._lookup(option)
        text = str(value).strip() if value is not None else ""
        return text or str(CONFIG_OPTIONS[option]["default"] or "")

    def storage_url(self) -> str:
        """``storage_url``, else ``$AIRFLOW_HOME/rbak-backups`` as a file URL: where every DAG (and ``rbak``) looks first.

        A URL holding credentials is refused here, before it becomes a DAG param's default that every viewer sees.
        """
        configured = self._configured_storage_url()
        if holds_credentials(configured):
            raise ConfigurationError(f"[{CONFIG_SECTION}] storage_url: {credentials_refusal(configured)}")
        return configured

    def _configured_storage_url(self) -> str:
        return self.text("storage_url") or (airflow_home() / "rbak-backups").resolve().as_uri()

    def ui_storage_urls(self) -> list[str]:
        """The locations the Airflow UI's backups view lists: ``storage_url``, then ``ui_locations``.

        ``ui_locations`` holds further storage URLs separated by spaces or newlines (storage URLs hold neither, and
        no credentials); each location is listed once. They are returned as configured: the view shows one that
        holds credentials as refused, never its URL.
        """
        return list(dict.fromkeys([self._configured_storage_url(), *self.text("ui_locations").split()]))

    def access_policy(self) -> AccessPolicy:
        """The locations and connections DAG params may name (``allowed_storage_urls``, ``allowed_conn_ids``).

        ``storage_url``, ``ui_locations`` and the connections the shipped DAGs name by default
        (``access.DEFAULT_CONN_IDS``) are always allowed: a run left at its defaults is never refused.
        """
        allowed = self.text("allowed_storage_urls").split()
        check_allowed_locations(allowed, "allowed_storage_urls")
        urls = [*self.ui_storage_urls(), *allowed]
        conn_ids = [*DEFAULT_CONN_IDS, *self.text("allowed_conn_ids").split()]
        return AccessPolicy(tuple(dict.fromkeys(urls)), tuple(dict.fromkeys(conn_ids)))

    def approval_rules(self) -> ApprovalRules:
        """Who may answer a restore's approval, and whether a run may skip it (docs/security.md)."""
        return ApprovalRules(approvers=tuple(self.text("restore_approvers").split()),
                             trigger_user_may_approve=self._boolean("approval_by_trigger_user_allowed"),
                             skip_allowed=self._boolean("allow_skip_approval"))

    def configured_retention(self, option: str = "retention") -> RetentionPolicy:
        """The administrator's retention of a location (``retention``, ``copy_retention``): no rule when unset."""
        text = self.text(option)
        if not text:
            return RetentionPolicy()
        try:
            value = json.loads(text)
        except ValueError:
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option} must be a JSON object, got {text!r}") from None
        if not isinstance(value, dict):
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option} must be a JSON object, got {text!r}")
        try:
            return RetentionPolicy.from_json(value)
        except (ConfigurationError, TypeError) as exc:
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option}: {exc}") from None

    def run_retention(self, option: str, param: Any) -> RetentionPolicy:
        """The retention a run applies: its param (``option``'s namesake) bounded by ``[rbak] option``
        (:func:`~airflow_rbak.repository.retention_bounds.bounded_policy`); refused when the param keeps less."""
        return bounded_policy(param, self.configured_retention(option), param=option, option=option,
                              allow_below=self._boolean("allow_retention_param_below_configured"))

    def abandoned_after_ms(self) -> int:
        """How long an incomplete backup's lock may go unrenewed before its run counts as gone
        (``abandoned_grace_hours``), in ms."""
        text = self.text("abandoned_grace_hours")
        try:
            hours = float(text)
        except ValueError:
            raise ConfigurationError(f"[{CONFIG_SECTION}] abandoned_grace_hours must be a number, got {text!r}") from None
        if not hours > 0 or hours > 24 * 365 * 100:
            raise ConfigurationError(f"[{CONFIG_SECTION}] abandoned_grace_hours must be > 0, got {text!r}")
        return int(hours * 3_600_000)

    def _boolean(self, option: str) -> bool:
        text = self.text(option).lower()
        if text not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option} must be True or False, got {self.text(option)!r}")
        return text in ("true", "1", "yes", "on")

    def schedule(self, option: str) -> str | None:
        """A DAG's schedule (cron or preset) from ``option``; ``none`` (or unset without a default): manual runs only."""
        value = self.text(option)
        return None if value.lower() in ("", "none") else value

    def _integer(self, option: str, minimum: int) -> int:
        text = self.text(option)
        try:
            value = int(text)
        except ValueError:
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option} must be a whole number, got {text!r}") from None
        if value < minimum:
            raise ConfigurationError(f"[{CONFIG_SECTION}] {option} must be >= {minimum}, got {value}")
        return value

    def task_defaults(self) -> dict[str, Any]:
        """``default_args`` of every DAG: retries with exponential backoff and a time limit per task.

        Every step resumes where it stopped (capture and restore checkpoints, the lock as a lease), so a transient
        failure (a broker restart, a storage hiccup) is worth retrying; invalid settings and refusals fail at once
        (the operators raise ``AirflowFailException``), whatever the retries. The first retry waits 1 minute, each
        next one twice as long, up to 30 minutes.
        """
        return {
            "on_failure_callback": self.failure_notifiers(),
            "retries": self._integer("task_retries", 0),
            "retry_delay": dt.timedelta(minutes=1),
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": dt.timedelta(minutes=30),
            "execution_timeout": dt.timedelta(minutes=self._integer("task_timeout_minutes", 1)),
        }

    def approval_timeout(self) -> dt.timedelta:
        """How long a restore waits for a person to approve its plan (``approval_timeout_hours``).

        No answer in that time counts as a rejection (nothing is imported or published): a plan a day old describes a
        target that may have changed since, and a run waiting for ever would hold its place among the active runs.
        """
        return dt.timedelta(hours=self._integer("approval_timeout_hours", 1))

    def queue_task_limits(self) -> dict[str, Any]:
        """The pool and per-run cap of the tasks that work on queues (capture, publish): the broker's load."""
        return {"pool": self.text("pool"), "max_active_tis_per_dagrun": self._integer("max_active_queue_tasks", 1)}

    def failure_notifiers(self) -> list[Any]:
        """The notifier every rbak task calls when it fails for good: ``failure_notifier`` as ``module:name``.

        ``name`` is any Airflow Notifier (an instance, e.g. ``SlackNotifier(...)`` built in your own module, or a
        ``BaseNotifier`` subclass taking no arguments, which is instantiated) or any ``callback(context)``.
        Importing it at parse time makes a typo an import error of the DAG, not a silent lack of alerts.
        """
        spec = self.text("failure_notifier")
        if not spec:
            return []
        module, _, name = spec.partition(":")
        if not module or not name:
            raise ConfigurationError(f"[{CONFIG_SECTION}] failure_notifier must be module:name "
                                     f"(e.g. my_alerts:slack_notifier), got {spec!r}")
        found = getattr(importlib.import_module(module), name)
        return [found() if isinstance(found, type) else found]

    def progress_interval_s(self) -> float:
        """Seconds between progress lines in capture and restore task logs (``progress_interval``)."""
        text = self.text("progress_interval")
        try:
            value = float(text)
        except ValueError:
            raise ConfigurationError(f"[{CONFIG_SECTION}] progress_interval must be a number, got {text!r}") from None
        if not value > 0:
            raise ConfigurationError(f"[{CONFIG_SECTION}] progress_interval must be > 0, got {text!r}")
        return value

    def storage_conn_id(self) -> str | None:
        """The Airflow connection every task takes storage credentials from; None: each cloud's own chain."""
        return self.text("storage_conn_id") or None

    def encryption_conn_id(self) -> str | None:
        """The Airflow connection holding the location's encryption keys; None: the location is not encrypted."""
        return self.text("encryption_conn_id") or None

    def state_dir(self) -> Path:
        """The deployment's own state outside every location (``state_dir``, else ``$AIRFLOW_HOME/rbak-state``): the
        ledger of delivery-limit stops, which a location's writers cannot undo. Every worker and ``rbak`` need the
        same folder: put it on storage they all mount when there is more than one machine."""
        configured = self.text("state_dir")
        if not configured:
            return airflow_home() / "rbak-state"
        path = Path(configured).expanduser()
        if not path.is_absolute():  # a worker's current folder is no place every worker shares
            raise ConfigurationError(f"[{CONFIG_SECTION}] state_dir must be an absolute path, got {configured!r}")
        return path

    def state_seal(self, fernet_key: str | None) -> StateSeal:
        """The seal of state objects the runs write to a location and read back (``storage.sealed``).

        Its key: ``state_key``; else derived from Airflow's ``[core] fernet_key`` (given here, as Airflow reads it),
        so every worker of a deployment shares it; else ``$AIRFLOW_HOME/rbak-state.key``, created on first use.
        Never logged, never in an error.
        """
        return StateSeal(resolve_state_key(self._lookup("state_key"), fernet_key, airflow_home() / KEY_FILE_NAME))

    def state_key_setting(self, fernet_key: str | None, environ: Mapping[str, str] | None = None) -> StateKeySetting:
        """How :meth:`state_seal` would find its key, and where ``state_key`` is set, for the preflight
        (``airflow_rbak.doctor``): the environment or a ``_cmd`` / ``_secret`` form are outside Airflow, airflow.cfg
        is not. Resolves nothing, creates no key file."""
        env = os.environ if environ is None else environ
        if env.get(environment_name("state_key")):
            source = SecretSource(f"the {environment_name('state_key')} environment variable", True)
        elif any(env.get(environment_name(f"state_key_{form}")) or self._lookup(f"state_key_{form}")
                 for form in ("cmd", "secret")):
            source = SecretSource("state_key_cmd / state_key_secret (a command or secrets backend)", True)
        else:
            source = SecretSource("airflow.cfg", False)
        return StateKeySetting(self._lookup("state_key"), source, bool((fernet_key or "").split(",")[0].strip()),
                               airflow_home() / KEY_FILE_NAME)
