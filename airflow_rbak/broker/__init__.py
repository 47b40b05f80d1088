"""RabbitMQ clients (AMQP via pika, Management HTTP API, streams), discovery and definitions export.

The capture engines built on them live in ``capture/``; nothing here imports that package. No Airflow imports here.
"""

import logging as _logging

# pika logs every connection opened and closed at INFO: in task logs those lines buried the progress lines.
# Quiet unless someone chose pika's level themselves.
if _logging.getLogger("pika").level == _logging.NOTSET:
    _logging.getLogger("pika").setLevel(_logging.WARNING)
