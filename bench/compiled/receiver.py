"""inboxd's SMTP protocol as a server with nothing behind it: `python -m bench.compiled.receiver`.

The real `SmtpServer` and `Session` on uvloop, as `serve` runs them (logging at info, to stderr),
with the hooks of `steps.KnownRecipient`: the recipient is known and a delivery is done as soon as
it is asked, so the server's CPU per message under `smtp-source` is the protocol's and the
sockets', the same ground the C receiver (`smtp_receiver.c`) covers. Prints the port it listens
on (127.0.0.1 only) and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any, cast

import uvloop

from bench.compiled.steps import KnownRecipient, bench_recipient
from inboxd.config import Settings
from inboxd.logs import configure
from inboxd.smtp.server import SmtpServer


async def serve() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()
    done.set_result(None)
    hooks = KnownRecipient(bench_recipient(), done)
    settings = Settings(smtp_port=0, smtp_max_sessions=1000, smtp_max_sessions_per_ip=1000)
    server = SmtpServer(cast(Any, None), settings=settings, hooks=lambda session: hooks)
    await server.start()
    print(server.port, flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)


def main() -> int:
    configure(level="info", fmt="text")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
