"""airflow-rbak: RabbitMQ backup and restore in the RBAK format."""

__version__ = "0.1.0"
