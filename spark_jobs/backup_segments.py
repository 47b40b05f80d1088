"""Launcher for ``spark-submit spark_jobs/backup_segments.py --storage-url URL --backup-id ID ...``.

The job itself is :mod:`airflow_rbak.segments.jobs.backup_segments`, inside the package so that it
ships with it (wheel and ``py_files`` zip); this file only makes it runnable from a checkout.
"""

from __future__ import annotations

import sys

from airflow_rbak.segments.jobs.backup_segments import JOB, parse_args, run
from airflow_rbak.segments.jobs.common import main

if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
