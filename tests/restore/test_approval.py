"""What the approver of a restore sees, when nobody is asked, and what a rejection says (no Airflow, no broker)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from airflow_rbak.display import printable
from airflow_rbak.restore import QueuePlan, RestorePlan, RestoreRejectedError, RestoreRequest
from airflow_rbak.restore.approval import approval_body, approval_not_needed, approval_subject, rejection
from airflow_rbak.restore.definitions_diff import compare
from airflow_rbak.restore.import_view import import_view
from airflow_rbak.restore.plan_log import summary_lines

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
    assert "| `prod/q0` | `quorum` | `prod-restored` | `q0` | 100 | no such queue | 100 | fresh start |" in body
    assert "| `prod/q1` | `quorum` | `prod-restored` | `q1` | 101 | 7 | 100 | fresh start |" in body
    assert "201 records in the window, 200 to publish now" in body
    assert "`on_existing_messages: append`" in body and "`definitions_mode: replace`" in body
    assert "### Kept as the target has them, different from the backup's (0)" in body
    assert approval_subject(plan) == "Restore backup daily-1: 201 records into 2 queues of rabbit@new?"


def test_the_request_says_so_when_the_target_is_the_source_cluster_and_when_definitions_stay():
    plan = _plan(target_cluster="rabbit@old")

    body = approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default")

    assert "**the same cluster the backup was taken from**" in body
    assert "**Definitions**: not imported (`restore_definitions: false`)." in body


def test_a_resumed_queue_is_shown_as_a_resume():
    plan = replace(_plan(), queues=(replace(_queue(0), resumes=True, published_before=40),
                                    replace(_queue(1), resumes=True, completed_before=True, published_before=101)))

    body = approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default")

    assert "| `prod/q0` | `quorum` | `prod-restored` | `q0` | 100 | no such queue | 60 | **resumes** after 40 confirmed |" in body
    assert "| 0 | completed before: publishes nothing |" in body
    assert "1 resume an earlier run of this restore, 1 were completed by one" in body


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

    ordered = sorted(HOSTILE)  # by target, never in the manifest's order
    assert [row[3] for row in rows] == [printable(name) for name in ordered]
    assert [row[0] for row in rows] == [printable(f"{name}/{name}") for name in ordered]
    assert [row[4:] for row in rows] == [[str(100 + HOSTILE.index(n)), "no such queue", str(100 + HOSTILE.index(n)),
                                          "fresh start"] for n in ordered]
    assert set(kinds) <= {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    assert "\n| `forged`" not in approval_body(plan, settings_, "x") and "\r" not in approval_subject(plan)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20), min_size=3,
                max_size=6))
def test_any_names_keep_one_row_per_queue_each_cell_the_name_as_shown(names):
    plan = _hostile_plan(names)

    rows, kinds = _rendered(approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default"))

    assert len(rows) == len(names)
    assert [(row[2], row[3]) for row in rows] == [(printable(n), printable(n)) for n in sorted(names)]
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

    assert "### Transformations `convert_to_quorum`, `strip_mirroring` for the target's RabbitMQ `3.10.8`" in body
    assert "| `prod/q0` | `classic -> quorum` |" in body
    assert "**1 queues are refused**" in body and "``prod/prio` | x``" in body
    rows, kinds = _rendered(body)
    assert len(rows) == 1 and set(kinds) <= {"text", "code_inline", "strong_open", "strong_close", "softbreak"}
    blocks = [t.content for t in GFM.parse(body) if t.type == "code_block"]
    assert blocks == ["".join(f"{printable(line)}\n" for line in diff)]


def test_the_runtime_parameters_a_restore_does_not_import_are_named_in_the_request_and_the_plan():
    left = [{"kind": "operator_policy", "vhost": "prod", "name": "cap` | x"}]
    plan = _plan(definitions_not_imported=left)

    body = approval_body(plan, RestoreRequest("memory://", restore_definitions=True), "rabbitmq_default")

    assert _sections(body)["Not imported: runtime parameters of these vhosts (1)"] == ["operator_policy prod/cap` | x"]
    assert "  not imported (a restore imports no runtime parameters; set them on the target yourself): " \
           "operator_policy prod/cap` | x" in summary_lines(plan)
    assert RestorePlan.from_json(plan.to_json()) == plan


def _sections(body: str) -> dict[str, list[str]]:
    """Each heading of the rendered request with the text of its list items (code spans as their literal text)."""
    out: dict[str, list[str]] = {}
    heading, in_heading, depth = "", False, 0
    for token in GFM.parse(body):
        if token.type == "heading_open":
            in_heading = True
        elif token.type == "inline" and in_heading:
            heading, in_heading = token.content, False
            out[heading] = []
        elif token.type == "list_item_open":
            depth += 1
        elif token.type == "list_item_close":
            depth -= 1
        elif token.type == "inline" and depth:
            out.setdefault(heading, []).append("".join(child.content for child in token.children or []))
    return out


def _big_import() -> tuple[dict, dict]:
    """200 queues with arguments, 30 policies, an exchange, and bindings from a new and from an existing exchange."""
    queues = [{"name": f"q{i:03d}", "durable": True, "auto_delete": False, "arguments": {"x-max-length": i}}
              for i in range(200)]
    policies = [{"name": f"p{i:02d}", "pattern": ".*" if i == 0 else f"^q{i:03d}$", "apply-to": "queues",
                 "priority": 900 + i, "definition": {"message-ttl": i}} for i in range(30)]
    bindings = [{"source": "live", "destination_type": "queue", "destination": "q000", "routing_key": "#", "arguments": {}},
                {"source": "orders", "destination_type": "queue", "destination": "q001", "routing_key": "o",
                 "arguments": {}}]
    selected = {"prod-restored": {"queues": queues, "policies": policies, "bindings": bindings,
                                  "exchanges": [{"name": "orders", "type": "topic", "durable": True,
                                                 "arguments": {"alternate-exchange": "ae"}}]}}
    current = {"vhosts": [{"name": "prod-restored"}],
               "exchanges": [{"vhost": "prod-restored", "name": "live", "type": "fanout", "arguments": {}}],
               "queues": [{"vhost": "prod-restored", "name": "payments", "type": "quorum", "arguments": {}},
                          {"vhost": "other", "name": "elsewhere", "arguments": {}}]}
    return selected, current


def test_a_plan_of_200_queues_and_30_policies_shows_every_one_with_what_acts_beyond_it():
    selected, current = _big_import()
    changes = compare(selected, current, "missing")
    plan = RestorePlan.from_json(replace(_plan(queues=200), definitions_changes=changes.to_json(),
                                         definitions_import=import_view(changes, current, selected)).to_json())

    body = approval_body(plan, RestoreRequest("memory://", restore_definitions=True), "rabbitmq_default")

    rows, _ = _rendered(body)
    assert [row[3] for row in rows] == sorted(f"q{i}" for i in range(200))  # every queue, sorted
    sections = _sections(body)
    summary = sections["Summary"]
    assert any("200 queues" in line for line in summary)
    assert any("0 vhosts created, 30 policies, 200 queues declared, 1 exchanges declared, 2 bindings" in line
               for line in summary)
    assert "1 policies also apply to existing queues this restore does not bring" in summary
    assert "1 bindings copy live traffic from existing exchanges into restored queues" in summary
    policies = sections["Policies (30)"]
    assert len(policies) == 30
    for i, line in enumerate(policies):  # sorted by name, each with pattern, apply-to, priority and definition
        pattern = ".*" if i == 0 else f"^q{i:03d}$"
        assert line.startswith(f"create p{i:02d} in vhost prod-restored: pattern {pattern}, apply-to queues, "
                               f"priority {900 + i}, definition {{\"message-ttl\":{i}}}"), line
    assert policies[0].endswith("also applies to 1 existing queues this restore does not bring: payments")
    declared = sections["Queues declared (200)"]
    assert [line.split()[1] for line in declared] == [f"q{i:03d}" for i in range(200)]
    assert all(f'arguments {{"x-max-length":{i}}}' in line for i, line in enumerate(declared))
    assert 'orders in vhost prod-restored' in sections["Exchanges declared (1)"][0]
    assert '{"alternate-exchange":"ae"}' in sections["Exchanges declared (1)"][0]
    live, new = sections["Bindings (2)"]
    assert "exchange live -> queue q000" in live  # code spans render as their text and "its live traffic will be copied into this queue" in live
    assert "exchange orders -> queue q001" in new and "live traffic" not in new
    assert "more" not in body


def test_hostile_names_in_definitions_objects_show_literally():
    queues = [{"name": name, "arguments": {name: name}} for name in HOSTILE]
    policies = [{"name": name, "pattern": name, "priority": 1, "definition": {name: name}} for name in HOSTILE]
    exchanges = [{"name": name, "type": name, "arguments": {name: name}} for name in HOSTILE]
    bindings = [{"source": name, "destination_type": name, "destination": name, "routing_key": name, "arguments": {}}
                for name in HOSTILE]
    selected = {"v": {"queues": queues, "policies": policies, "exchanges": exchanges, "bindings": bindings}}
    changes = compare(selected, {}, "missing")
    plan = replace(_plan(), definitions_changes=changes.to_json(), definitions_import=import_view(changes, {}, selected))

    body = approval_body(plan, RestoreRequest("memory://", restore_definitions=True), "rabbitmq_default")

    _, kinds = _rendered(body)
    assert "link_open" not in kinds and "image" not in kinds and "html_inline" not in kinds
    sections = _sections(body)
    assert len(sections[f"Policies ({len(HOSTILE)})"]) == len(HOSTILE)
    assert len(sections[f"Queues declared ({len(HOSTILE)})"]) == len(HOSTILE)
    assert len(sections[f"Exchanges declared ({len(HOSTILE)})"]) == len(HOSTILE)
    assert len(sections[f"Bindings ({len(HOSTILE)})"]) == len(HOSTILE)
