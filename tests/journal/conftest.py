"""The broker fixtures live with the broker tests; the journal reads the same broker."""

from tests.broker.conftest import behaviour, broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.cluster.conftest import cluster, cluster_vhost  # noqa: F401 - the cluster's, for test_journal_cluster.py
