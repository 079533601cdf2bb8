"""A loopback TCP proxy that injects faults between kv0 and an object-store
emulator.

The tests put a FaultyProxy in front of moto's S3 server or Azurite and point
kv0's storage options at the proxy's URL. It forwards bytes unchanged until a
test switches it into a fault:

- ``stall(seconds)``: responses are held back (requests still reach the
  server) until the stall ends, after ``seconds`` or at ``resume()``;
- ``reset(share)``: each request, with probability ``share``, has its
  connection reset (RST) instead of getting its response; the server may or
  may not have acted on it, as with a real network fault;
- ``outage()``: every open connection is reset and every new one is reset
  as soon as it is accepted, until ``resume()``.

It knows nothing of HTTP: a "request" is a burst of bytes from the client
after the server last spoke. The random choices come from a seeded
generator, so a run can be repeated; the counters (``connections``,
``requests``, ``resets``) let a test check that a fault really happened.
"""

from __future__ import annotations

import random
import select
import socket
import struct
import threading
import time
from typing import Optional

_POLL = 0.05  # seconds between checks of the controls while a socket is idle


def _reset(sock: socket.socket) -> None:
    """Closes with RST rather than FIN: linger on, timeout zero."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class FaultyProxy:
    """Listens on 127.0.0.1 and forwards every connection to (host, port)."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stall_until: Optional[float] = None  # None while stalled: until resume()
        self._stalled = False
        self._reset_share = 0.0
        self._outage = False
        self._epoch = 0  # bumped by outage(): connections of older epochs are reset
        self._stopping = False
        self.connections = 0
        self.requests = 0
        self.resets = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(_POLL)
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept_loop, name="faulty-proxy",
                                          daemon=True)
        self._acceptor.start()

    # --- controls ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def passthrough(self) -> None:
        """Ends every fault: forward everything again."""
        with self._lock:
            self._stalled = False
            self._stall_until = None
            self._reset_share = 0.0
            self._outage = False

    resume = passthrough

    def stall(self, seconds: Optional[float] = None) -> None:
        """Holds responses back for `seconds` (None: until resume())."""
        with self._lock:
            self._stalled = True
            self._stall_until = None if seconds is None else time.monotonic() + seconds

    def reset(self, share: float) -> None:
        """Resets the connection of each request with probability `share`."""
        if not 0.0 <= share <= 1.0:
            raise ValueError("share is a probability")
        with self._lock:
            self._reset_share = share

    def outage(self) -> None:
        """Resets every connection, open or new, until resume()."""
        with self._lock:
            self._outage = True
            self._epoch += 1

    def stop(self) -> None:
        self._stopping = True
        self._acceptor.join(timeout=10)
        _close(self._listener)
        for t in list(self._threads):
            t.join(timeout=10)

    def __enter__(self) -> "FaultyProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- internals --------------------------------------------------------------

    def _is_stalled(self) -> bool:
        with self._lock:
            if not self._stalled:
                return False
            if self._stall_until is not None and time.monotonic() >= self._stall_until:
                self._stalled = False
                self._stall_until = None
                return False
            return True

    def _doomed(self) -> bool:
        with self._lock:
            self.requests += 1
            return self._reset_share > 0.0 and self._rng.random() < self._reset_share

    def _count_reset(self) -> None:
        with self._lock:
            self.resets += 1

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                outage, epoch = self._outage, self._epoch
            if outage:
                self._count_reset()
                _reset(client)
                continue
            t = threading.Thread(target=self._serve, args=(client, epoch), daemon=True)
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _serve(self, client: socket.socket, epoch: int) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            self._count_reset()
            _reset(client)
            return
        client.setblocking(True)
        upstream.setblocking(True)
        server_spoke_last = True  # so the client's first bytes start a request
        doomed = False
        try:
            while not self._stopping:
                readable, _, _ = select.select([client, upstream], [], [], _POLL)
                # Checked after the wait, so that nothing an outage started
                # during it gets through.
                with self._lock:
                    killed = self._epoch != epoch
                if killed:
                    self._count_reset()
                    _reset(client)
                    _reset(upstream)
                    return
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:  # one side closed: close the other
                        _close(client)
                        _close(upstream)
                        return
                    if sock is client:
                        if server_spoke_last:
                            doomed = self._doomed()
                            server_spoke_last = False
                        upstream.sendall(data)
                        continue
                    server_spoke_last = True
                    if doomed:
                        # The server got the request; the client never hears back.
                        self._count_reset()
                        _reset(client)
                        _reset(upstream)
                        return
                    while self._is_stalled():
                        with self._lock:
                            killed = self._epoch != epoch
                        if killed or self._stopping:
                            break
                        time.sleep(_POLL)
                    else:
                        client.sendall(data)
                        continue
                    self._count_reset()
                    _reset(client)
                    _reset(upstream)
                    return
        except OSError:
            _reset(client)
            _reset(upstream)
            return
        _close(client)
        _close(upstream)
