"""The state key (``storage.sealed.resolve_state_key``) judged for how long it will last and where else it lives.

A run's sealed state (restore checkpoints, import records, approvals) opens only with the key it was sealed with:
``[rbak] state_key`` kept outside Airflow is stable; one derived from ``[core] fernet_key`` changes when that key is
rotated; the key file is on one machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_rbak.doctor.deployment import StateKeySetting
from airflow_rbak.doctor.findings import Finding, failure, ok, warning
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.sealed import resolve_state_key

NEW_KEY = "python -c 'import secrets; print(secrets.token_hex(32))'"
SET_IT = f"set [rbak] state_key ({NEW_KEY}), kept outside Airflow too, before the first restore"


def state_key_findings(setting: StateKeySetting) -> list[Finding]:
    """ok for ``[rbak] state_key`` with a copy outside Airflow; a warning for a derived key or a key file."""
    if setting.state_key and setting.state_key.strip():
        try:
            resolve_state_key(setting.state_key, None, Path(os.devnull))  # never read with a state_key
        except ConfigurationError as exc:
            return [failure("state key", str(exc), SET_IT)]
        source = setting.source
        where = source.where if source else "[rbak] state_key"
        if source is not None and source.outside_airflow is False:
            return [warning("state key", f"[rbak] state_key is set in {where}, and no copy outside Airflow is evident: "
                            "a disaster-recovery host needs the same key to resume a restore or roll one back",
                            "keep it in a secrets backend ([rbak] state_key_secret) or your vault as well")]
        return [ok("state key", f"[rbak] state_key is set ({where})")]
    if setting.fernet_key_set:
        return [warning("state key", "derived from [core] fernet_key: rotating the fernet key makes restore checkpoints "
                        "start again and earlier imports impossible to roll back, and a disaster-recovery host needs "
                        "the same fernet key", SET_IT)]
    path = setting.key_file
    made = "holds" if path is not None and path.is_file() else "will hold (created on first use)"
    return [warning("state key", f"neither [rbak] state_key nor [core] fernet_key is set: the key file {path} {made} "
                    "it, on this machine only (other workers and a disaster-recovery host cannot open what it sealed)",
                    SET_IT)]
