"""Launcher for ``spark-submit spark_jobs/compact_segments.py --storage-url URL --backup-id ID ...``.

The job itself is :mod:`airflow_rbak.segments.jobs.compact_segments`, inside the package so that it
ships with it (wheel and ``py_files`` zip); this file only makes it runnable from a checkout.
"""

from __future__ import annotations

import sys

from airflow_rbak.segments.jobs.common import main
from airflow_rbak.segments.jobs.compact_segments import JOB, parse_args, run

if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
