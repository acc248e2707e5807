"""The server's secret key, kept outside the database, and what is derived from it.

The key comes from `INBOXD_SECRET_KEY` (or `INBOXD_SECRET_KEY_FILE`), else from
`<data dir>/secret-key`, created at first start with mode 0600 and refused when others may read
it. A database dump alone then mints no mailbox token and opens no webhook secret. Every process
of one deployment needs the same key.

Each use gets its own subkey (HKDF-SHA256, RFC 5869): mailbox tokens are signed with one, webhook
secrets are encrypted at rest with another (Fernet, stored as `v1:` + token, so the scheme can
change later). HKDF is a few lines of `hmac`; Fernet comes from `cryptography`, imported only when
a webhook secret is sealed or opened, because that package costs resident memory in every
process that imports it.

Rotation: the new key in `INBOXD_SECRET_KEY`, the old one in `INBOXD_SECRET_KEY_OLD`. Tokens
signed with the old key still verify; webhook secrets sealed with it are sealed again with the new
key at start (`reseal`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

    from inboxd.config import Settings

KEY_FILE = "secret-key"
SEALED_PREFIX = "v1:"
_SALT = b"inboxd keyring v1"
_TOKENS = b"mailbox tokens"
_WEBHOOK_SECRETS = b"webhook secrets"


class SecretKeyError(RuntimeError):
    """The secret key cannot be read, or its file is open to others: the server does not start."""


def derive(master: bytes, purpose: bytes) -> bytes:
    """A 32-byte subkey of `master` for one purpose (HKDF-SHA256, one block of output)."""
    prk = hmac.new(_SALT, master, hashlib.sha256).digest()
    return hmac.new(prk, purpose + b"\x01", hashlib.sha256).digest()


def load_key_file(data_dir: Path) -> str:
    """The key in `<data dir>/secret-key`, created (0600) when there is none yet."""
    path = data_dir / KEY_FILE
    if path.exists():
        return _read_key_file(path)
    # Written whole to a private file, then linked into place: a process starting at the same
    # moment either links first or reads the complete key of the one that did.
    key = secrets.token_urlsafe(32)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=data_dir, prefix=".secret-key.")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(key + "\n")
            os.link(temp, path)
        finally:
            os.unlink(temp)
    except FileExistsError:
        return _read_key_file(path)
    except OSError as exc:
        raise SecretKeyError(f"{path} cannot be created: {exc}") from exc
    return key


def _read_key_file(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise SecretKeyError(f"{path} is readable by others (mode {mode:o}); run `chmod 600 {path}` and start again")
    try:
        key = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretKeyError(f"{path} cannot be read: {exc}") from exc
    if not key:
        raise SecretKeyError(f"{path} is empty; delete it to have a new key made, or restore the old one")
    return key


class Keyring:
    """The current key and, during a rotation, the old ones: signing and sealing use the first."""

    def __init__(self, keys: Sequence[str], *, source: str) -> None:
        if not keys or not keys[0]:
            raise SecretKeyError("no secret key")
        self._masters = [k.encode("utf-8") for k in keys if k]
        self.source = source  # where the current key came from, for logs and `inboxd doctor`

    @classmethod
    def from_settings(cls, settings: Settings) -> Keyring:
        if settings.secret_key:
            current, source = settings.secret_key, "INBOXD_SECRET_KEY"
        else:
            current, source = load_key_file(settings.data_dir), str(settings.data_dir / KEY_FILE)
        old = [settings.secret_key_old] if settings.secret_key_old and settings.secret_key_old != current else []
        return cls([current, *old], source=source)

    @property
    def token_keys(self) -> list[bytes]:
        """Mailbox-token signing keys: the first signs, each verifies."""
        return [derive(m, _TOKENS) for m in self._masters]

    @cached_property
    def _fernet(self) -> MultiFernet:
        from cryptography.fernet import Fernet, MultiFernet

        return MultiFernet([Fernet(base64.urlsafe_b64encode(derive(m, _WEBHOOK_SECRETS))) for m in self._masters])

    def seal(self, secret: str) -> str:
        """`secret` encrypted with the current key, as stored."""
        return SEALED_PREFIX + self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, stored: str) -> str:
        """The secret a stored value holds; a value from before encryption is returned as it is."""
        if not stored.startswith(SEALED_PREFIX):
            return stored
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(stored[len(SEALED_PREFIX) :].encode("ascii")).decode("utf-8")
        except InvalidToken as exc:
            raise SecretKeyError(
                "a webhook secret was sealed with a key this server does not have "
                "(set INBOXD_SECRET_KEY_OLD to the previous key)"
            ) from exc

    def needs_resealing(self, stored: str) -> bool:
        """Whether `stored` is in the clear or sealed with an old key."""
        if not stored.startswith(SEALED_PREFIX):
            return True
        if len(self._masters) == 1:
            return False
        from cryptography.fernet import Fernet, InvalidToken

        current = Fernet(base64.urlsafe_b64encode(derive(self._masters[0], _WEBHOOK_SECRETS)))
        try:
            current.decrypt(stored[len(SEALED_PREFIX) :].encode("ascii"))
        except InvalidToken:
            return True
        return False
