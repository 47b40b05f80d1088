"""Scheduled RabbitMQ backup: discover → definitions → capture (one task per queue) → encode (segments
written and verified) → finalize (manifest last, retention, Asset event) → copy (to ``copy_to``, when set).

A queue whose staging is small (``in_process_max_bytes``) is encoded and verified by its own capture task
as soon as its capture ends; the encode task then runs every remaining queue as one Spark application
(``segment_work``: ``auto``; ``process`` or ``spark`` force either way for every queue).

Capture tasks take the queues in groups when there are more than
``max_capture_tasks`` (any number of queues fits under Airflow's
``max_map_length``); they run in the pool ``[rbak] pool``, at most
``[rbak] max_active_queue_tasks`` at once per run. Every task retries
transient failures with exponential backoff (``[rbak] task_retries``) within
a time limit (``[rbak] task_timeout_minutes``); invalid settings fail at once.

Parsing makes no broker, storage or database call; every setting is a
validated ``Param`` (the trigger form and ``-c`` conf are checked against
its JSON schema before a task runs). The schedule comes from
``[rbak] backup_schedule`` in Airflow's configuration (default ``@daily``;
``none`` for manual runs only), the default location from ``[rbak] storage_url``.
Every param is described in docs/configuration.md.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from airflow_rbak.access import DAG_DEFAULT_CONNECTIONS
from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.backup.run import STREAM_MODES
from airflow_rbak.capture.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS
from airflow_rbak.codec.constants import (
    DEFAULT_SEGMENT_MAX_BYTES,
    DEFAULT_SEGMENT_MAX_INTERVAL_MS,
    MAX_SEGMENT_MAX_BYTES,
)
from airflow_rbak.operators.backup import RbakCaptureQueueOperator, RbakDiscoverQueuesOperator, RbakExportDefinitionsOperator
from airflow_rbak.operators.finalize import RbakFinalizeManifestOperator
from airflow_rbak.operators.second_copy import RbakCopyBackupOperator
from airflow_rbak.operators.segments import RbakBackupSegmentsOperator
from airflow_rbak.segments.stages import DEFAULT_IN_PROCESS_MAX_BYTES, PLACEMENTS

DEFAULTS = DAG_DEFAULT_CONNECTIONS["rbak_backup"]  # always allowed (access.py)
CONFIG = rbak_settings()
#: The retention settings a ``retention`` object may hold (repository.retention.RetentionPolicy).
RETENTION_PROPERTIES = {"keep_last": {"type": ["null", "integer"], "minimum": 1},
                        "max_age_days": {"type": ["null", "number"], "exclusiveMinimum": 0},
                        **{f"keep_{period}": {"type": ["null", "integer"], "minimum": 1}
                           for period in ("hourly", "daily", "weekly", "monthly", "yearly")},
                        "timezone": {"type": ["null", "string"]}}
QUEUE_TYPES = ["classic", "quorum", "stream"]
BACKUP_ID = ("{{ params.backup_id or 'rbak-' ~ (dag_run.logical_date or dag_run.run_after)"
             ".strftime('%Y%m%dT%H%M%SZ') }}")
ENCODE_REPORT = "{{ ti.xcom_pull(task_ids='encode')['report_key'] }}"
#: What the capture tasks and the encode task both read to make a queue's segments (so they agree).
SEGMENT_WORK = ("{{ {'compression': params.compression, 'compression_level': params.compression_level, "
                    "'segment_max_bytes': params.segment_max_bytes, 'segment_max_interval_ms': params.segment_max_interval_ms, "
                    "'verify': params.verify, 'segment_work': params.segment_work, "
                    "'in_process_max_bytes': params.in_process_max_bytes, "
                    "'compact_below_bytes': params.compact_below_bytes} }}")
QUEUE_REFS = "{{ ti.xcom_pull(task_ids='discover', key='queue_refs') }}"
# A capture task takes a group of queues (one queue each up to max_capture_tasks): named by its first queue.
GROUP_LABEL = ("{{ task.queue_info[0]['vhost'] }}/{{ task.queue_info[0]['name'] }}"
               "{{ ' +%d' % (task.queue_info | length - 1) if task.queue_info | length > 1 else '' }}")


def _strings(default: list[str] | None, description: str, **schema: object) -> Param:
    kind = ["array"] if default is not None else ["null", "array"]
    return Param(default, type=kind, items={"type": "string", "minLength": 1, **schema}, description=description)


PARAMS = {
    "rabbitmq_conn_id": Param(DEFAULTS["rabbitmq_conn_id"], type="string", minLength=1,
                              description="Airflow connection of type rabbitmq"),
    "spark_conn_id": Param(DEFAULTS["spark_conn_id"], type="string", minLength=1,
                           description="Spark connection (local[*] if missing)"),
    "storage_url": Param(CONFIG.storage_url(), type="string", minLength=1,
                         description="file:///path or s3://bucket/prefix?region=...&endpoint=..."),
    "backup_id": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$",
                       description="default: rbak-<logical date, UTC>"),
    "vhosts": _strings(None, "vhosts to back up (null: all)"),
    "include": _strings(["*"], "queue name globs to include"),
    "exclude": _strings([], "queue name globs to exclude"),
    "queue_types": Param(QUEUE_TYPES, type="array", items={"type": "string", "enum": QUEUE_TYPES}, minItems=1, uniqueItems=True,
                         description="the queue types to back up"),
    "compression": Param("zstd", type="string", enum=["zstd", "lz4", "none"], description="the segments' compression"),
    "compression_level": Param(3, type="integer", minimum=1, maximum=22, description="zstd level"),
    "segment_max_bytes": Param(DEFAULT_SEGMENT_MAX_BYTES, type="integer", minimum=1, maximum=MAX_SEGMENT_MAX_BYTES,
                               description="a segment is sealed when its records reach this many bytes (at most 128 MiB, "
                                           "so that readers take every segment at their default cap)"),
    "segment_max_interval_ms": Param(DEFAULT_SEGMENT_MAX_INTERVAL_MS, type="integer", minimum=1,
                                     description="... or span this many milliseconds of backup time"),
    "include_definitions": Param(True, type="boolean",
                                 description="also store the broker's definitions "
                                             "(vhosts, policies, exchanges, queues, bindings)"),
    "include_users": Param(False, type="boolean",
                           description="keep users (with password hashes) and permissions in the definitions backup; "
                                       "off: neither is stored (no restore imports them)"),
    "break_lock": Param(False, type="boolean",
                        description="take over the lock of a run of the same backup_id that crashed (see docs/reliability.md)"),
    "streams": Param("incremental", type="string", enum=list(STREAM_MODES),
                     description="incremental: a stream's backup lists its previous backup's segments and adds what is new; "
                                 "full: each backup holds its own copy of every stream"),
    "verify": Param("deep", type="string", enum=["none", "quick", "deep"],
                    description="after encoding: quick (every segment present, right size) "
                                "or deep (every segment read back from the storage and checked)"),
    "segment_work": Param("auto", type="string", enum=list(PLACEMENTS),
                          description="where segments are encoded and verified: auto (a queue with at most "
                                      "in_process_max_bytes staged in its capture task, the rest in one Spark "
                                      "application), process (every queue in its task), spark (every queue on Spark)"),
    "compact_below_bytes": Param(None, type=["null", "integer"], minimum=1,
                                 description="after encoding, merge each queue's runs of segments smaller than this "
                                             "(bytes), such as a long capture's hourly cuts; null: no merging"),
    "in_process_max_bytes": Param(DEFAULT_IN_PROCESS_MAX_BYTES, type="integer", minimum=0,
                                  description="auto: a queue with more staged bytes than this goes to Spark"),
    "allow_delivery_count_increase": Param(False, type="boolean",
                                           description="back up quorum queues whose returns count toward a delivery limit"),
    "on_unsafe_queue": Param("skip", type="string", enum=["skip", "fail"],
                             description="a queue that cannot be read without changing it (docs/operations.md): skip "
                                         "leaves it out, named with its reason; fail fails the run"),
    "consumer_timeout_ms": Param(DEFAULT_CONSUMER_TIMEOUT_MS, type="integer", minimum=1000,
                                 description="the broker's consumer_timeout (rabbitmq.conf); a capture gives every "
                                             "message back before it runs out"),
    "max_hold_ms": Param(None, type=["null", "integer"], minimum=1000,
                         description="the longest a capture may withhold a queue's messages from its consumers "
                                     "(docs/production.md); null: as long as consumer_timeout_ms allows"),
    "max_capture_tasks": Param(256, type="integer", minimum=1, maximum=1024,
                               description="at most this many capture tasks (Airflow maps at most [core] max_map_length, "
                                           "1,024); more queues than that are captured in groups, one after another"),
    "retention": Param(None, type=["null", "object"], additionalProperties=False, properties=RETENTION_PROPERTIES,
                       description='e.g. {"keep_last": 7, "keep_daily": 7, "keep_monthly": 12}; only complete, '
                                   'superseded backups go; null: [rbak] retention. Never below [rbak] retention: '
                                   'a run asking for less fails at its first task'),
    "copy_to": Param(None, type=["null", "string"],
                     description="a second location (storage URL) the backup is copied to after it is complete, with "
                                 "the chain bases it needs, verified there; null: no copy"),
    "copy_retention": Param(None, type=["null", "object"], additionalProperties=False,
                            properties=RETENTION_PROPERTIES,
                            description="the copy location's own retention, applied there after the copy (as retention); "
                                        "null: [rbak] copy_retention, never below it"),
}

#: The trigger form's sections, in order (Airflow shows each param under its ``section``).
SECTIONS = {
    "Broker and storage": ("rabbitmq_conn_id", "spark_conn_id", "storage_url", "backup_id"),
    "What to back up": ("vhosts", "include", "exclude", "queue_types", "streams", "include_definitions", "include_users"),
    "Queues that cannot be read unchanged": ("on_unsafe_queue", "allow_delivery_count_increase", "consumer_timeout_ms",
                                             "max_hold_ms"),
    "Segments": ("compression", "compression_level", "segment_max_bytes", "segment_max_interval_ms", "segment_work",
                 "in_process_max_bytes", "compact_below_bytes"),
    "After the backup": ("verify", "retention", "copy_to", "copy_retention"),
    "Running": ("max_capture_tasks", "break_lock"),
}
for _section, _names in SECTIONS.items():
    for _name in _names:
        PARAMS[_name].schema["section"] = _section


with DAG(
    dag_id="rbak_backup",
    schedule=CONFIG.schedule("backup_schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    params=PARAMS,
    render_template_as_native_obj=True,
    default_args=CONFIG.task_defaults(),
    tags=["rbak", "rabbitmq", "backup"],
    doc_md=__doc__,
):
    common = {"storage_url": "{{ params.storage_url }}", "backup_id": BACKUP_ID}
    broker = {**common, "rabbitmq_conn_id": "{{ params.rabbitmq_conn_id }}"}
    spark = {**common, "conn_id": "{{ params.spark_conn_id }}"}

    discover = RbakDiscoverQueuesOperator(
        task_id="discover", vhosts="{{ params.vhosts }}", include="{{ params.include }}", exclude="{{ params.exclude }}",
        queue_types="{{ params.queue_types }}", break_lock="{{ params.break_lock }}",
        allow_delivery_count_increase="{{ params.allow_delivery_count_increase }}",
        max_capture_tasks="{{ params.max_capture_tasks }}", retention="{{ params.retention }}",
        copy_retention="{{ params.copy_retention }}", include_definitions="{{ params.include_definitions }}",
        spark_conn_id="{{ params.spark_conn_id }}", **broker)
    definitions = RbakExportDefinitionsOperator(
        task_id="export_definitions", include_definitions="{{ params.include_definitions }}",
        include_users="{{ params.include_users }}", compression="{{ params.compression }}", **broker)
    capture = RbakCaptureQueueOperator.partial(
        task_id="capture", compression="{{ params.compression }}",
        allow_delivery_count_increase="{{ params.allow_delivery_count_increase }}",
        on_unsafe_queue="{{ params.on_unsafe_queue }}", consumer_timeout_ms="{{ params.consumer_timeout_ms }}",
        max_hold_ms="{{ params.max_hold_ms }}", streams="{{ params.streams }}", segment_work=SEGMENT_WORK,
        map_index_template=GROUP_LABEL, **CONFIG.queue_task_limits(), **broker,
    ).expand(queue_info=discover.output)
    encode = RbakBackupSegmentsOperator(
        task_id="encode", queues=QUEUE_REFS, captures=capture.output, segment_work=SEGMENT_WORK, **spark)
    finalize = RbakFinalizeManifestOperator(
        task_id="finalize", encode_report_key=ENCODE_REPORT, captures=capture.output, retention="{{ params.retention }}",
        **common)

    second_copy = RbakCopyBackupOperator(
        task_id="copy", copy_to="{{ params.copy_to }}", copy_retention="{{ params.copy_retention }}", **common)

    discover >> definitions >> capture >> encode >> finalize >> second_copy
