"""SMTP faults as context managers on the `mailbox` and `sandbox` fixtures (issue 27).

    with mailbox.faults(rcpt="452 4.2.2 Mailbox full", times=2):
        app.send_signup_mail(mailbox.address)   # the app must retry
    with mailbox.greylist(min_retry_s=1):
        ...

Entering sets the mailbox's (or the sandbox's) whole list of rules; leaving clears it, whether the
block raised or not. Each rule also carries `expires_in` (600 s by default), so a test process
that dies inside the block leaves nothing behind for long.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from inboxd.client import Client, Json

EXPIRES_IN = 600


class FaultsMixin:
    """`faults(...)` and `greylist(...)`; the fixture's class says where its faults live."""

    client: Client

    def _set_faults(self, rules: list[Json], expires_in: int) -> list[Json]:
        raise NotImplementedError

    def _clear_faults(self) -> None:
        raise NotImplementedError

    @contextmanager
    def faults(
        self,
        *rules: Mapping[str, Any],
        connect: str | None = None,
        auth: str | None = None,
        mail: str | None = None,
        rcpt: str | None = None,
        data: str | None = None,
        data_end: str | None = None,
        times: int | None = None,
        probability: float | None = None,
        expires_in: int = EXPIRES_IN,
    ) -> Iterator[list[Json]]:
        """Each stage given (`rcpt="452 4.2.2 Mailbox full"`) answers that reply, for the next `times`
        attempts or with `probability`; `rules` are full rules as the API takes them (`delay_ms`,
        `disconnect`, `rate`, `greylist`). Yields the rules as the server stored them."""
        built = [dict(rule) for rule in rules]
        stages = {"connect": connect, "auth": auth, "mail": mail, "rcpt": rcpt, "data": data, "data_end": data_end}
        for stage, reply in stages.items():
            if reply is None:
                continue
            rule: Json = {"stage": stage, "reply": reply}
            if times is not None:
                rule["times"] = times
            if probability is not None:
                rule["probability"] = probability
            built.append(rule)
        if not built:
            raise ValueError("faults() needs a stage's reply (e.g. rcpt='452 4.2.2 Mailbox full') or a rule")
        stored = self._set_faults(built, expires_in)
        try:
            yield stored
        finally:
            self._clear_faults()

    @contextmanager
    def greylist(self, min_retry_s: float = 1.0, *, expires_in: int = EXPIRES_IN) -> Iterator[list[Json]]:
        """Greylisting: each (client, sender, recipient) is answered 451 4.7.1 at RCPT until it
        retries at least `min_retry_s` seconds after its first attempt."""
        with self.faults({"stage": "rcpt", "greylist": {"min_retry_s": min_retry_s}}, expires_in=expires_in) as stored:
            yield stored


class MailboxFaults(FaultsMixin):
    id: str

    def _set_faults(self, rules: list[Json], expires_in: int) -> list[Json]:
        return self.client.set_faults(self.id, rules, expires_in=expires_in)

    def _clear_faults(self) -> None:
        self.client.clear_faults(self.id)


class SandboxFaults(FaultsMixin):
    def _set_faults(self, rules: list[Json], expires_in: int) -> list[Json]:
        return self.client.set_sandbox_faults(rules, expires_in=expires_in)

    def _clear_faults(self) -> None:
        self.client.clear_sandbox_faults()
