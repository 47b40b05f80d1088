"""The Airflow plugin of airflow-rbak: the "RabbitMQ backups" view (registered by the ``airflow.plugins`` entry point).

It mounts the view's FastAPI app on the api-server at ``/rbak`` and links it from Airflow's navigation
(Browse → RabbitMQ backups, shown inside Airflow's UI). The entry point, not the provider info's
``plugins``, registers it: Airflow reads a provider's plugins only with ``[core] lazy_discover_providers
= False``, and registering both would load it twice. Every Airflow process loads plugins, so the app
(FastAPI, Airflow's API security) is imported only when the api-server asks for it.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_rbak.ui import URL_PREFIX


class RbakPlugin(AirflowPlugin):
    """Lists the backups of every configured location, with Restore… and Verify for users who may trigger them."""

    name = "rbak"
    external_views = [{
        "name": "RabbitMQ backups",
        "href": f"{URL_PREFIX}/",
        "destination": "nav",
        "category": "browse",
        "url_route": "rabbitmq-backups",
    }]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]  # read per instance, lazily
        from airflow_rbak.ui.app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "RabbitMQ backups"}]
