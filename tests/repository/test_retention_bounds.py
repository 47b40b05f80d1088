"""An administrator's retention bounds a run's: a param may keep more (applied with the configured rule), never less
unless the administrator allows it; a null param is the configured rule (issue 51, A)."""

from __future__ import annotations

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import BackupSummary
from airflow_rbak.repository.retention import RetentionPolicy, retention_decisions, select_expired
from airflow_rbak.repository.retention_bounds import RetentionBelowConfiguredError, bounded_policy, shortfalls
from airflow_rbak.settings import RbakSettings

DAY = 86_400_000
NOW = 100 * DAY
#: One complete backup a day, days 81..99 (19 backups), newest last.
BACKUPS = [BackupSummary(f"d{day}", "complete", created_at=day * DAY, completed_at=day * DAY + 1000) for day in range(81, 100)]
KEEP_5 = RetentionPolicy(keep_last=5)


def settings(**options: str) -> RbakSettings:
    return RbakSettings(lambda name: options.get(name), environ={})


def test_a_param_keeping_fewer_is_refused_naming_the_rule():
    # Given [rbak] retention keeping the newest 5
    # When a run asks for keep_last 1
    with pytest.raises(RetentionBelowConfiguredError) as refused:
        bounded_policy({"keep_last": 1}, KEEP_5, allow_below=False)

    # Then it is refused, naming the param, the option and the rule, and saying nothing was changed
    said = str(refused.value)
    assert "retention param" in said and "[rbak] retention" in said and "keep_last 1 < 5" in said
    assert "allow_retention_param_below_configured" in said and "Nothing was changed" in said
    assert isinstance(refused.value, ConfigurationError)  # the operators fail it at once, without retries


@pytest.mark.parametrize(("param", "configured", "short"), [
    ({"keep_last": 4}, {"keep_last": 5}, ["keep_last 4 < 5"]),
    ({"keep_daily": 3, "keep_monthly": 12}, {"keep_daily": 7, "keep_monthly": 6}, ["keep_daily 3 < 7"]),
    ({"max_age_days": 1.5}, {"max_age_days": 2}, ["max_age_days 1.5 < 2"]),
    ({"keep_last": 9}, {"keep_last": 5}, []),
    ({"keep_last": 1}, {"keep_daily": 7}, []),  # a rule the admin did not set: the union keeps the admin's too
])
def test_a_shortfall_is_a_rule_set_below_the_configured_one(param, configured, short):
    assert shortfalls(RetentionPolicy.from_json(param), RetentionPolicy.from_json(configured)) == short


@pytest.mark.parametrize("param", [None, {}, {"timezone": "Europe/Paris"}])
def test_a_param_without_rules_is_the_configured_rule(param):
    assert bounded_policy(param, KEEP_5, allow_below=False) == KEEP_5


def test_a_param_keeping_more_is_applied_with_the_configured_rule_so_nothing_it_keeps_goes():
    # Given [rbak] retention keeping 7 days and a param asking for the newest 3 (another rule: no shortfall)
    configured = RetentionPolicy(keep_daily=7)
    policy = bounded_policy({"keep_last": 3}, configured, allow_below=False)

    # When retention decides
    expired = set(select_expired(BACKUPS, policy, now_ms=NOW, protect="d99"))
    reasons = retention_decisions(BACKUPS, policy, now_ms=NOW, protect="d99")

    # Then no backup the configured rule keeps is removed, and each says which rule keeps it
    kept_by_admin = {b.backup_id for b in BACKUPS} - set(select_expired(BACKUPS, configured, now_ms=NOW, protect="d99"))
    assert kept_by_admin == {f"d{day}" for day in range(93, 100)}
    assert expired == {f"d{day}" for day in range(81, 93)}
    assert reasons["d94"].startswith("the configured retention keeps it: daily")


def test_an_administrator_may_allow_a_param_below_the_rule():
    policy = bounded_policy({"keep_last": 1}, KEEP_5, allow_below=True)

    assert policy == RetentionPolicy(keep_last=1)
    assert select_expired(BACKUPS, policy, now_ms=NOW, protect="d99") == [b.backup_id for b in BACKUPS[:-1]]


def test_without_a_configured_rule_the_param_applies_as_given():
    assert bounded_policy({"keep_last": 1}, RetentionPolicy(), allow_below=False) == RetentionPolicy(keep_last=1)


def test_the_options_are_read_typed_and_a_bad_one_is_named():
    # Given [rbak] retention and copy_retention as an administrator writes them
    configured = settings(retention='{"keep_last": 5}', copy_retention='{"keep_daily": 7}')

    # Then scheduled runs (param null) apply them; a param below either is refused; the switch allows it
    assert configured.run_retention("retention", None) == KEEP_5
    assert configured.run_retention("copy_retention", None) == RetentionPolicy(keep_daily=7)
    with pytest.raises(RetentionBelowConfiguredError, match=r"copy_retention param .* \[rbak\] copy_retention"):
        configured.run_retention("copy_retention", {"keep_daily": 2})
    allowed = settings(retention='{"keep_last": 5}', allow_retention_param_below_configured="True")
    assert allowed.run_retention("retention", {"keep_last": 1}) == RetentionPolicy(keep_last=1)
    assert settings().run_retention("retention", None) == RetentionPolicy()
    for bad in ("keep 5", "[5]", '{"keep_last": 0}', '{"keep_lots": 5}', '{"max_age_days": "x"}'):
        with pytest.raises(ConfigurationError, match=r"\[rbak\] retention"):
            settings(retention=bad).configured_retention("retention")


def test_the_abandoned_grace_is_read_in_hours():
    assert settings().abandoned_after_ms() == 24 * 3_600_000
    assert settings(abandoned_grace_hours="0.5").abandoned_after_ms() == 1_800_000
    for bad in ("soon", "0", "-1"):
        with pytest.raises(ConfigurationError, match="abandoned_grace_hours"):
            settings(abandoned_grace_hours=bad).abandoned_after_ms()
