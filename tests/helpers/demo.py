"""Driving a running Gradio demo: a free port and a client that waits for the server."""

import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(url: str, timeout: float = 0):
    """A gradio_client Client, retried until the server answers or `timeout` seconds pass."""
    from gradio_client import Client

    deadline = time.time() + timeout
    while True:
        try:
            return Client(url, verbose=False)
        except Exception:  # the server is not up yet: connection refused, or its config not served
            if time.time() > deadline:
                raise
            time.sleep(1)
