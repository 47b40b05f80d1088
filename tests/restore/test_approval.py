"""What the approver of a restore sees, when nobody is asked, and what a rejection says (no Airflow, no broker)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from airflow_rbak.display import printable
from airflow_rbak.restore import QueuePlan, RestorePlan, RestoreRejectedError, RestoreRequest
from airflow_rbak.restore.approval import QUEUES_SHOWN, approval_body, approval_not_needed, approval_subject, rejection

#: What Airflow's UI renders the request's body with: CommonMark and GFM tables.
GFM = MarkdownIt("commonmark").enable("table")
HOSTILE = ["q` | x | `quorum` | `v` | `forged` | 0 | 0 | 0 |", "``` | ```", "a|b", "line\n| `forged` | row |",
           "cr\rreturn", "[click](http://evil)", "![i](http://evil/i.png)", "<b>bold</b><script>x</script>",
           "`", " spaced ", "****", "\\|"]


def _queue(i: int, depth: int | None = None) -> QueuePlan:
    return QueuePlan(source_vhost="prod", source_queue=f"q{i}", target_vhost="prod-restored", target_queue=f"q{i}",
                     queue_type="quorum", records_total=100 + i, records_in_window=100 + i, segments=(), target_depth=depth)


def _plan(queues: int = 2, **changes) -> RestorePlan:
    plan = RestorePlan(backup_id="daily-1", storage_url="s3://backups/rabbit?region=eu-west-1", window_start=None,
                       window_end=None, queues=tuple(_queue(i) for i in range(queues)), source_cluster="rabbit@old",
                       target_cluster="rabbit@new", target_cluster_id="rabbitmq-cluster-id-x", drawn_from=("daily-1",))
    return replace(plan, **changes)


def test_only_a_real_restore_without_skip_approval_waits():
    real, dry = RestoreRequest("memory://"), RestoreRequest("memory://", dry_run=True)

    assert approval_not_needed(real, skip_approval=False) is None
    assert approval_not_needed(real, skip_approval=True) == "skip_approval is set"
    assert approval_not_needed(dry, skip_approval=False) == "dry run: nothing is imported or published"


def test_the_request_shows_each_queue_its_counts_the_target_and_the_modes():
    settings = RestoreRequest("memory://", restore_definitions=True, definitions_mode="replace", on_existing_messages="append")
    plan = replace(_plan(), queues=(_queue(0), replace(_queue(1, depth=7), published_before=1)),
                   definitions_changes={"mode": "replace", "create": ["vhost prod-restored", "queue prod-restored/q0"],
                                        "replace": ["policy prod-restored/limits"], "cannot_replace": []})

    body = approval_body(plan, settings, "rabbitmq_dr")

    assert "`daily-1` from `s3://backups/rabbit?region=eu-west-1`" in body
    assert "connection `rabbitmq_dr`, cluster `rabbit@new`" in body and "source cluster `rabbit@old`" in body
    assert "| `prod/q0` | `quorum` | `prod-restored` | `q0` | 100 | no such queue | 100 |" in body
    assert "| `prod/q1` | `quorum` | `prod-restored` | `q1` | 101 | 7 | 100 |" in body
    assert "201 records in the window, 200 to publish now" in body
    assert "`on_existing_messages: append`" in body and "`definitions_mode: replace`" in body
    assert "Creates 2 (`vhost prod-restored`, `queue prod-restored/q0`)" in body
    assert "existing and different, replaced: 1 (`policy prod-restored/limits`)" in body
    assert approval_subject(plan) == "Restore backup daily-1: 201 records into 2 queues of rabbit@new?"


def test_the_request_says_so_when_the_target_is_the_source_cluster_and_when_definitions_stay():
    plan = _plan(target_cluster="rabbit@old")

    body = approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default")

    assert "**the same cluster the backup was taken from**" in body
    assert "**Definitions**: not imported (`restore_definitions: false`)." in body


def test_a_restore_of_many_queues_lists_the_first_and_sums_the_rest():
    plan = _plan(queues=QUEUES_SHOWN + 30)

    body = approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default")

    rows = [line for line in body.splitlines() if line.startswith("| `prod/")]
    assert len(rows) == QUEUES_SHOWN
    rest = sum(100 + i for i in range(QUEUES_SHOWN, QUEUES_SHOWN + 30))
    assert f"| ... and 30 more queues | | | | {rest} | | {rest} |" in body


def test_a_rejection_names_who_rejected_or_how_long_nobody_answered():
    by_user = rejection(_plan(), "alice", timed_out=False, timeout=dt.timedelta(hours=24))
    timed_out = rejection(_plan(), None, timed_out=True, timeout=dt.timedelta(hours=24))

    assert isinstance(by_user, RestoreRejectedError)
    assert str(by_user) == ("restore of backup 'daily-1' rejected: the plan was rejected by alice; nothing was imported "
                            "or published. Trigger the restore again to ask again")
    assert "nobody approved the plan within 24 hours (a timeout counts as a rejection)" in str(timed_out)


def _rendered(body: str) -> tuple[list[list[str]], list[str]]:
    """The queue table's rows as cell texts, and every inline element type of the whole request."""
    tokens = GFM.parse(body)
    rows, row, in_body, kinds = [], None, False, []
    for token in tokens:
        if token.type == "tbody_open":
            in_body = True
        elif token.type == "tr_open" and in_body:
            row = []
        elif token.type == "tr_close" and row is not None:
            rows.append(row)
            row = None
        elif token.type == "inline":
            kinds += [child.type for child in token.children or []]
            if row is not None:
                row.append("".join(child.content for child in token.children or []))
    return rows, kinds


