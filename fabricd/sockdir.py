"""The directory of the daemon's Unix sockets, and their permissions (docs/security.md).

Whoever can write to the directory can put a socket of their own where consumers look for the
daemon's, so the daemon creates it (owner only, or owner and one named group) and refuses one
that another user owns or may write to: /tmp itself too (sticky, but a name left free while
the daemon is down can be taken by anyone)."""

from __future__ import annotations

import contextlib
import grp
import os
import socket
import stat
import struct

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (SO_PEERCRED)
BACKLOG = 4096  # connections not yet accepted (a burst of consumers starting at once)
ADMIN_MODE = 0o600  # the admin socket: its owner only, whatever the group


class UnsafeSocketDir(Exception):
    """The socket directory could let another user stand in for the daemon."""


def group_id(name: str | None) -> int | None:
    """The numeric id of the group named to share the consumer socket (None: no group)."""
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise UnsafeSocketDir(f"no group named {name!r}") from None


def prepare(directory: str, gid: int | None) -> None:
    """Create the socket directory, or check the one there: a directory (not a link to one),
    owned by this daemon's user and writable by nobody else."""
    directory = directory or "."
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o750 if gid is not None else 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeSocketDir(f"{directory} is not a directory (a symbolic link?)")
    if st.st_uid != os.geteuid():
        raise UnsafeSocketDir(
            f"{directory} belongs to uid {st.st_uid}, not to this daemon's uid {os.geteuid()}: "
            "its owner could put a socket of theirs where consumers look for the daemon"
        )
    if st.st_mode & 0o022:
        raise UnsafeSocketDir(
            f"{directory} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            "use a directory only this daemon's user may write"
        )
    if gid is not None and st.st_gid != gid:
        os.chown(directory, -1, gid)
        os.chmod(directory, 0o750)


def consumer_mode(gid: int | None) -> int:
    """The consumer socket's mode: its owner, and the group if one was named."""
    return 0o600 if gid is None else 0o660


def listen(path: str, mode: int, gid: int | None) -> socket.socket:
    """A Unix socket listening at ``path`` (a stale one there is replaced), given its mode and
    group before it listens: nobody connects while it is still open to more."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket, as the kernel tells it."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid: int = _UCRED.unpack(cred)[0]
    return pid
