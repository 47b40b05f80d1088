"""The backups view's pages through a real Airflow api-server: each page's time as a browser gets it (login checked,
runs read from Airflow's database, HTML built), with the data of ``bench/ui_pages.py``.

Starts one api-server (``tests/airflow_stack.py``, SQLite, the SimpleAuthManager) on a folder holding ``--backups``
backups and one backup of ``--messages`` messages of 1 KiB, then times GETs of: the list, a backup's page, the
restore form, a queue's first messages page, the pages after it (each continuing the one before) and a filtered
page that matches nothing. Prints the median and the slowest of ``--repeat`` per page.

    .venv/bin/python bench/ui_http.py [--messages 200000] [--backups 200] [--repeat 9]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.catalog import write_manifests
from bench.ui_pages import write_messages
from tests.airflow_stack import airflow_stack


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--backups", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        url = (home / "backups").as_uri()
        write_manifests(url, args.backups, 10, 5)
        write_messages(url, args.messages, 128)
        stack = airflow_stack(home, {"admin": "admin"}, AIRFLOW__RBAK__STORAGE_URL=url)
        stack.start(only_api_server=True)
        try:
            session = requests.Session()
            session.headers.update({"Authorization": f"Bearer {stack.token_of('admin')}", "Accept": "text/html"})
            loc = session.get(f"{stack.url}/rbak/api/locations", headers={"Accept": "application/json"}).json()[0]["id"]
            messages = f"/rbak/backups/{loc}/messages-1/messages?queue=0"

            def get(path: str) -> tuple[float, requests.Response]:
                began = time.perf_counter()
                reply = session.get(f"{stack.url}{path}", timeout=120)
                return (time.perf_counter() - began) * 1000, reply

            def next_pages() -> list[float]:
                spent, reply = get(messages)
                times = []
                for _ in range(5):
                    at = reply.text.split('id="next" href="', 1)[1].split('"', 1)[0].split("at=", 1)[1]
                    spent, reply = get(f"{messages}&at={at}")
                    times.append(spent)
                return times

            pages = {"the list": "/rbak/", "a backup's page": f"/rbak/backups/{loc}/messages-1",
                     "the restore form": f"/rbak/restore/{loc}/messages-1", "messages: first page": messages,
                     "messages: a filter matching nothing": f"{messages}&message_id=none"}
            get("/rbak/")  # the first listing of the location
            print(f"{args.backups} backups, {args.messages:,} messages of 1 KiB; median and slowest of {args.repeat}:")
            for name, path in pages.items():
                times = [get(path)[0] for _ in range(args.repeat)]
                print(f"  {name:40} {statistics.median(times):7.1f} ms  (slowest {max(times):.1f} ms)")
            times = [t for _ in range(max(1, args.repeat // 3)) for t in next_pages()]
            print(f"  {'messages: next page, five in a row':40} {statistics.median(times):7.1f} ms  "
                  f"(slowest {max(times):.1f} ms)")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
