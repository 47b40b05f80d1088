"""The RBAK Spark jobs: each module is a ``spark-submit`` script with ``parse_args``, ``run`` and a main guard.

They use the codec, storage and :mod:`airflow_rbak.segments`, never Airflow;
pyspark is imported only when a session is created.
"""
