"""The ``[rbak]`` access rules, decided without Airflow: which locations and connections a DAG param may name, who may
approve a restore, and whether a run may skip the approval (the DAGs apply them: tests/dags/test_access.py and
tests/dags/test_rbak_restore_approval.py)."""

from __future__ import annotations

import pytest

from airflow_rbak.access import ANY, AccessPolicy, ApprovalRules, location_within
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.settings import RbakSettings, environment_lookup


def settings(**env: str) -> RbakSettings:
    return RbakSettings(environment_lookup(env), environ=env)


@pytest.mark.parametrize(("url", "allowed"), [
    ("file:///backups", "file:///backups"),
    ("file:///backups/eu/daily", "file:///backups"),
    ("file:///backups/", "file:///backups"),
    ("/backups/eu", "file:///backups"),  # a plain path is a file location
    ("s3://backups/rabbit/eu?region=eu-west-1", "s3://backups/rabbit"),
    ("s3://backups/anything", "s3://backups"),
    ("gcs://bucket-1/a/b", "gcs://bucket-1/a"),
    ("azure://container1/a/b?account=acct1", "azure://container1/a?account=acct1"),
])
def test_a_location_is_within_itself_and_everything_below_it(url, allowed):
    assert location_within(url, allowed)


@pytest.mark.parametrize(("url", "allowed"), [
    ("file:///backups-evil", "file:///backups"),  # a longer name is not below
    ("file:///backups/../etc", "file:///backups"),  # .. is resolved first
    ("file:///backups/%2E%2E/etc", "file:///backups"),  # and so is a percent-encoded one
    ("file:///", "file:///backups"),
    ("/etc/passwd", "file:///backups"),
    ("s3://backups-evil/rabbit", "s3://backups"),  # buckets compare exactly
    ("s3://backup/rabbit", "s3://backups"),
    ("s3://backups/rabbit-evil", "s3://backups/rabbit"),
    ("s3://backups/rabbit?endpoint=https://elsewhere.example", "s3://backups/rabbit"),  # another server
    ("gcs://backups/rabbit", "s3://backups/rabbit"),  # another kind
    ("memory://other", "memory://shared"),
    ("azure://container1/a?account=other1", "azure://container1/a?account=acct1"),
])
def test_a_location_beside_or_above_an_allowed_one_is_not_within_it(url, allowed):
    assert not location_within(url, allowed)


def test_a_symlink_inside_an_allowed_folder_is_judged_by_where_it_leads(tmp_path):
    allowed, outside = tmp_path / "backups", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "link").symlink_to(outside)

    assert not location_within((allowed / "link").as_uri(), allowed.as_uri())
    assert location_within((allowed / "real").as_uri(), allowed.as_uri())


POLICY = AccessPolicy(("file:///backups", "s3://backups/rabbit"), ("rabbitmq_default", "spark_default"))


def test_params_at_allowed_values_pass_and_every_other_one_is_named_with_the_setting_to_change():
    assert POLICY.refusals({"storage_url": "file:///backups/eu", "rabbitmq_conn_id": "rabbitmq_default",
                            "spark_conn_id": "spark_default", "checkpoint_state": "backup",
                            "storage_urls": ["s3://backups/rabbit/eu"], "backup_id": "/etc"}) == []

    refusals = POLICY.refusals({"storage_url": "file:///backups-evil", "rabbitmq_conn_id": "prod_admin",
                                "spark_conn_id": "spark_default", "storage_urls": ["file:///backups", "s3://other/x"],
                                "checkpoint_state": "/var/lib/other/restore.db"})

    assert refusals == [
        "param storage_url names 'file:///backups-evil', which is not an allowed storage location; an administrator "
        "allows it by adding it (or a location above it) to [rbak] allowed_storage_urls",
        "param storage_urls names 's3://other/x', which is not an allowed storage location; an administrator allows "
        "it by adding it (or a location above it) to [rbak] allowed_storage_urls",
        "param checkpoint_state names '/var/lib/other/restore.db', which is not an allowed storage location; an "
        "administrator allows it by adding it (or a location above it) to [rbak] allowed_storage_urls",
        "param rabbitmq_conn_id names connection 'prod_admin', which is not an allowed connection; an administrator "
        "allows it by adding it to [rbak] allowed_conn_ids",
    ]


def test_a_checkpoint_state_url_or_file_inside_an_allowed_location_passes():
    assert POLICY.refusals({"checkpoint_state": "file:///backups/state"}) == []
    assert POLICY.refusals({"checkpoint_state": "/backups/restore.db"}) == []
    assert len(POLICY.refusals({"checkpoint_state": "/backups/../restore.db"})) == 1


