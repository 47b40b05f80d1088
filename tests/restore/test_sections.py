"""A restore section defined here, in the test suite, adds a line to the plan, the approval and the report, and
refuses a restore, through the public registration API alone: nothing under ``airflow_rbak/restore/`` names it.

Real parts: a backup of a real broker's queues in file storage, the restore's own plan, approval text and report.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore import RestorePlan, RestoreRefusedError, RestoreRequest, RestoreRun, sections
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.plan_log import summary_lines
from airflow_rbak.restore.section import PlanSection
from tests.restore.helpers import backup, declare, publish

pytestmark = pytest.mark.broker


@dataclass
class ToySection(PlanSection):
    """Counts the plan's queues whose name starts with ``toy``; refuses any plan holding ``refused_queue``."""

    refused_queue: str = "toy-refused"
    name: str = "toy"

    def _toys(self, plan: RestorePlan) -> list[str]:
        return sorted(q.source_queue for q in plan.queues if q.source_queue.startswith("toy"))

    def queue_log_lines(self, queue: Any) -> list[str]:
        return [f"    toy: {queue.source_queue} is a toy"] if queue.source_queue.startswith("toy") else []

    def log_lines(self, plan: RestorePlan) -> list[str]:
        return [f"  toy section: {len(self._toys(plan))} toy queues"]

    def approval_summary(self, plan: RestorePlan, settings: RestoreRequest) -> list[str]:
        return [f"- toy section: {len(self._toys(plan))} toy queues"]

    def approval_lines(self, plan: RestorePlan, settings: RestoreRequest) -> list[str]:
        return ["", "### Toy section", "", *[f"- toy queue {name}" for name in self._toys(plan)]]

    def report_fields(self, plan: RestorePlan) -> dict[str, Any]:
        return {"toy": self._toys(plan)}

    def refusal(self, plan: RestorePlan, settings: RestoreRequest) -> str | None:
        if any(q.source_queue == self.refused_queue for q in plan.queues):
            return f"the toy section refuses queue {self.refused_queue!r}; nothing was imported or published"
        return None


@pytest.fixture
def toy() -> Iterator[ToySection]:
    """The toy section, registered for one test and taken back after it."""
    with sections.registered_section(ToySection()) as section:
        yield section
    assert section not in sections.registered()


def _backup_of(broker, vhost: str, tmp_path, queues: dict[str, int]) -> str:
    declare(broker.connection, vhost, dict.fromkeys(queues, "classic"))
    for i, (name, count) in enumerate(queues.items()):
        publish(broker.connection, vhost, name, i * 100, count)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "toy-1", vhost)
    return location


def test_a_toy_section_adds_its_line_to_the_plan_the_approval_and_the_report(broker, vhost, target_vhost, tmp_path,
                                                                             toy, caplog):
    # Given a backup of a toy queue and another, and the toy section registered from the test suite
    location = _backup_of(broker, vhost, tmp_path, {"toy-a": 3, "orders": 2})
    settings = RestoreRequest(location, backup_id="toy-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                              restore_definitions=True, checkpoint_state=str(tmp_path / "restore.db"))
    run = RestoreRun(broker.connection, settings)

    # When the restore plans, asks for approval and runs
    caplog.set_level("INFO", logger="airflow_rbak.restore.run")
    plan = run.plan()
    body = approval_body(plan, settings, "rabbitmq_default")
    definitions = run.definitions(plan)
    report = run.report(plan, [run.publish(plan, q) for q in plan.queues], definitions).to_json()

    # Then the toy's lines stand in the plan's log, under its queue and after the built-in sections
    lines = summary_lines(plan)
    assert "    toy: toy-a is a toy" in lines and lines[-1] == "  toy section: 1 toy queues"
    assert "  toy section: 1 toy queues" in caplog.messages
    # and in the approval's summary and, after every built-in section, in its full plan
    summary, full = body.split("## Full plan")
    assert "- toy section: 1 toy queues" in summary.split("## Summary")[1]
    assert full.split("### Toy section")[1].strip().startswith("- toy queue toy-a")
    # and in the report, beside the built-in fields, with every record published
    assert report["toy"] == ["toy-a"] and report["published"] == 5 and "selection" in report


def test_a_toy_section_refuses_the_restore_and_nothing_is_published(broker, vhost, target_vhost, tmp_path, toy):
    # Given a backup holding the queue the toy section refuses
    location = _backup_of(broker, vhost, tmp_path, {"toy-refused": 4, "orders": 2})
    settings = RestoreRequest(location, backup_id="toy-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                              restore_definitions=True, checkpoint_state=str(tmp_path / "restore.db"))

    # When the restore runs
    with pytest.raises(RestoreRefusedError, match="the toy section refuses queue 'toy-refused'"):
        RestoreRun(broker.connection, settings).run()

    # Then nothing reached the target: no vhost, no queue (the definitions import would have created them)
    assert _queues_of(broker, target_vhost) == []


def test_a_section_name_is_registered_once(toy):
    # Given the toy section registered, when another section of the same name is registered, then it is refused
    with pytest.raises(ConfigurationError, match="a name of its own"):
        sections.register(ToySection())
    assert [s.name for s in sections.registered()].count("toy") == 1


def _queues_of(broker, vhost: str) -> list[str]:
    """The queues of ``vhost`` as the management API lists them (none when the vhost does not exist)."""
    vhosts = [v["name"] for v in broker.api("GET", "vhosts").json()]
    if vhost not in vhosts:
        return []
    return [q["name"] for q in broker.api("GET", f"queues/{quote(vhost, safe='')}").json()]
