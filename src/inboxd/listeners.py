"""Listening sockets: bound with one line of error naming the setting to change when they cannot be,
and uvicorn run on a bound socket. `app.py` opens every listener through here."""

from __future__ import annotations

import asyncio
import errno
import socket

import uvicorn

__all__ = ["ListenError", "bind", "serve_on"]


class ListenError(OSError):
    """A listener that cannot be opened; the message is one line naming the setting to change.
    An `OSError`, as the failed bind it stands for."""


# Each listener: its name in messages, and the settings of its port and host.
_LISTENERS = {
    "http": ("HTTP", "INBOXD_HTTP_PORT", "INBOXD_HTTP_HOST"),
    "smtp": ("SMTP", "INBOXD_SMTP_PORT", "INBOXD_SMTP_HOST"),
    "submission": ("submission", "INBOXD_SUBMISSION_PORT", "INBOXD_SUBMISSION_HOST"),
    "submissions": ("implicit-TLS submission", "INBOXD_SUBMISSIONS_PORT", "INBOXD_SUBMISSION_HOST"),
    "metrics": ("metrics", "INBOXD_METRICS_LISTEN", "INBOXD_METRICS_LISTEN"),
}


def bind(host: str, port: int, *, listener: str, reuse_port: bool = False) -> socket.socket:
    sock: socket.socket | None = None
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            # `--workers N`: every worker listens on the same port; the kernel spreads connections.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        # Accepted connections inherit this on Linux: without it, Nagle holds a response body that
        # follows its headers until the client's delayed ACK, 40 ms per request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise ListenError(_listen_failure(exc, host=host, port=port, listener=listener)) from exc
    return sock


def _listen_failure(exc: OSError, *, host: str, port: int, listener: str) -> str:
    """One line: what could not listen where, why, and which setting to change."""
    what, port_setting, host_setting = _LISTENERS[listener]
    where = f"{what} port {port} on {host}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where} is already in use (another inboxd, or another program, listens there): "
            f"set {port_setting} to a free port, or stop that program"
        )
    if exc.errno == errno.EACCES:
        return f"{where} needs privileges (root or CAP_NET_BIND_SERVICE below 1024): set {port_setting} above 1023"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"{what} host {host} is not an address of this machine: set {host_setting}"
    return f"{where} cannot be opened ({exc.strerror or exc}): check {host_setting} and {port_setting}"


async def serve_on(server: uvicorn.Server, sock: socket.socket) -> asyncio.Task[None]:
    """Run a uvicorn server on a bound socket; return once it accepts connections."""
    # `_serve` is `serve` without its signal capture: the process owner handles signals.
    task = asyncio.get_running_loop().create_task(server._serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the HTTP server stopped during start-up")
        await asyncio.sleep(0.005)
    return task
