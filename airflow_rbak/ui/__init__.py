"""The Airflow UI's "RabbitMQ backups" view: a catalog and pages without Airflow, the plugin and app with it."""

#: Where the plugin mounts the view's app on Airflow's api-server.
URL_PREFIX = "/rbak"
