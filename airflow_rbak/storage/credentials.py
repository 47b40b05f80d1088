"""S3 credentials handed to this process's storage clients (and its children) through the environment.

boto3 reads ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL`` and
``AWS_DEFAULT_REGION`` when each storage makes its client (:mod:`.s3` makes one per storage). So credentials that
come from elsewhere (an Airflow connection) are exported into the environment: every client of the task then uses
them, and a ``spark-submit`` the task starts inherits them without a secret on its command line. Nothing here logs
a value, and the secret parts are left out of ``repr``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from airflow_rbak.exceptions import ConfigurationError


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair, optionally a session token, an endpoint and a region."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint_url: str | None = None
    region: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key_id or not self.secret_access_key:
            raise ConfigurationError("S3 credentials need both an access key id and a secret access key")

    def environment(self) -> dict[str, str]:
        """The boto3 environment variables these credentials set (secret values included: never log it)."""
        env = {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}
        optional = {"AWS_SESSION_TOKEN": self.session_token, "AWS_ENDPOINT_URL": self.endpoint_url,
                    "AWS_DEFAULT_REGION": self.region}
        env.update({k: v for k, v in optional.items() if v})
        return env


#: The variables credentials are handed on in (what :func:`export_credentials` replaces: a stale session token must
#: not pair with a new key).
STORAGE_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")


def export_credentials(credentials: S3Credentials | None) -> None:
    """Make ``credentials`` the ones this process and its children use; None leaves the environment's own."""
    if credentials is None:
        return
    for name in STORAGE_ENV:
        os.environ.pop(name, None)
    os.environ.update(credentials.environment())
