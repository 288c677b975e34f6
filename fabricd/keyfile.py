"""The cluster key file: the secret every node of one fabric holds (docs/security.md, "Peers").

A key file holds at least MIN_KEY_BYTES bytes; surrounding whitespace is not part of the key, so
a line written by ``echo`` or a Secret mounted by an orchestrator both work. ``fabricctl
cluster-key FILE`` writes a new one: 32 random bytes in hex, readable by its owner only.
"""

from __future__ import annotations

import os
import secrets
import stat

from fabricd import sockdir
from proto.peer_auth import MIN_KEY_BYTES


class BadKeyFile(Exception):
    """The cluster key file cannot be used."""


def load(path: str) -> bytes:
    """The key in ``path``."""
    try:
        with open(path, "rb") as f:
            key = f.read(64 * 1024 + 1).strip()
    except OSError as err:
        raise BadKeyFile(f"cannot read the cluster key {path}: {err.strerror}") from None
    if not MIN_KEY_BYTES <= len(key) <= 64 * 1024:
        raise BadKeyFile(
            f"the cluster key {path} holds {len(key)} bytes; a key is {MIN_KEY_BYTES} bytes to "
            "64 KiB (fabricctl cluster-key FILE makes one)"
        )
    return key


def generate(path: str) -> None:
    """Write a new key to ``path``, owner-only; an existing file is never replaced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")


def for_this_user(directory: str) -> str:
    """A key for the nodes this user starts on this machine (the demo, benchmarks, tests):
    ``directory``/cluster.key, made once in an owner-only directory and used from then on."""
    try:
        sockdir.prepare(directory, None)
    except sockdir.UnsafeSocketDir as err:
        raise BadKeyFile(str(err)) from None
    path = os.path.join(directory, "cluster.key")
    try:
        generate(path)
    except FileExistsError:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise BadKeyFile(f"{path} is not a regular file") from None
    return path
