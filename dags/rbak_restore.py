"""Manual RabbitMQ restore: plan → approve → definitions → publish (mapped tasks, groups of queues) → report.

Trigger it with the form (every setting is a validated ``Param``) or
``airflow dags test rbak_restore -c '{...}'``. Parsing makes no broker,
storage or database call. The plan refuses (before anything is imported or
published) to add to target queues that already hold messages unless
``on_existing_messages`` is ``append``.

**Approval.** After the plan the run waits until a person approves it (the
``approve`` task shows the plan: queues, message counts, target cluster and
vhosts, ``on_existing_messages``, definitions mode; Airflow's "Required
actions"). Reject, or no answer within ``[rbak] approval_timeout_hours``
(default 24): the run fails at ``approve`` saying so, and nothing is imported
or published. The user who triggered the run cannot approve it, and
``[rbak] restore_approvers`` names who can (docs/security.md).
``skip_approval: true`` goes on without asking (automation, ``airflow dags
test``, which cannot wait for an answer) where ``[rbak] allow_skip_approval``
allows it, and fails at ``approve`` otherwise; dry runs never ask.

**Only the approved plan runs.** ``plan`` seals the plan it made and
``approve`` seals who approved which plan (or that none was needed: a dry
run, an allowed ``skip_approval``), under the deployment's state key;
``definitions``, ``publish`` and ``report`` verify both before acting and
fail, naming what is missing or changed, when ``approve`` was marked
succeeded by hand, ``plan`` was run again after the approval, or an XCom was
edited (docs/security.md).

**Access.** ``storage_url``, ``checkpoint_state`` and ``rabbitmq_conn_id``
must name what ``[rbak] allowed_storage_urls`` / ``allowed_conn_ids`` allow
(the configured location and the default connection always are), or ``plan``
fails before reading anything.

**Migration.** ``transformations`` change the backup's definitions before
import (to move off mirrored classic queues: ``convert_to_quorum``,
``strip_mirroring``, ``drop_empty_policies``); the plan and the approval
show each change and the diff, and a queue that would lose what the target's
version cannot keep is refused unless ``accept_losses`` names the loss.

**Selective restore.** ``select`` (message filters, as ``rbak messages``
takes them) and ``positions`` (``{"vhost/queue": [0, 17]}``, as the backup's
page numbers them) publish only the messages chosen, in stored order; the plan,
the approval and the report name the selection and its count.
``replay_dead_letters`` sends a dead-letter queue's messages back to the
exchange and routing key they died from (``x-death``); the plan lists each.

**Recovery to a point in time.** ``journal_until`` (with ``vhosts`` naming
each vhost) restores the snapshot (``backup_id``; ``latest``: the last backup
before that moment), then the journal's records published after the snapshot
began and before the moment, through the target's own routing, in one publish
task; the approval says how many come from each and that consumers may see
again what they consumed after the snapshot (at least once). A gap in the
journal refuses unless ``journal_accept_gaps`` (docs/operations.md).

**Publishing.** The plan puts the queues into groups of up to
``publish_threads`` (default 1) queues, one mapped publish task each (at most
``max_publish_tasks`` tasks: more queues make bigger groups); a publish task
publishes its group's queues ``publish_threads`` at once, each on its own
connection and thread, with its own order, claim, checkpoint, rate limit and
progress lines. With ``publish_threads: 4`` ten queues are three tasks of
four, three and three queues, so even ``airflow dags test``, which runs
mapped tasks one after another, publishes four at once; the default is one
task per queue, one queue at a time. A queue that fails does not stop the others of
its task: they finish, and the task then fails naming each failed queue (a
retry or re-run resumes only those). A recovery to a point in time publishes
in one task, one queue at a time, in order, whatever ``publish_threads``.

A definitions failure stops the run
before any message is published; a re-run with the same ``checkpoint_state``
continues each queue after its last confirmed record. ``rbak definitions
rollback`` undoes a definitions import.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from airflow_rbak.access import DAG_DEFAULT_CONNECTIONS
from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.operators.restore import (
    RbakRestoreDefinitionsOperator,
    RbakRestorePlanOperator,
    RbakRestoreQueueOperator,
    RbakRestoreReportOperator,
)
from airflow_rbak.operators.restore_approval import RbakRestoreApprovalOperator
from airflow_rbak.restore.request import CONF_NAMES
from airflow_rbak.restore.transformations import RULE_TYPES, TRANSFORMATIONS
from airflow_rbak.settings import (
    default_checkpoint_state,
)

DEFAULTS = DAG_DEFAULT_CONNECTIONS["rbak_restore"]  # always allowed (access.py)
CONFIG = rbak_settings()
PLAN = "{{ ti.xcom_pull(task_ids='plan', key='plan') }}"
#: The approve task's result, holding the sealed approval that definitions, publish and report verify.
APPROVAL = "{{ ti.xcom_pull(task_ids='approve') }}"
_TIME = {"type": ["null", "integer", "string"],
         "description": "epoch milliseconds or ISO 8601 (2026-11-22T02:00:00Z); either end may be left empty"}


def _globs(description: str) -> Param:
    return Param(["*"], type="array", items={"type": "string", "minLength": 1}, minItems=1, description=description)


def _names_map(description: str) -> Param:
    return Param({}, type="object", additionalProperties={"type": "string", "minLength": 1}, description=description)


PARAMS = {
    "storage_url": Param(CONFIG.storage_url(), type="string", minLength=1,
                         description="file:///path or s3://bucket/prefix?region=...&endpoint=..."),
    "backup_id": Param("latest", type="string", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$",
                       description="a backup id, or 'latest' for the newest complete backup"),
    "rabbitmq_conn_id": Param(DEFAULTS["rabbitmq_conn_id"], type="string", minLength=1,
                              description="the target broker's connection"),
    "vhosts": _globs("source vhost globs to restore"),
    "queues": _globs("source queue name globs to restore"),
    "vhost_map": _names_map('restore vhosts under other names, e.g. {"prod": "prod-restored"}'),
    "queue_map": _names_map('restore queues under other names, e.g. {"orders": "orders-restored"}'),
    "time_window_start": Param(None, **_TIME),
    "time_window_end": Param(None, **_TIME),
    "journal_until": Param(None, type=["null", "integer", "string"],
                           description="recover to this moment (epoch ms or ISO 8601): the snapshot (backup_id; latest: "
                                       "the last backup before it), then the journal's records published before it, "
                                       "through the target's routing; name the vhosts, no window or selection"),
    "journal_accept_gaps": Param(False, type="boolean",
                                 description="recover through the journal's gaps in the window (the approval and the "
                                             "report list them) instead of refusing"),
    "select": Param(None, type=["null", "object"],
                    description="only the messages matching every filter given, as `rbak messages` takes them (time "
                                "window, message_id, correlation_id, routing_key glob, exchange, headers, content_type, "
                                "body_contains, body_regex); the plan, the approval and the report name the selection"),
    "positions": Param({}, type="object",
                       additionalProperties={"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                       description='only these messages, e.g. {"prod/orders": [0, 17]}: positions as `rbak messages` '
                                   "and the backup's page number them (0-based, in stored order); only the queues named"),
    "replay_dead_letters": Param([], type="array", items={"type": "string", "minLength": 1},
                                 description="source queue globs (dead-letter queues) whose messages go back to the "
                                             "exchange and routing key they died from (their x-death), never into the "
                                             'queue itself; ["*"] for every queue restored'),
    "restore_definitions": Param(False, type="boolean",
                                 description="save the target's definitions for rollback, then import the backup's"),
    "definitions_selection": Param(
        None, type=["null", "object"], additionalProperties=False,
        properties={k: {"type": "array", "items": {"type": "string", "minLength": 1}} for k in ("vhosts", "queues", "exchanges")},
        description="globs (default: the vhosts and queues restored, of the vhosts the backup was asked for); "
                    "selecting queues pulls in the exchanges and bindings that route to them"),
    "publish_mode": Param("queue", type="string", enum=["queue", "exchange"],
                          description="queue: straight into the target queue (created if missing); exchange: original route"),
    "dry_run": Param(False, type="boolean", description="plan and report everything, publish and import nothing"),
    "max_publish_rate": Param(None, type=["null", "number"], exclusiveMinimum=0, description="messages per second per queue"),
    "checkpoint_state": Param(default_checkpoint_state(), type="string", minLength=1,
                              description="'backup' (in the backup's storage), a storage URL, or a local SQLite file; "
                                          "re-runs resume without duplicates"),
    "skip_damaged_segments": Param(False, type="boolean",
                                   description="restore around segments that fail verification (the report lists them)"),
    "restore_consumer_offsets": Param(False, type="boolean",
                                      description="streams: store named consumers' offsets mapped to the restored messages"),
    "allow_unroutable": Param(False, type="boolean", description="do not fail the report when records came back unroutable"),
    "strip_user_id": Param(False, type="boolean",
                           description="publish records whose user_id is another user's without it (RabbitMQ refuses them)"),
    "on_existing_messages": Param("refuse", type="string", enum=["refuse", "append"],
                                  description="refuse: stop before touching anything when a target queue already holds "
                                              "messages; append: add the backup's messages after them"),
    "max_publish_tasks": Param(256, type="integer", minimum=1, maximum=1024,
                               description="at most this many publish tasks (Airflow maps at most [core] max_map_length, "
                                           "1,024); more queues than publish_threads x this make bigger groups"),
    "publish_threads": Param(1, type="integer", minimum=1, maximum=32,
                             description="queues a publish task publishes at once, each on its own connection and "
                                         "thread; the plan groups up to this many queues per task (1: one task per "
                                         "queue). A recovery to a point in time always publishes one at a time"),
    "definitions_mode": Param("missing", type="string", enum=["missing", "replace"],
                              description="missing: import only objects the target lacks; replace: also overwrite "
                                          "existing ones (the plan lists both)"),
    "max_decompressed_bytes": Param(DEFAULT_MAX_DECOMPRESSED_BYTES, type="integer", minimum=1,
                                    description="refuse a segment whose records take more than this many bytes "
                                                "uncompressed; the default holds any segment this provider writes"),
    "transformations": Param(
        [], type="array", uniqueItems=True, items={"type": "string", "enum": list(TRANSFORMATIONS)},
        description="change the backup's definitions before import (needs restore_definitions); to move off mirrored "
                    "classic queues: convert_to_quorum, strip_mirroring, drop_empty_policies. The plan and the approval "
                    "show each change and the diff; a dry run stores the transformed file"),
    "queue_types": Param(
        {}, type="object", additionalProperties={"type": "string", "enum": list(RULE_TYPES)},
        description='convert_to_quorum\'s rules, target queue name or glob -> "quorum" or "classic" (kept as it is); '
                    'an exact name wins over globs. Empty: every classic queue, e.g. {"*": "quorum", "prio": "classic"}'),
    "accept_losses": Param(
        [], type="array", items={"type": "string", "minLength": 1},
        description="what a converted queue may lose on the target's version, as ARGUMENT or QUEUE_GLOB:ARGUMENT "
                    "(e.g. prio:x-max-priority); a queue with a loss not named here is refused and left out"),
    "skip_approval": Param(False, type="boolean",
                           description="go on without waiting for a person to approve the plan (automation, "
                                       "airflow dags test), only where [rbak] allow_skip_approval is on; otherwise the "
                                       "run waits at 'approve', and a rejection or no answer in time imports and "
                                       "publishes nothing. Dry runs never wait"),
}

#: The trigger form's sections, in order (Airflow shows each param under its ``section``).
SECTIONS = {
    "Backup": ("storage_url", "backup_id", "skip_damaged_segments", "max_decompressed_bytes"),
    "Target and selection": ("rabbitmq_conn_id", "vhosts", "queues", "vhost_map", "queue_map"),
    "Point in time": ("time_window_start", "time_window_end", "journal_until", "journal_accept_gaps"),
    "Selective restore": ("select", "positions", "replay_dead_letters"),
    "Definitions": ("restore_definitions", "definitions_selection", "definitions_mode"),
    "Migration": ("transformations", "queue_types", "accept_losses"),
    "Publishing": ("dry_run", "publish_mode", "on_existing_messages", "max_publish_rate", "strip_user_id",
                   "allow_unroutable", "restore_consumer_offsets"),
    "Running": ("skip_approval", "checkpoint_state", "max_publish_tasks", "publish_threads"),
}
for _section, _names in SECTIONS.items():
    for _name in _names:
        PARAMS[_name].schema["section"] = _section

REQUEST = {name: "{{ params.%s }}" % name for name in CONF_NAMES}
# A publish task takes a group of queues (up to publish_threads, see the docstring): named by its first queue.
GROUP_LABEL = ("{{ task.restore_queue[0]['source_vhost'] }}/{{ task.restore_queue[0]['source_queue'] }}"
               "{{ ' +%d' % (task.restore_queue | length - 1) if task.restore_queue | length > 1 else '' }}")

with DAG(
    dag_id="rbak_restore",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params=PARAMS,
    render_template_as_native_obj=True,
    default_args=CONFIG.task_defaults(),
    tags=["rbak", "rabbitmq", "restore"],
    doc_md=__doc__,
):
    common = {"restore_request": REQUEST, "rabbitmq_conn_id": "{{ params.rabbitmq_conn_id }}"}
    plan = RbakRestorePlanOperator(task_id="plan", max_publish_tasks="{{ params.max_publish_tasks }}", **common)
    approve = RbakRestoreApprovalOperator(task_id="approve", plan=PLAN, skip_approval="{{ params.skip_approval }}",
                                          response_timeout=CONFIG.approval_timeout(), **common)
    definitions = RbakRestoreDefinitionsOperator(task_id="definitions", plan=PLAN, approval=APPROVAL, **common)
    publish = RbakRestoreQueueOperator.partial(
        task_id="publish", plan=PLAN, approval=APPROVAL, map_index_template=GROUP_LABEL,
        **CONFIG.queue_task_limits(), **common,
    ).expand(restore_queue=plan.output)
    report = RbakRestoreReportOperator(task_id="report", plan=PLAN, approval=APPROVAL, results=publish.output,
                                       definitions=definitions.output, **common)

    plan >> approve >> definitions >> publish >> report
