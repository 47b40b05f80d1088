"""An IAM role on the loopback moto server that only an assumed session can use, as a real deployment has it.

The worker's own identity (an IAM user's key pair here, what an instance role or IRSA gives a real worker) may do
nothing but assume the role; the role may use S3. While :func:`iam_enforced` is on, moto checks every request's
signature and policy (its ``/moto-api/reset-auth``), so S3 work done with the worker's own keys, or with the
fixtures' dummy ones, is refused: a backup that succeeds then did its S3 work as the role.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
import requests

_ALLOW = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "{action}", "Resource": "*"}]}


def _policy(action: str) -> str:
    return json.dumps(_ALLOW).replace("{action}", action)


@dataclass(frozen=True)
class RoleIdentity:
    """The role to assume, and the worker identity's variables (its base credentials)."""

    role_arn: str
    worker_env: dict[str, str]

    def connection(self, endpoint: str) -> str:
        """An ``aws`` connection that holds only the role (and where STS answers: the loopback server)."""
        return json.dumps({"conn_type": "aws", "extra": {
            "role_arn": self.role_arn, "region_name": "us-east-1",
            "service_config": {"sts": {"endpoint_url": endpoint}}}})


def role_identity(endpoint: str) -> RoleIdentity:
    """Create the worker's IAM user (allowed ``sts:AssumeRole`` only) and a role allowed ``s3:*``."""
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    name = f"rbak-{uuid.uuid4().hex[:12]}"
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    iam.put_role_policy(RoleName=name, PolicyName="s3", PolicyDocument=_policy("s3:*"))
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="assume", PolicyDocument=_policy("sts:AssumeRole"))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return RoleIdentity(role["Arn"], {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]})


def worker_environment(environ: dict[str, str], identity: RoleIdentity) -> dict[str, str]:
    """``environ`` with the worker identity as its only AWS credentials (the fixtures' dummy token removed)."""
    env = {k: v for k, v in environ.items() if k not in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")}
    return {**env, **identity.worker_env}


@contextmanager
def iam_enforced(endpoint: str) -> Iterator[None]:
    """Moto authenticates and authorizes every request inside the block (the server is this test session's own)."""
    previous = requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10).json()
    try:
        yield
    finally:
        requests.post(f"{endpoint}/moto-api/reset-auth", timeout=10,
                      data=str(previous["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]).encode())


def s3_user_keys(endpoint: str) -> dict[str, str]:
    """An IAM user allowed ``s3:*``: its key pair as an ``aws`` connection's login and password."""
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    name = f"rbak-{uuid.uuid4().hex[:12]}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=_policy("s3:*"))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"login": key["AccessKeyId"], "password": key["SecretAccessKey"]}


#: The variables that hold AWS keys (the fixtures set dummy ones); a process without them has only its connection.
AWS_KEY_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def keys_only_connection(endpoint: str) -> str:
    """An ``aws`` connection (as ``AIRFLOW_CONN_*`` JSON) holding an S3 user's keys and nothing else."""
    return json.dumps({"conn_type": "aws", **s3_user_keys(endpoint), "extra": {"region_name": "us-east-1"}})
