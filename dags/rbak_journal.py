"""Archive the journal of each journaled vhost: one archive (an RBAK backup) per vhost per run.

Scheduled every 5 minutes (``[rbak] journal_schedule``), one run at a time. The vhosts come from the ``vhosts`` param
(default ``[rbak] journal_vhosts``); one mapped ``archive`` task each drains its vhost's ``rbak.journal`` for at most
``seconds`` (earlier once it is empty) into the location, acks what it stored once the archive's manifest is written,
and returns the archive's summary: its range, messages, gaps and what the journal does not cover. Each logs the
recovery point (now minus the newest archived clock mark) and records an Asset event on the location's Asset, as the
backup DAG's finalize does. ``rbak journal enable`` turns a vhost's journal on (docs/operations.md, "Continuous
capture (journal)").
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, AssetAlias, Param, task

from airflow_rbak.access import DAG_DEFAULT_CONNECTIONS
from airflow_rbak.airflow_settings import rbak_settings

DEFAULTS = DAG_DEFAULT_CONNECTIONS["rbak_journal"]  # always allowed (access.py)
CONFIG = rbak_settings()
#: Every archive's Asset event goes to its location's Asset through this alias (locations are known at run time).
JOURNAL_ASSET_ALIAS = "rbak-journal-archives"

with DAG(
    dag_id="rbak_journal",
    schedule=CONFIG.schedule("journal_schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    # a failed archive acked nothing: its retry (or the next run) archives the same messages again
    default_args=CONFIG.task_defaults(),
    params={
        "rabbitmq_conn_id": Param(DEFAULTS["rabbitmq_conn_id"], type="string", minLength=1,
                                  description="the broker's connection; list every node (its hosts) so that tracing is "
                                              "checked on each"),
        "storage_url": Param(CONFIG.storage_url(), type="string", minLength=1, description="where the archives go"),
        "vhosts": Param([v.strip() for v in CONFIG.text("journal_vhosts").split(",") if v.strip()], type="array",
                        items={"type": "string", "minLength": 1}, description="the journaled vhosts to archive"),
        "seconds": Param(60, type="number", exclusiveMinimum=0, maximum=3600,
                         description="each archive stops after this long, at a clock mark (earlier once the journal is "
                                     "empty)"),
        "max_messages": Param(50_000, type="integer", minimum=1, maximum=65_535,
                              description="at most this many messages per archive (the consumer's prefetch)"),
    },
    tags=["rbak", "rabbitmq", "journal"],
    doc_md=__doc__,
):

    @task
    def vhosts(params: dict | None = None) -> list[str]:
        """The vhosts to archive, one mapped ``archive`` task each; a location or connection ``[rbak]`` does not allow
        fails here."""
        from airflow_rbak.operators.access import refuse_unlisted_params

        refuse_unlisted_params(params)
        return list(dict.fromkeys(params["vhosts"]))

    @task(map_index_template="{{ vhost }}", outlets=[AssetAlias(JOURNAL_ASSET_ALIAS)])
    def archive(vhost: str, params: dict | None = None, outlet_events=None) -> dict:  # noqa: ANN001 - Airflow's
        """One archive of ``vhost``'s journal; its summary is the XCom and the Asset event's extra."""
        import logging

        from airflow_rbak.hooks.encryption import connection_keyring
        from airflow_rbak.hooks.rabbitmq import RabbitMQHook
        from airflow_rbak.hooks.storage import open_connected_storage
        from airflow_rbak.journal.archive_run import ArchiveSettings, JournalArchive
        from airflow_rbak.operators.finalize import backup_asset

        settings = rbak_settings()
        storage = open_connected_storage(params["storage_url"], settings.storage_conn_id(),
                                         keyring=connection_keyring(settings.encryption_conn_id()))
        run = ArchiveSettings(vhost, params["storage_url"], seconds=float(params["seconds"]),
                              max_messages=int(params["max_messages"]))
        result = JournalArchive(RabbitMQHook(params["rabbitmq_conn_id"]).get_conn(), run, storage).run()
        summary = {**result.summary(), "storage_url": storage.url}
        logging.getLogger(__name__).info("recovery point of %s: %.1f s (archive %s)", vhost,
                                         result.recovery_point_ms / 1000, result.backup_id)
        outlet_events[AssetAlias(JOURNAL_ASSET_ALIAS)].add(backup_asset(storage.url), extra=summary)
        return summary

    archive.expand(vhost=vhosts())
