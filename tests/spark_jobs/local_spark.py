"""An in-process stand-in for the few SparkSession calls the jobs make, for fast job-logic tests.

Each task function is pickled and unpickled with Spark's own cloudpickle
before it runs, as on a real executor, so a task that captures an
unpicklable object (an open storage, say) fails here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyspark import cloudpickle


class LocalRDD:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def map(self, fn: Callable[[Any], Any]) -> LocalRDD:
        task = cloudpickle.loads(cloudpickle.dumps(fn))
        return LocalRDD([task(item) for item in self.items])

    def flatMap(self, fn: Callable[[Any], Iterable[Any]]) -> LocalRDD:
        task = cloudpickle.loads(cloudpickle.dumps(fn))
        return LocalRDD([out for item in self.items for out in task(item)])

    def collect(self) -> list[Any]:
        return list(self.items)


class LocalContext:
    defaultParallelism = 2
    applicationId = "local-in-process"

    def __init__(self) -> None:
        self.partitions: list[int] = []

    def parallelize(self, items: Iterable[Any], numSlices: int | None = None) -> LocalRDD:
        items = list(items)
        self.partitions.append(numSlices or 1)
        return LocalRDD(cloudpickle.loads(cloudpickle.dumps(items)))

    def setLogLevel(self, level: str) -> None:
        pass

    def getConf(self) -> dict[str, str]:
        """No submit wrote this application's properties: nothing is handed to it (a dict answers ``get``)."""
        return {}


class LocalSpark:
    def __init__(self) -> None:
        self.sparkContext = LocalContext()

    def stop(self) -> None:
        pass
