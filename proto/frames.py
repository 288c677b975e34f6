"""Frame types of the two planes and the field layout of each frame's header.

A frame header is a msgpack array ``[type, payload_len, *fields]``; the names below document the
fields and let the reader reject a header of the wrong arity before any handler sees it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

PROTOCOL_VERSION: Final = 7
MAX_PROTOCOL_VERSION: Final = 7
"""The one wire version this build speaks; HELLO carries the range a peer accepts."""

MIN_PROTOCOL_VERSION: Final = 7
MAX_HEADER_LEN: Final = 64 * 1024
"""Largest msgpack header accepted; a longer length prefix closes the connection."""

MAX_HELLO_NAME: Final = 256
"""Longest name a HELLO may carry (an IA's token, a node's name@host:port)."""

MAX_PAYLOAD_LEN: Final = 1 << 30
"""Largest payload accepted after a header (1 GiB)."""


class FrameType(IntEnum):
    """Every frame type; values below 0x40 are common, 0x40.. consumer plane, 0x80.. peer plane."""

    HELLO = 0x01
    ERROR = 0x02
    # consumer <-> its daemon
    CALL = 0x40
    REPLY = 0x41
    NOTIFY = 0x43
    DOORBELL = 0x48
    # driver <-> its daemon's segment desk (one request per connection; fds by SCM_RIGHTS)
    SEGMENT_GET = 0x4C
    SEGMENT_PUT = 0x4D
    SEGMENT = 0x4E
    # daemon <-> daemon
    CONN_REQ = 0x80
    CONN_ACCEPT = 0x81
    CONN_REJECT = 0x82
    CONN_RTU = 0x83
    DISCONNECT = 0x84
    HEARTBEAT = 0x85
    AUTH = 0x86
    WRITE = 0x90
    READ_REQ = 0x91
    READ_RESP = 0x92
    SEND = 0x93
    ACK = 0x94
    NAK = 0x95
    WRITES = 0x96
    ATOMIC = 0x97
    ATOMIC_RESP = 0x98
    WRITE_IMM = 0x99
    SENDS = 0x9A


FIELDS: Final[dict[FrameType, tuple[str, ...]]] = {
    FrameType.HELLO: ("min_version", "max_version", "role", "name"),
    FrameType.ERROR: ("reason",),
    FrameType.CALL: ("req_id", "method", "args"),
    FrameType.REPLY: ("req_id", "code", "message", "result"),
    FrameType.NOTIFY: ("evds",),
    FrameType.DOORBELL: ("ep",),
    FrameType.SEGMENT_GET: ("ia", "segment"),  # -> SEGMENT with the segment's memfd
    FrameType.SEGMENT_PUT: ("ia", "size"),  # with a memfd of the driver's -> SEGMENT (its name)
    FrameType.SEGMENT: ("segment", "size"),
    FrameType.CONN_REQ: ("conn_qual", "private_data", "rdma_read_in", "rdma_read_out"),
    FrameType.CONN_ACCEPT: ("private_data", "rdma_read_in", "rdma_read_out"),
    FrameType.CONN_REJECT: ("by_peer", "private_data"),
    FrameType.CONN_RTU: (),
    FrameType.DISCONNECT: (),
    FrameType.HEARTBEAT: (),
    FrameType.AUTH: ("nonce", "proof"),  # proto.peer_auth: the cluster key's challenge-response
    FrameType.WRITE: ("seq", "address", "rmr_context"),
    FrameType.READ_REQ: ("seq", "address", "rmr_context", "length", "reads_done"),
    FrameType.READ_RESP: ("seq",),
    FrameType.SEND: ("seq",),
    FrameType.ACK: ("seq",),
    FrameType.NAK: ("seq", "status"),
    FrameType.WRITES: ("seq", "ops"),  # ops: bin of WRITE_OPs (address, rmr_context, length)
    # the IB extensions: an atomic is answered like an RDMA Read (and takes a read credit);
    # opcode is proto.hostif.Opcode FETCH_ADD or CMP_SWAP, compare 0 for fetch-and-add
    FrameType.ATOMIC: (
        "seq",
        "address",
        "rmr_context",
        "opcode",
        "operand",
        "compare",
        "reads_done",
    ),
    FrameType.ATOMIC_RESP: ("seq", "original"),
    FrameType.WRITE_IMM: ("seq", "address", "rmr_context", "immediate"),  # consumes a receive
    FrameType.SENDS: ("seq", "lengths"),  # lengths: [length, ...] (proto.batch)
}

ROLE_CONSUMER: Final = "consumer"
ROLE_PEER: Final = "peer"
ROLE_ADMIN: Final = "admin"  # fault rules, revoke, crash, status: the admin socket only


def segment_desk(consumer_socket: str) -> str:
    """Where drivers of a daemon whose consumers connect at ``consumer_socket`` fetch and hand
    over shared-memory segments as descriptors (docs/host-interface.md section 2)."""
    return consumer_socket + ".seg"


def admin_socket(consumer_socket: str) -> str:
    """Where a daemon whose consumers connect at ``consumer_socket`` takes admin calls."""
    return consumer_socket + ".admin"
