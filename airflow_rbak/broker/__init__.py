"""RabbitMQ clients and capture engines (AMQP via pika, Management HTTP API, streams).

No Airflow imports here: operators and tests use these directly.
"""
