"""Peer authentication: two daemons that share a cluster key prove it to each other.

After the HELLOs, on a new peer stream (docs/security.md, "Peers"):

1. the connecting side sends AUTH(nonce_c, b"")            its challenge
2. the accepting side answers AUTH(nonce_a, proof(ACCEPT))  its answer and its own challenge
3. the connecting side checks it, sends AUTH(b"", proof(CONNECT)) and then its CONN_REQ

Each proof is an HMAC-SHA256 under the key of the whole exchange: which side speaks, both fresh
nonces and both HELLO names, so a proof cannot be replayed on another stream, reflected to its
sender, or moved to another name. Without a key (an explicit choice, which the daemon warns
about) a side sends empty proofs and checks none; a side with a key refuses such a peer.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

from proto.codec import pack

NONCE_BYTES: Final = 16
MIN_KEY_BYTES: Final = 16
CONNECT: Final = "connect"
ACCEPT: Final = "accept"


@dataclass(frozen=True)
class Transcript:
    """What both proofs of one stream cover."""

    connect_nonce: bytes
    accept_nonce: bytes
    connect_name: str
    accept_name: str


def proof(key: bytes | None, side: str, t: Transcript) -> bytes:
    """The proof ``side`` sends: empty without a key."""
    if key is None:
        return b""
    message = pack([side, t.connect_nonce, t.accept_nonce, t.connect_name, t.accept_name])
    return hmac.new(key, message, hashlib.sha256).digest()


def check(key: bytes | None, side: str, t: Transcript, got: object) -> str:
    """Why the proof ``got`` from ``side`` is refused ("" when it is good, or no key is set)."""
    if key is None:
        return ""
    if not isinstance(got, bytes) or not got:
        return "it sent no proof of the cluster key (is it running without one?)"
    if not hmac.compare_digest(got, proof(key, side, t)):
        return "its proof of the cluster key is wrong (another key?)"
    return ""
