"""Units of work the Spark jobs distribute, in plain Python.

Nothing here imports pyspark or Airflow: each function takes plain,
picklable arguments (a storage URL, keys, settings), opens storage itself,
and returns JSON-able results, so the same code runs in a Spark task, in a
test, or in-process.
"""
