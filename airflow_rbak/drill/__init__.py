"""Restore drills: prove that a backup restores, by restoring it into scratch vhosts and comparing (no Airflow).

The ``rbak_drill`` DAG runs :class:`~airflow_rbak.drill.run.DrillRun`; docs/operations.md#restore-drills.
"""
