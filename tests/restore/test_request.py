"""RestoreRequest: every setting checked at construction, times in either form, globs and maps."""

from __future__ import annotations

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.request import DefinitionsSelection, RestoreRequest, parse_time


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1732240800000, 1732240800000),
        ("1732240800000", 1732240800000),
        ("2024-11-22T02:00:00Z", 1732240800000),
        ("2024-11-22T02:00:00+00:00", 1732240800000),
        ("2024-11-22T03:00:00+01:00", 1732240800000),
        ("2024-11-22T02:00:00", 1732240800000),  # no zone: UTC
        ("2024-11-22T02:00:00.250Z", 1732240800250),
        (None, None),
        ("", None),
    ],
)
def test_times_are_epoch_ms_or_iso_8601(value, expected):
    assert parse_time(value, "t") == expected


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", True, 1.5, [1]])
def test_a_bad_time_says_which_setting_and_both_formats(value):
    with pytest.raises(ConfigurationError, match="t: expected epoch milliseconds .* or ISO 8601"):
        parse_time(value, "t")


def test_either_end_of_the_window_alone_is_enough():
    start_only = RestoreRequest("memory://", time_window_start="2024-11-22T02:00:00Z")
    end_only = RestoreRequest("memory://", time_window_end=1000)

    assert start_only.in_window(1732240800000) and not start_only.in_window(1732240799999)
    assert end_only.in_window(1000) and not end_only.in_window(1001)
    assert start_only.has_window and end_only.has_window and not RestoreRequest("memory://").has_window


def test_settings_refuse_what_cannot_work_before_any_io():
    with pytest.raises(ConfigurationError, match="after time_window_end"):
        RestoreRequest("memory://", time_window_start=2000, time_window_end=1000)
    with pytest.raises(ConfigurationError, match="publish_mode"):
        RestoreRequest("memory://", publish_mode="fanout")
    with pytest.raises(ConfigurationError, match="max_publish_rate"):
        RestoreRequest("memory://", max_publish_rate=0)
    with pytest.raises(ConfigurationError, match="vhost_map"):
        RestoreRequest("memory://", vhost_map={"a": ""})
    with pytest.raises(ConfigurationError, match="storage_url"):
        RestoreRequest("")
    with pytest.raises(ConfigurationError, match="definitions_selection"):
        RestoreRequest("memory://", definitions_selection={"users": ["*"]})


def test_selection_and_maps():
    settings = RestoreRequest("memory://", vhosts="prod,stage-*", queues=["orders*"], vhost_map={"prod": "dr"},
                               queue_map={"orders": "orders-restored"})

    assert settings.selects("stage-1", "orders.eu") and not settings.selects("dev", "orders")
    assert not settings.selects("prod", "payments")
    assert (settings.target_vhost("prod"), settings.target_queue("orders")) == ("dr", "orders-restored")
    assert (settings.target_vhost("stage-1"), settings.target_queue("orders.eu")) == ("stage-1", "orders.eu")
    assert settings.definitions_selection == DefinitionsSelection(vhosts=("prod", "stage-*"), queues=("orders*",))
    explicit = RestoreRequest("memory://", vhosts=["prod"], definitions_selection={"queues": ["a*"], "exchanges": ["x"]})
    assert explicit.definitions_selection == DefinitionsSelection(vhosts=("prod",), queues=("a*",), exchanges=("x",))


def test_the_definitions_imported_by_default_are_the_vhosts_the_backup_was_asked_for():
    from airflow_rbak.restore.request import matches

    follows = RestoreRequest("memory://", queues=["orders*"]).definitions_of(("prod", "a*[b]?"))
    assert follows == DefinitionsSelection(vhosts=("prod", "a[*][[]b][?]"), queues=("orders*",))
    assert matches("a*[b]?", follows.vhosts) and not matches("ax[b]y", follows.vhosts)  # names, not patterns

    # a manifest that does not say (another writer's backup, or one of every vhost) never widens the import to
    # every vhost of the export: only the vhosts of the queues the restore selects, or nothing without any
    assert RestoreRequest("memory://").definitions_of(None, ["prod", "stage", "prod"]) == DefinitionsSelection(
        vhosts=("prod", "stage"))
    assert RestoreRequest("memory://").definitions_of(None) is None
    assert RestoreRequest("memory://", queues=["orders*"]).definitions_of(("prod",), ["stage"]).vhosts == ("prod",)
    # so does a restore that names vhosts, or a selection of its own
    assert RestoreRequest("memory://", vhosts=["stage"]).definitions_of(("prod",)).vhosts == ("stage",)
    chosen = RestoreRequest("memory://", definitions_selection={"vhosts": ["*"]})
    assert chosen.definitions_of(("prod",)).vhosts == ("*",)


@pytest.mark.parametrize("value", [None, [], "prod", ["prod", 3], [""], {"prod": 1}, ["v"] * 100_001])
def test_a_manifest_whose_selected_vhosts_are_not_a_list_of_names_says_nothing(value):
    from airflow_rbak.codec.manifest import SELECTED_VHOSTS, BackupManifest

    manifest = BackupManifest("b", 1, "x", extensions={} if value is None else {SELECTED_VHOSTS: value})
    assert manifest.selected_vhosts() is None
    assert BackupManifest("b", 1, "x", extensions={SELECTED_VHOSTS: ["prod", "a/b"]}).selected_vhosts() == ("prod", "a/b")
