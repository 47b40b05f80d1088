"""The backup at rest: what a location holds and how it is checked (manifests, chains, the catalog, ownership, the
lock, validation, rebuild, retention, segment checks, the writer and the staging format).

Below the runs that write and read it (``backup/``, ``restore/``, ``segments/``); it imports only ``storage/``,
``codec/`` and the package's base modules. No Airflow, no broker.
"""
