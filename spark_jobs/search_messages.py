"""Launcher for ``spark-submit spark_jobs/search_messages.py --storage-url URL --backup-id ID --output URL ...``.

The job itself is :mod:`airflow_rbak.segments.jobs.search_messages`, inside the package so that it ships with it
(``rbak search`` submits that file); this file only makes it runnable from a checkout.
"""

from __future__ import annotations

import sys

from airflow_rbak.segments.jobs.search_messages import main

if __name__ == "__main__":
    sys.exit(main())
