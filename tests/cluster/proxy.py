"""A small TCP proxy in front of the cluster, as production clients often reach one: one address, every node behind it.

Each connection a client opens goes to the first node, in order, that takes a TCP connection (haproxy's ``balance
first`` with health checks, in effect): while node 1 is down, clients land on node 2. Bytes are relayed as they
come, both ways; either side closing closes the other. Listens on an ephemeral loopback port per protocol, so two
sessions never collide.

For faults: the replies can be lost (``replies_lost``); what clients send can be held instead of relayed
(``hold_requests``), then the clients cut off while the nodes' side stays open with those bytes still travelling
(``cut_clients``), as a client that went away while its node stays up; ``release`` delivers what was held.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

CONNECT_TIMEOUT_S = 5.0


class TcpProxy:
    """Forwards every connection accepted on ``port`` to the first of ``upstreams`` (host, port) that accepts."""

    def __init__(self, upstreams: Sequence[tuple[str, int]]) -> None:
        self.upstreams = list(upstreams)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        #: Which upstream each accepted connection went to, in order (a test can say where its client landed).
        self.routed: list[tuple[str, int]] = []
        #: Set, every byte the nodes send from then on is dropped (a network losing the replies: a publisher's
        #: confirms); what clients send still goes through.
        self.replies_lost = threading.Event()
        #: Set, what clients send from then on is held here, not relayed (until ``release``).
        self.hold_requests = threading.Event()
        self._held: dict[socket.socket, bytearray] = {}
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()
            return
        with self._lock:
            if self._closed:
                client.close()
                upstream.close()
                return
            self._open.update((client, upstream))
            self._pairs.append((client, upstream))
        threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()
        self._pump(client, upstream)

    def _connect(self) -> socket.socket | None:
        for address in self.upstreams:
            try:
                upstream = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                continue
            upstream.settimeout(None)
            with self._lock:
                self.routed.append(address)
            return upstream
        return None

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool = False) -> None:
        try:
            while data := source.recv(65536):
                if replies and (self.replies_lost.is_set() or sink in self._cut):
                    continue
                if not replies and self.hold_requests.is_set():
                    with self._lock:
                        self._held.setdefault(sink, bytearray()).extend(data)
                    continue
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # a cut client's node side stays open (its reply pump closes it when the node does)
            for sock in (source,) if source in self._cut else (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                with self._lock:
                    self._open.discard(sock)

    def cut_clients(self) -> None:
        """Close every client's side now; the nodes' sides stay open, holding what ``hold_requests`` kept."""
        with self._lock:
            clients = [client for client, _ in self._pairs if client not in self._cut]
            self._cut.update(clients)
        for client in clients:
            with suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def held_bytes(self) -> int:
        with self._lock:
            return sum(map(len, self._held.values()))

    def release(self) -> None:
        """Relay what was held to the nodes' sides still open, then close those: the travelling bytes arrive."""
        self.hold_requests.clear()
        with self._lock:
            held, self._held = self._held, {}
        for upstream, data in held.items():
            with suppress(OSError):
                upstream.sendall(data)
                upstream.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop accepting and cut every relayed connection."""
        with self._lock:
            self._closed = True
            sockets = list(self._open)
        self._listener.close()
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@contextmanager
def proxies(*upstream_lists: Sequence[tuple[str, int]]) -> Iterator[list[TcpProxy]]:
    """One proxy per list of upstreams (one per protocol), closed at the end."""
    started = [TcpProxy(upstreams) for upstreams in upstream_lists]
    try:
        yield started
    finally:
        for proxy in started:
            proxy.close()
