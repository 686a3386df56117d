"""Running the proxy: ``serve`` (the CLI's, until a signal) and ``ServerThread`` (tests, benchmarks).

Both use uvicorn. On SIGINT / SIGTERM uvicorn stops accepting, lets in-flight
requests (streams included) finish for up to ``graceful`` seconds, then runs
the app's shutdown, which closes the upstream client and every session.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from pager.errors import ConfigError
from pager.proxy.gcpolicy import install as install_gc_policy, uninstall as uninstall_gc_policy

__all__ = ["ServerThread", "check_bind", "serve"]

log = logging.getLogger("pager.proxy")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless ``allow_remote``; warn when it is allowed."""
    if _is_loopback(host):
        return
    if not allow_remote:
        raise ConfigError(
            f"refusing to listen on {host}: the proxy forwards API keys; pass --allow-remote to serve other hosts"
        )
    log.warning("listening on %s: any host that reaches it can spend the API keys sent through it", host)


def serve(app: Any, host: str = "127.0.0.1", port: int = 8787, *, allow_remote: bool = False,
          graceful: float = 30.0, log_level: str = "info", tune_gc: bool = True) -> None:
    """Serve ``app`` until interrupted (blocking).

    ``tune_gc``: this process is the proxy's own, so its garbage collector
    runs ``pager.proxy.gcpolicy`` (full collections walk only what is new).
    """
    check_bind(host, allow_remote)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False,
        timeout_graceful_shutdown=graceful, lifespan="on",
    )
    if tune_gc:
        install_gc_policy()
    try:
        uvicorn.Server(config).run()
    finally:
        if tune_gc:
            uninstall_gc_policy()


class ServerThread:
    """Serve an ASGI app on 127.0.0.1 on a free port in a background thread.

    ``with ServerThread(app) as url: ...``; leaving the block asks uvicorn to
    shut down gracefully and waits for it.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", *, graceful: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=graceful
        )
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # not the main thread
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 20.0) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
