"""A test Notifier: an Airflow ``BaseNotifier`` that appends each call to the JSON-lines file ``$RBAK_TEST_NOTIFIER_FILE``.

The DAG tests name it in ``AIRFLOW__RBAK__FAILURE_NOTIFIER`` (``tests.dags.recording_notifier:RecordingNotifier``),
as a user names a Slack or e-mail notifier.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    """Records which task of which run failed, and why."""

    def notify(self, context: Any) -> None:
        ti = context["ti"]
        with open(os.environ["RBAK_TEST_NOTIFIER_FILE"], "a") as out:
            out.write(json.dumps({"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": context["run_id"],
                                  "exception": str(context.get("exception"))}) + "\n")
