"""The deployed-stack tests use the broker fixtures and the Spark cluster of the other suites."""

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.spark_cluster import spark_cluster  # noqa: F401 - fixture
