"""The Airflow UI's "RabbitMQ backups" view: a catalog and pages without Airflow, the plugin and app with it."""