def _hostile_plan(names: list[str]) -> RestorePlan:
    queues = tuple(replace(_queue(i), source_vhost=name, source_queue=name, target_vhost=name, target_queue=name)
                   for i, name in enumerate(names))
    return replace(
        _plan(), queues=queues, backup_id=names[0], source_cluster=names[-1], target_cluster=names[1],
        drawn_from=tuple(names[:3]), definitions_changes={"create": names, "replace": [], "cannot_replace": []})


def test_hostile_names_show_literally_one_row_per_queue_and_never_as_a_link_image_or_html():
    plan = _hostile_plan(HOSTILE)
    settings_ = RestoreRequest("memory://", restore_definitions=True)

    rows, kinds = _rendered(approval_body(plan, settings_, "rabbitmq_default"))

    assert [row[3] for row in rows] == [printable(name) for name in HOSTILE]
    assert [row[0] for row in rows] == [printable(f"{name}/{name}") for name in HOSTILE]
    assert [row[4:] for row in rows] == [[str(100 + i), "no such queue", str(100 + i)] for i in range(len(HOSTILE))]
    assert set(kinds) <= {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    assert "\n| `forged`" not in approval_body(plan, settings_, "x") and "\r" not in approval_subject(plan)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20), min_size=3,
                max_size=6))
def test_any_names_keep_one_row_per_queue_each_cell_the_name_as_shown(names):
    plan = _hostile_plan(names)

    rows, kinds = _rendered(approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default"))

    assert len(rows) == len(names)
    assert [(row[2], row[3]) for row in rows] == [(printable(n), printable(n)) for n in names]
    assert "link_open" not in kinds and "image" not in kinds and "html_inline" not in kinds


def test_a_migration_shows_each_change_the_refusals_and_the_diff_and_hostile_names_stay_literal():
    changes = [{"transformation": "convert_to_quorum", "kind": "queue", "vhost": "prod", "name": name, "action": "changed",
                "detail": "classic -> quorum"} for name in HOSTILE]
    diff = [f"-queue {name}" for name in HOSTILE] + [f"+queue {name}" for name in HOSTILE]
    migration = {"transformations": ["convert_to_quorum", "strip_mirroring"], "target_version": "3.10.8",
                 "changes": changes, "converted": [["prod", n] for n in HOSTILE], "diff": diff, "diff_lines": len(diff),
                 "refused": [{"vhost": "prod", "queue": "prio` | x", "reason": "x-max-priority"}]}
    plan = replace(_plan(migration=migration), queues=(replace(_queue(0), queue_type="classic", target_queue_type="quorum"),))

    body = approval_body(plan, RestoreRequest("memory://", restore_definitions=True,
                                               transformations=["convert_to_quorum"]), "rabbitmq_default")

    assert "**Transformations** `convert_to_quorum`, `strip_mirroring` for the target's RabbitMQ `3.10.8`" in body
    assert "| `prod/q0` | `classic -> quorum` |" in body
    assert "**1 queues are refused**" in body and "``prod/prio` | x``" in body
    rows, kinds = _rendered(body)
    assert len(rows) == 1 and set(kinds) <= {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    blocks = [t.content for t in GFM.parse(body) if t.type == "code_block"]
    assert blocks == ["".join(f"{printable(line)}\n" for line in diff)]
