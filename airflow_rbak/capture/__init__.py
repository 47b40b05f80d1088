"""Capture engines: read every message of a queue or stream into staging without removing any, resumably.

Built on the RabbitMQ clients in ``broker/`` (which never import this package). No Airflow imports here.
"""
