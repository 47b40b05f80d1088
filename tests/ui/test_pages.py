"""The backups view's pages as a user reads them, rendered without Airflow (the browser tests show them in Airflow)."""

from __future__ import annotations

from airflow_rbak.ui.pages import Links, detail_page, message_page, restore_page

LINKS = Links(airflow_root="", view_root="/rbak")
SEGMENT = {"key": "b1/q/000001.rbak", "sequence": 1, "records": 1, "size_bytes": 10, "uncompressed_bytes": 20,
           "first_timestamp": None, "last_timestamp": None}


def _detail(pending: dict | None = None, restored: list | None = None) -> dict:
    backup = {"backup_id": "b1", "status": "complete", "created_at": 1, "completed_at": 2, "queues": 2,
              "total_messages": 3, "total_bytes": 30, "total_segments": 3, "compression": ["zstd"], "last_verify": None,
              "depends_on": [], "needed_by": []}
    queues = [{"vhost": "/", "name": "orders", "queue_type": "classic", "messages": 1, "chain": ["b1"], "segments": [SEGMENT]},
              {"vhost": "prod", "name": "pay", "queue_type": "quorum", "messages": 2, "chain": ["b1"],
               "segments": [SEGMENT, SEGMENT]}]
    return {"location": {"id": "loc1", "url": "file:///backups", "refused": None}, "backup": backup, "queues": queues,
            "runs": {"made": [], "verified": [], "restored": restored or []},
            "verify": {"pending": pending, "next_run_id": "rbak_verify__loc1__b1__1"}}


def test_queue_headings_name_the_queue_then_its_vhost_and_count_in_the_right_number():
    page = detail_page(_detail(), LINKS, {}, {})

    assert '<b class="queue">orders</b> <span class="muted">in vhost</span> <b class="vhost">/</b>' in page
    assert "1 message · 1 segment · <a" in page and "2 messages · 2 segments · <a" in page
    assert "/ / orders" not in page and "1 segments" not in page
    assert "2 queues, 3 messages, 3 segments" in page


def test_a_paused_dag_is_said_beside_its_button_and_above_the_restore_form():
    page = detail_page(_detail(), LINKS, {"restore": True, "verify": True}, {"rbak_restore": True, "rbak_verify": False})
    form = restore_page({"id": "loc1", "url": "file:///backups"}, "b1", {}, LINKS, paused=True)

    assert 'id="paused-rbak_restore"' in page and "rbak_restore is paused" in page
    assert 'id="paused-rbak_verify"' not in page
    assert "rbak_restore is paused" in form and "stays queued until it is unpaused" in form


def test_verify_triggers_with_a_run_id_of_its_own_and_is_held_while_a_verify_of_the_backup_is_pending():
    ready = detail_page(_detail(), LINKS, {"verify": True}, {})
    held = detail_page(_detail(pending={"run_id": "rbak_verify__loc1__b1__1", "state": "queued"}), LINKS,
                       {"verify": True}, {})

    assert "&quot;dag_run_id&quot;: &quot;rbak_verify__loc1__b1__1&quot;" in ready
    assert 'id="verify" onclick="rbakVerify(this)" data-api' in ready
    assert 'id="verify" onclick="rbakVerify(this)" disabled' in held
    assert "rbak_verify is queued for this backup" in held


def test_restore_runs_are_listed_on_the_backups_page_with_their_report():
    run = {"dag_id": "rbak_restore", "run_id": "manual__1", "state": "success", "started_at": 1, "ended_at": 2,
           "verify_state": None, "outcome": "dry run: 3 planned, 3 would be published, nothing was published; …"}
    page = detail_page(_detail(restored=[run]), LINKS, {}, {})

    assert "<h2>Restored by</h2>" in page and "manual__1" in page and "3 would be published, nothing was published" in page


def test_a_refusal_page_has_the_views_frame_and_a_way_back():
    page = message_page("Restore b1", "You may not trigger rbak_restore.", LINKS, ("/rbak/backups/loc1/b1", "backup b1"))

    assert '<nav class="top"><a class="home" href="/rbak/">RabbitMQ backups</a>' in page
    assert '<a id="back" href="/rbak/backups/loc1/b1">← backup b1</a>' in page
    assert 'id="outside" class="airflow" href="/plugin/rabbitmq-backups"' in page


def test_the_pages_scripts_parse(tmp_path):
    import shutil
    import subprocess

    import pytest

    from airflow_rbak.ui.pages import _OPEN_SCRIPT, _VERIFY_SCRIPT
    from airflow_rbak.ui.trigger_form import SCRIPT

    if shutil.which("node") is None:
        pytest.skip("node is not installed (the browser tests run the scripts)")
    script = tmp_path / "view.js"
    script.write_text(_OPEN_SCRIPT + _VERIFY_SCRIPT + SCRIPT)
    done = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
