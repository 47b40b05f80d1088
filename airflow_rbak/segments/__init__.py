"""Turning a backup's staging into verified segments, and checking stored segments: the same units of work run in
a task's own process or as one Spark application.

Nothing here imports Airflow, and only :mod:`.jobs` imports pyspark (when a session starts): each unit takes
plain, picklable arguments (a storage URL, keys, settings), opens storage itself and returns JSON-able results.
"""