def test_a_refusal_never_repeats_a_url_holding_credentials_nor_a_broken_one_silently():
    refusals = POLICY.refusals({"storage_url": "s3://key:secret@backups/rabbit", "storage_urls": ["ftp://x"]})

    assert len(refusals) == 2 and not any("secret" in r for r in refusals)
    assert refusals[0].startswith("param storage_url is not a storage location (a s3:// storage URL must not hold")
    assert refusals[1].startswith("param storage_urls is not a storage location (unknown storage URL scheme 'ftp'")


def test_any_allows_every_location_or_every_connection():
    anything = AccessPolicy((ANY,), (ANY,))

    assert anything.refusals({"storage_url": "file:///etc", "rabbitmq_conn_id": "x", "spark_conn_id": "y"}) == []


def test_the_configured_locations_and_the_dags_default_connections_are_always_allowed():
    policy = settings(AIRFLOW__RBAK__STORAGE_URL="s3://backups/rabbit?region=eu-west-1",
                      AIRFLOW__RBAK__UI_LOCATIONS="s3://backups/us").access_policy()

    assert policy.refusals({"storage_url": "s3://backups/rabbit", "storage_urls": ["s3://backups/us/x"],
                            "rabbitmq_conn_id": "rabbitmq_default", "spark_conn_id": "spark_default"}) == []
    assert len(policy.refusals({"storage_url": "s3://backups/other", "rabbitmq_conn_id": "other"})) == 2


def test_allowed_storage_urls_and_allowed_conn_ids_add_to_them_and_a_broken_entry_names_the_option():
    policy = settings(AIRFLOW__RBAK__STORAGE_URL="file:///backups",
                      AIRFLOW__RBAK__ALLOWED_STORAGE_URLS="s3://dr-backups\nfile:///mnt/state",
                      AIRFLOW__RBAK__ALLOWED_CONN_IDS="rabbitmq_dr").access_policy()

    assert policy.refusals({"storage_url": "s3://dr-backups/x", "checkpoint_state": "/mnt/state/r.db",
                            "rabbitmq_conn_id": "rabbitmq_dr"}) == []
    assert policy.refusals({"rabbitmq_conn_id": "rabbitmq_default"}) == []  # the shipped DAGs' defaults stay allowed
    with pytest.raises(ConfigurationError, match=r"\[rbak\] allowed_storage_urls: unknown storage URL scheme 'ftp'"):
        settings(AIRFLOW__RBAK__ALLOWED_STORAGE_URLS="ftp://x").access_policy()


def test_a_ui_location_the_view_shows_as_refused_allows_nothing_and_refuses_no_other_run():
    policy = settings(AIRFLOW__RBAK__STORAGE_URL="file:///backups",
                      AIRFLOW__RBAK__UI_LOCATIONS="s3://key:secret@backups/x ftp://nowhere").access_policy()

    assert policy.refusals({"storage_url": "file:///backups/eu"}) == []
    assert len(policy.refusals({"storage_url": "s3://backups/x"})) == 1


def test_by_default_the_trigger_user_cannot_approve_and_a_run_cannot_skip_the_approval():
    rules = settings().approval_rules()

    assert rules == ApprovalRules(approvers=(), trigger_user_may_approve=False, skip_allowed=False)
    assert rules.assigned("alice") == ()  # anyone Airflow lets answer ...
    assert rules.approval_refusal(("alice", "alice"), "alice") == (
        "alice triggered this run and may not approve it ([rbak] approval_by_trigger_user_allowed is off); another "
        "approver must answer")
    assert rules.approval_refusal(("bob", "bob"), "alice") is None  # ... but the one who asked
    assert rules.approval_refusal(("7", "alice"), "alice") is not None  # an auth manager whose ids are numbers
    assert "[rbak] allow_skip_approval" in rules.skip_refusal()


def test_restore_approvers_are_airflow_s_assigned_users_without_the_trigger_user():
    rules = settings(AIRFLOW__RBAK__RESTORE_APPROVERS="alice bob").approval_rules()

    assert rules.assigned("alice") == ("bob",)
    assert rules.assigned(None) == ("alice", "bob")
    assert rules.approval_refusal(("carol", "carol"), "alice") == "carol is not in [rbak] restore_approvers"
    with pytest.raises(ConfigurationError, match=r"restore_approvers names only 'bob', who triggered this run"):
        settings(AIRFLOW__RBAK__RESTORE_APPROVERS="bob").approval_rules().assigned("bob")


def test_the_administrator_may_let_the_trigger_user_approve_and_runs_skip():
    rules = settings(AIRFLOW__RBAK__APPROVAL_BY_TRIGGER_USER_ALLOWED="True", AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL="true",
                     AIRFLOW__RBAK__RESTORE_APPROVERS="alice").approval_rules()

    assert (rules.skip_allowed, rules.assigned("alice"), rules.approval_refusal(("alice",), "alice")) == (
        True, ("alice",), None)
    with pytest.raises(ConfigurationError, match=r"\[rbak\] allow_skip_approval must be True or False, got 'maybe'"):
        settings(AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL="maybe").approval_rules()
