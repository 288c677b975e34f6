"""The daemon's own argument checks of every consumer call the NIC core handles, by exact
DAT_RETURN (type and subtype), in memory.

Each call is sent exactly as written here, past the client library's checks (a consumer that is
not this library gets the same answers), so what is tested is the daemon's check. The subtype
rule is tests/conformance's: DAT_INVALID_PARAMETER carries DAT_INVALID_ARGn of the DAT 2.0 C
signature, DAT_INVALID_HANDLE the handle's kind, DAT_INVALID_STATE the EP's state. Beside each
refusal, the boundary value the check lets through is accepted, and a refused call changes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pytest

from client.core import Call, Event
from proto.codec import encode
from proto.constants import LMR_COOKIE_SIZE, EpState, MemPriv, MemType, PspFlags
from proto.constants import DatReturnSubtype as Sub
from proto.constants import EventNumber as E
from proto.errors import (
    DatConnQualInUse,
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
    DatModelNotSupported,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from proto.frames import FrameType
from proto.limits import MAX_PRIVATE_DATA
from tests.core.flows import Side, address, pair, raw, side
from tests.core.harness import Fabric, SimConsumer

NO_EP = 0xDEAD  # a handle nothing has
U64 = (1 << 64) - 1
Code = tuple[type[DatError], Sub]


def send(c: SimConsumer, method: str, args: object) -> Any:
    """One CALL frame whose args may be anything at all (not even a list); its result."""
    req_id, _ = c.core.call_frame(Call(method))  # the id the reply will carry
    c.send(encode(FrameType.CALL, req_id, method, args))
    c.fabric.run()
    return c.core.take_reply(req_id)


def code(err: DatError) -> Code:
    return type(err), err.subtype


@dataclass
class World:
    """Two connected sides (a on n1, b on n2) and, made on first use, the other objects the
    calls name."""

    fabric: Fabric
    a: Side
    b: Side

    @property
    def c(self) -> SimConsumer:
        return self.a.c

    def call(self, method: str, *args: object) -> Any:
        return self.c.call(raw(method, *args))

    @cached_property
    def fresh_ep(self) -> int:
        """An UNCONNECTED EP of a, in a's PZ, every EVD a's one EVD."""
        ep: int = self.call("ep_create", self.a.pz, self.a.evd, self.a.evd, self.a.evd, None)[0]
        return ep

    @cached_property
    def rmr(self) -> int:
        """An unbound RMR of a in a's PZ."""
        rmr: int = self.call("rmr_create", self.a.pz)[0]
        return rmr

    @cached_property
    def other_pz(self) -> int:
        pz: int = self.call("pz_create")[0]
        return pz

    @cached_property
    def segment(self) -> tuple[str, int]:
        """a's registered memory as a segment name and its size."""
        where = self.c.locate(self.a.address, self.a.size)
        assert where is not None and where[1] == 0
        return where[0], self.a.size

    def lmr_args(self, **change: object) -> list[object]:
        """A valid VIRTUAL dat_lmr_create over a's whole segment, with ``change`` applied."""
        segment, size = self.segment
        args: dict[str, object] = {
            "mem_type": MemType.VIRTUAL,
            "segment": segment,
            "offset": 0,
            "address": self.a.address,
            "cookie": None,
            "parent": 0,
            "length": size,
            "pz": self.a.pz,
            "privileges": MemPriv.ALL,
        }
        args.update(change)
        return list(args.values())

    def bind_args(self, **change: object) -> list[object]:
        """A valid dat_rmr_bind of the first 64 bytes of a's LMR on a's connected EP."""
        args: dict[str, object] = {
            "rmr": self.rmr,
            "lmr": self.a.lmr.handle,
            "triplet": self.a.triplet(0, 64),
            "privileges": MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE,
            "ep": self.a.ep,
            "cookie": 1,
            "flags": 0,
        }
        args.update(change)
        return list(args.values())

    def connect_args(self, **change: object) -> list[object]:
        """A valid dat_ep_connect of the fresh EP to b's node (conn_qual 1 listens there)."""
        host, port = address(self.b.c.node)
        args: dict[str, object] = {
            "ep": self.fresh_ep,
            "host": host,
            "port": port,
            "conn_qual": 1,
            "timeout_us": 10_000_000,
            "private_data": b"",
        }
        args.update(change)
        return list(args.values())

    @cached_property
    def request(self) -> Event:
        """A connection request pending at a, on a CONSUMER PSP (it carries no EP)."""
        self.call("psp_create", 40, self.a.evd, PspFlags.CONSUMER, 8)
        caller = side(self.fabric, self.b.c.node)
        caller.c.call(caller.c.core.ep_connect(caller.ep, address(self.c.node), 40, 10**7, b""))
        self.fabric.run()
        (request,) = self.a.events()
        assert request.event_number == E.CONNECTION_REQUEST_EVENT
        return request

    @cached_property
    def rsp_request(self) -> Event:
        """A connection request pending at a, on an RSP of a fresh EP (it carries that EP)."""
        self.call("rsp_create", 41, self.fresh_ep, self.a.evd)
        caller = side(self.fabric, self.b.c.node)
        caller.c.call(caller.c.core.ep_connect(caller.ep, address(self.c.node), 41, 10**7, b""))
        self.fabric.run()
        (request,) = self.a.events()
        assert (request.event_number, request.ep) == (E.CONNECTION_REQUEST_EVENT, self.fresh_ep)
        return request


@pytest.fixture
def w() -> World:
    fabric, a, b = pair()
    a.events()
    return World(fabric, a, b)


@dataclass(frozen=True)
class Row:
    """One refused call: its arguments (from the world) and the DAT_RETURN it must get."""

    name: str
    method: str
    args: Callable[[World], list[object]]
    error: type[DatError]
    subtype: Sub = Sub.NO_SUBTYPE

    def param(self) -> Any:
        return pytest.param(self, id=self.name)


P, H, S = DatInvalidParameter, DatInvalidHandle, DatInvalidState
TOO_LONG = b"x" * (MAX_PRIVATE_DATA + 1)

ROWS = [
    # -- the call itself ----------------------------------------------------------------------
    Row("unknown method", "no_such_call", lambda w: [], DatModelNotSupported),
    Row("pz_free: too few arguments", "pz_free", lambda w: [], P),
    Row("pz_free: too many arguments", "pz_free", lambda w: [w.a.pz, 1], P),
    # -- PZ ---------------------------------------------------------------------------------------
    Row("pz_free: not a PZ", "pz_free", lambda w: [w.a.lmr.handle], H, Sub.INVALID_HANDLE_PZ),
    Row("pz_free: not an int", "pz_free", lambda w: ["pz"], H, Sub.INVALID_HANDLE_PZ),
    Row("pz_free: in use", "pz_free", lambda w: [w.a.pz], S, Sub.INVALID_STATE_PZ_IN_USE),
    # -- LMR --------------------------------------------------------------------------------------
    Row(
        "lmr_create: unknown mem_type",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=7),
        DatModelNotSupported,
    ),
    Row(
        "lmr_create: mem_type not an int",
        "lmr_create",
        lambda w: w.lmr_args(mem_type="VIRTUAL"),
        DatModelNotSupported,
    ),
    Row(
        "lmr_create: not a PZ",
        "lmr_create",
        lambda w: w.lmr_args(pz=w.a.ep),
        H,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "lmr_create: undefined privilege bit",
        "lmr_create",
        lambda w: w.lmr_args(privileges=int(MemPriv.ALL) | 0x80),
        P,
        Sub.INVALID_ARG6,
    ),
    Row(
        "lmr_create: privileges not an int",
        "lmr_create",
        lambda w: w.lmr_args(privileges=None),
        P,
        Sub.INVALID_ARG6,
    ),
    Row("lmr_create: length 0", "lmr_create", lambda w: w.lmr_args(length=0), DatLengthError),
    Row("lmr_create: length -1", "lmr_create", lambda w: w.lmr_args(length=-1), DatLengthError),
    Row(
        "lmr_create: length not an int",
        "lmr_create",
        lambda w: w.lmr_args(length="64"),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "lmr_create: one byte past the segment",
        "lmr_create",
        lambda w: w.lmr_args(offset=1),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "lmr_create: negative offset",
        "lmr_create",
        lambda w: w.lmr_args(offset=-1, length=16),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "lmr_create: no such segment",
        "lmr_create",
        lambda w: w.lmr_args(segment="datfabric-nobody-0"),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "lmr_create: segment not a str",
        "lmr_create",
        lambda w: w.lmr_args(segment=5),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "lmr_create: SHARED_VIRTUAL without a cookie",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.SHARED_VIRTUAL),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "lmr_create: SHARED_VIRTUAL with a 39-byte cookie",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.SHARED_VIRTUAL, cookie=b"c" * 39),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "lmr_create: SHARED_VIRTUAL with a 41-byte cookie",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.SHARED_VIRTUAL, cookie=b"c" * 41),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "lmr_create: SHARED_VIRTUAL over memory that is not shared",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.SHARED_VIRTUAL, cookie=b"c" * LMR_COOKIE_SIZE),
        S,
    ),
    Row(
        "lmr_create: LMR over no LMR",
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.LMR, parent=w.a.pz),
        H,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row("lmr_free: not an LMR", "lmr_free", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_LMR),
    Row(
        "shared_attach: 39-byte cookie",
        "shared_attach",
        lambda w: [b"c" * 39, 4096],
        P,
        Sub.INVALID_ARG1,
    ),
    Row(
        "shared_attach: size 0",
        "shared_attach",
        lambda w: [b"c" * LMR_COOKIE_SIZE, 0],
        DatLengthError,
    ),
    Row(
        "lmr_sync: segments not a list",
        "lmr_sync",
        lambda w: [True, 5],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_sync: a triplet of two fields",
        "lmr_sync",
        lambda w: [True, [w.a.triplet(0, 8)[:2]]],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_sync: a negative length",
        "lmr_sync",
        lambda w: [False, [[w.a.address, -1, w.a.lmr.lmr_context]]],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_sync: no LMR has the context",
        "lmr_sync",
        lambda w: [True, [[w.a.address, 8, 0xDEAD]]],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_sync: another consumer's LMR",
        "lmr_sync",
        lambda w: [True, [w.b.triplet(0, 8)]],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_sync: one byte past the LMR",
        "lmr_sync",
        lambda w: [False, [w.a.triplet(0, 8), w.a.triplet(w.a.size - 7, 8)]],
        P,
        Sub.INVALID_ARG2,
    ),
    # -- RMR --------------------------------------------------------------------------------------
    Row("rmr_create: not a PZ", "rmr_create", lambda w: [w.a.ep], H, Sub.INVALID_HANDLE_PZ),
    Row("rmr_free: not an RMR", "rmr_free", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_RMR),
    Row(
        "rmr_bind: negative user_cookie",
        "rmr_bind",
        lambda w: w.bind_args(cookie=-1),
        P,
        Sub.INVALID_ARG7,
    ),
    Row(
        "rmr_bind: not an RMR",
        "rmr_bind",
        lambda w: w.bind_args(rmr=w.a.pz),
        H,
        Sub.INVALID_HANDLE_RMR,
    ),
    Row(
        "rmr_bind: not an EP",
        "rmr_bind",
        lambda w: w.bind_args(ep=w.a.pz),
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "rmr_bind: malformed triplet",
        "rmr_bind",
        lambda w: w.bind_args(triplet=[w.a.address, -1, w.a.lmr.lmr_context]),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "rmr_bind: triplet of two fields",
        "rmr_bind",
        lambda w: w.bind_args(triplet=[w.a.address, 8]),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "rmr_bind: undefined privilege bit",
        "rmr_bind",
        lambda w: w.bind_args(privileges=0x100),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "rmr_bind: no LMR has the context",
        "rmr_bind",
        lambda w: w.bind_args(lmr=NO_EP, triplet=[w.a.address, 64, 0xDEAD]),
        H,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row(
        "rmr_bind: the LMR's handle with another context",
        "rmr_bind",
        lambda w: w.bind_args(triplet=[w.a.address, 64, w.a.lmr.lmr_context ^ 1]),
        H,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row(
        "rmr_bind: another consumer's LMR",
        "rmr_bind",
        lambda w: w.bind_args(lmr=NO_EP, triplet=w.b.triplet(0, 64)),
        H,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row(
        "rmr_bind: one byte past the LMR",
        "rmr_bind",
        lambda w: w.bind_args(triplet=w.a.triplet(w.a.size - 63, 64)),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "rmr_bind: one byte before the LMR",
        "rmr_bind",
        lambda w: w.bind_args(triplet=[w.a.address - 1, 64, w.a.lmr.lmr_context]),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "rmr_bind: an RMR of another PZ",
        "rmr_bind",
        lambda w: w.bind_args(rmr=w.call("rmr_create", w.other_pz)[0]),
        DatProtectionViolation,
    ),
    Row(
        "rmr_bind: an UNCONNECTED EP",
        "rmr_bind",
        lambda w: w.bind_args(ep=w.fresh_ep),
        S,
        Sub.INVALID_STATE_EP_UNCONNECTED,
    ),
    # -- EP ---------------------------------------------------------------------------------------
    Row(
        "ep_create: not a PZ",
        "ep_create",
        lambda w: [w.a.lmr.handle, w.a.evd, w.a.evd, w.a.evd, None],
        H,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "ep_create: negative recv_evd",
        "ep_create",
        lambda w: [w.a.pz, -1, w.a.evd, w.a.evd, None],
        H,
        Sub.INVALID_HANDLE_EVD_RECV,
    ),
    Row(
        "ep_create: negative request_evd",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, -1, w.a.evd, None],
        H,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    Row(
        "ep_create: negative connect_evd",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, w.a.evd, -1, None],
        H,
        Sub.INVALID_HANDLE_EVD_CONN,
    ),
    Row(
        "ep_create: connect_evd not an int",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, w.a.evd, "evd", None],
        H,
        Sub.INVALID_HANDLE_EVD_CONN,
    ),
    Row(
        "ep_create: attr not a mapping",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, w.a.evd, w.a.evd, [1]],
        P,
        Sub.INVALID_ARG6,
    ),
    Row(
        "ep_create: unknown attr",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, w.a.evd, w.a.evd, {"colour": 1}],
        P,
        Sub.INVALID_ARG6,
    ),
    Row(
        "ep_create: attr past the provider's limit",
        "ep_create",
        lambda w: [w.a.pz, w.a.evd, w.a.evd, w.a.evd, {"max_rdma_read_out": 1 << 20}],
        P,
        Sub.INVALID_ARG6,
    ),
    Row(
        "ep_modify: not an EP",
        "ep_modify",
        lambda w: [w.a.pz, {}],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "ep_modify: changes not a mapping",
        "ep_modify",
        lambda w: [w.fresh_ep, [("pz", w.a.pz)]],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "ep_modify: a field that cannot change",
        "ep_modify",
        lambda w: [w.fresh_ep, {"state": 0}],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "ep_modify: CONNECTED",
        "ep_modify",
        lambda w: [w.a.ep, {"recv_evd": w.a.evd}],
        S,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "ep_modify: the PZ of a RESERVED EP",
        "ep_modify",
        lambda w: _reserved(w, {"pz": w.a.pz}),
        S,
        Sub.INVALID_STATE_EP_RESERVED,
    ),
    Row(
        "ep_modify: not a PZ",
        "ep_modify",
        lambda w: [w.fresh_ep, {"pz": w.a.lmr.handle}],
        H,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "ep_modify: negative recv_evd",
        "ep_modify",
        lambda w: [w.fresh_ep, {"recv_evd": -1}],
        H,
        Sub.INVALID_HANDLE_EVD_RECV,
    ),
    Row(
        "ep_modify: negative request_evd",
        "ep_modify",
        lambda w: [w.fresh_ep, {"request_evd": -1}],
        H,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    Row(
        "ep_modify: connect_evd not an int",
        "ep_modify",
        lambda w: [w.fresh_ep, {"connect_evd": "evd"}],
        H,
        Sub.INVALID_HANDLE_EVD_CONN,
    ),
    Row(
        "ep_modify: unknown attr",
        "ep_modify",
        lambda w: [w.fresh_ep, {"attr": {"colour": 1}}],
        P,
        Sub.INVALID_ARG6,
    ),
    Row("ep_free: not an EP", "ep_free", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_EP),
    Row(
        "ep_free: RESERVED",
        "ep_free",
        lambda w: _reserved(w, None)[:1],
        S,
        Sub.INVALID_STATE_EP_RESERVED,
    ),
    Row("ep_reset: not an EP", "ep_reset", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_EP),
    Row("ep_reset: CONNECTED", "ep_reset", lambda w: [w.a.ep], S, Sub.INVALID_STATE_EP_CONNECTED),
    Row(
        "ep_disconnect: not an EP",
        "ep_disconnect",
        lambda w: [w.a.pz, 0],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "ep_disconnect: undefined close flags",
        "ep_disconnect",
        lambda w: [w.a.ep, 2],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "ep_disconnect: negative close flags",
        "ep_disconnect",
        lambda w: [w.a.ep, -1],
        P,
        Sub.INVALID_ARG2,
    ),
    # -- connecting -------------------------------------------------------------------------------
    Row(
        "ep_connect: not an EP",
        "ep_connect",
        lambda w: w.connect_args(ep=w.a.pz),
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row("ep_connect: port 0", "ep_connect", lambda w: w.connect_args(port=0), P, Sub.INVALID_ARG2),
    Row(
        "ep_connect: port 65536",
        "ep_connect",
        lambda w: w.connect_args(port=65536),
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "ep_connect: host not a str",
        "ep_connect",
        lambda w: w.connect_args(host=10),
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "ep_connect: conn_qual -1",
        "ep_connect",
        lambda w: w.connect_args(conn_qual=-1),
        P,
        Sub.INVALID_ARG3,
    ),
    Row(
        "ep_connect: timeout 0",
        "ep_connect",
        lambda w: w.connect_args(timeout_us=0),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "ep_connect: timeout -1",
        "ep_connect",
        lambda w: w.connect_args(timeout_us=-1),
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "ep_connect: private data one byte too long",
        "ep_connect",
        lambda w: w.connect_args(private_data=TOO_LONG),
        P,
        Sub.INVALID_ARG6,
    ),
    Row(
        "ep_connect: an EP with no PZ",
        "ep_connect",
        lambda w: w.connect_args(ep=w.call("ep_create", 0, w.a.evd, w.a.evd, w.a.evd, None)[0]),
        S,
        Sub.INVALID_STATE_EP_NOTREADY,
    ),
    Row(
        "ep_connect: an EP with no connect EVD",
        "ep_connect",
        lambda w: w.connect_args(ep=w.call("ep_create", w.a.pz, w.a.evd, w.a.evd, 0, None)[0]),
        S,
        Sub.INVALID_STATE_EP_NOTREADY,
    ),
    Row(
        "ep_connect: CONNECTED",
        "ep_connect",
        lambda w: w.connect_args(ep=w.a.ep),
        S,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "psp_create: undefined flags",
        "psp_create",
        lambda w: [50, w.a.evd, 2, 8],
        P,
        Sub.INVALID_ARG4,
    ),
    Row("psp_create: backlog 0", "psp_create", lambda w: [50, w.a.evd, 0, 0], P, Sub.INVALID_ARG3),
    Row(
        "psp_create: conn_qual -1",
        "psp_create",
        lambda w: [-1, w.a.evd, 0, 8],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "psp_create: EVD 0",
        "psp_create",
        lambda w: [50, 0, 0, 8],
        H,
        Sub.INVALID_HANDLE_EVD_CR,
    ),
    Row(
        "psp_create: conn_qual in use",
        "psp_create",
        lambda w: [_listening(w, 51), w.a.evd, 0, 8],
        DatConnQualInUse,
    ),
    Row("psp_free: not a PSP", "psp_free", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_PSP),
    Row(
        "rsp_create: not an EP",
        "rsp_create",
        lambda w: [50, w.a.pz, w.a.evd],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "rsp_create: CONNECTED",
        "rsp_create",
        lambda w: [50, w.a.ep, w.a.evd],
        S,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "rsp_create: conn_qual -1",
        "rsp_create",
        lambda w: [-1, w.fresh_ep, w.a.evd],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "rsp_create: EVD -1",
        "rsp_create",
        lambda w: [50, w.fresh_ep, -1],
        H,
        Sub.INVALID_HANDLE_EVD_CR,
    ),
    Row("rsp_free: not an RSP", "rsp_free", lambda w: [w.a.pz], H, Sub.INVALID_HANDLE_RSP),
    Row(
        "cr_accept: not a CR",
        "cr_accept",
        lambda w: [w.a.pz, w.a.ep, b""],
        H,
        Sub.INVALID_HANDLE_CR,
    ),
    Row(
        "cr_accept: private data one byte too long",
        "cr_accept",
        lambda w: [w.request.cr, w.fresh_ep, TOO_LONG],
        P,
        Sub.INVALID_ARG4,
    ),
    Row(
        "cr_accept: no EP, and the request carries none",
        "cr_accept",
        lambda w: [w.request.cr, 0, b""],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "cr_accept: not an EP",
        "cr_accept",
        lambda w: [w.request.cr, w.a.pz, b""],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "cr_accept: an EP, but the request carries its own",
        "cr_accept",
        lambda w: [
            w.rsp_request.cr,
            w.call("ep_create", w.a.pz, w.a.evd, w.a.evd, w.a.evd, None)[0],
            b"",
        ],
        H,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "cr_accept: a CONNECTED EP",
        "cr_accept",
        lambda w: [w.request.cr, w.a.ep, b""],
        S,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "cr_accept: an EP with no connect EVD",
        "cr_accept",
        lambda w: [w.request.cr, w.call("ep_create", w.a.pz, w.a.evd, w.a.evd, 0, None)[0], b""],
        S,
        Sub.INVALID_STATE_EP_NOTREADY,
    ),
    Row("cr_reject: not a CR", "cr_reject", lambda w: [w.a.pz, b""], H, Sub.INVALID_HANDLE_CR),
    Row(
        "cr_reject: private data one byte too long",
        "cr_reject",
        lambda w: [w.request.cr, TOO_LONG],
        P,
        Sub.INVALID_ARG3,
    ),
]


def _listening(w: World, conn_qual: int) -> int:
    """A PSP of a listens on ``conn_qual`` (returned)."""
    w.call("psp_create", conn_qual, w.a.evd, PspFlags.CONSUMER, 8)
    return conn_qual


def _reserved(w: World, changes: object) -> list[object]:
    """The fresh EP made RESERVED by an RSP: [ep, changes]."""
    w.call("rsp_create", 60, w.fresh_ep, w.a.evd)
    return [w.fresh_ep, changes]


@pytest.mark.parametrize("row", [r.param() for r in ROWS])
def test_a_bad_argument_gets_its_exact_dat_return(w: World, row: Row) -> None:
    args = row.args(w)
    with pytest.raises(DatError) as refused:
        w.call(row.method, *args)
    assert code(refused.value) == (row.error, row.subtype), refused.value
    assert refused.value.code == row.error(row.subtype).code


RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE


def _bind_over(w: World, privileges: MemPriv, remote: MemPriv = RW, pz: int = 0) -> list[object]:
    """dat_rmr_bind of a's RMR over a new LMR of a's memory with ``privileges`` (in ``pz``,
    default a's), asking for ``remote``."""
    handle, context, *_ = w.call("lmr_create", *w.lmr_args(privileges=privileges, pz=pz or w.a.pz))
    return w.bind_args(lmr=handle, triplet=[w.a.address, 64, context], privileges=remote)


def _shared(w: World, cookie: bytes) -> str:
    """a joins the node's shared region of ``cookie`` (4096 bytes): its segment."""
    segment, length = w.call("shared_attach", cookie, 4096)
    assert length == 4096
    return str(segment)


COOKIE = b"k" * LMR_COOKIE_SIZE
MORE_ROWS = [
    Row(
        "rmr_bind: remote read over an LMR without local read",
        "rmr_bind",
        lambda w: _bind_over(w, MemPriv.LOCAL_WRITE | RW, MemPriv.REMOTE_READ),
        DatPrivilegesViolation,
    ),
    Row(
        "rmr_bind: remote write over an LMR without local write",
        "rmr_bind",
        lambda w: _bind_over(w, MemPriv.LOCAL_READ | RW, MemPriv.REMOTE_WRITE),
        DatPrivilegesViolation,
    ),
    Row(
        "rmr_bind: an EP of another PZ",
        "rmr_bind",
        lambda w: w.bind_args(
            ep=w.call("ep_create", w.other_pz, w.a.evd, w.a.evd, w.a.evd, None)[0]
        ),
        DatProtectionViolation,
    ),
    Row(
        "rmr_bind: an LMR of another PZ",
        "rmr_bind",
        lambda w: _bind_over(w, MemPriv.ALL, pz=w.other_pz),
        DatProtectionViolation,
    ),
    Row(
        "shared_attach: larger than the region of the cookie",
        "shared_attach",
        lambda w: [COOKIE, 4096 + 1] if _shared(w, COOKIE) else [],
        P,
        Sub.INVALID_ARG2,
    ),
    Row(
        "lmr_create: SHARED_VIRTUAL over the region of another cookie",
        "lmr_create",
        lambda w: w.lmr_args(
            mem_type=MemType.SHARED_VIRTUAL,
            segment=_shared(w, COOKIE),
            cookie=b"o" * LMR_COOKIE_SIZE,
            length=4096,
        ),
        S,
    ),
]


@pytest.mark.parametrize("row", [r.param() for r in MORE_ROWS])
def test_a_bad_argument_of_memory_calls_gets_its_exact_dat_return(w: World, row: Row) -> None:
    test_a_bad_argument_gets_its_exact_dat_return(w, row)


# -- what the checks let through ----------------------------------------------------------------

ACCEPTED: dict[str, tuple[str, Callable[[World], list[object]]]] = {
    "lmr_create: the whole segment": ("lmr_create", lambda w: w.lmr_args()),
    "lmr_create: its last byte": ("lmr_create", lambda w: w.lmr_args(offset=4095, length=1)),
    "lmr_create: an LMR over an LMR": (
        "lmr_create",
        lambda w: w.lmr_args(mem_type=MemType.LMR, parent=w.a.lmr.handle),
    ),
    "lmr_create: SHARED_VIRTUAL over its cookie's region": (
        "lmr_create",
        lambda w: w.lmr_args(
            mem_type=MemType.SHARED_VIRTUAL, segment=_shared(w, COOKIE), cookie=COOKIE, length=4096
        ),
    ),
    "shared_attach: the region's size again": (
        "shared_attach",
        lambda w: [COOKIE, 4096] if _shared(w, COOKIE) else [],
    ),
    "lmr_sync: up to the LMR's last byte, and a zero length naming nothing": (
        "lmr_sync",
        lambda w: [True, [w.a.triplet(w.a.size - 8, 8), [0, 0, 0xDEAD]]],
    ),
    "rmr_bind: the largest user_cookie": ("rmr_bind", lambda w: w.bind_args(cookie=U64)),
    "rmr_bind: up to the LMR's last byte": (
        "rmr_bind",
        lambda w: w.bind_args(triplet=w.a.triplet(w.a.size - 64, 64)),
    ),
    "rmr_bind: no such LMR handle, the context decides": (
        "rmr_bind",
        lambda w: w.bind_args(lmr=NO_EP),
    ),
    "rmr_bind: remote read only, over a local-read LMR": (
        "rmr_bind",
        lambda w: _bind_over(w, MemPriv.LOCAL_READ, MemPriv.REMOTE_READ),
    ),
    "rmr_bind: remote write only, over a local-write LMR": (
        "rmr_bind",
        lambda w: _bind_over(w, MemPriv.LOCAL_WRITE, MemPriv.REMOTE_WRITE),
    ),
    "ep_create: NULL PZ and EVDs": ("ep_create", lambda w: [0, 0, 0, 0, None]),
    "ep_modify: EVDs of a RESERVED EP": (
        "ep_modify",
        lambda w: _reserved(w, {"recv_evd": w.a.evd, "connect_evd": 0}),
    ),
    "ep_connect: port 65535, conn_qual 0, timeout 1 us, the longest private data": (
        "ep_connect",
        lambda w: w.connect_args(
            port=65535, conn_qual=0, timeout_us=1, private_data=b"p" * MAX_PRIVATE_DATA
        ),
    ),
    "ep_connect: port 1": ("ep_connect", lambda w: w.connect_args(port=1)),
    "psp_create: conn_qual 0, backlog 1, PROVIDER": (
        "psp_create",
        lambda w: [0, w.a.evd, PspFlags.PROVIDER, 1],
    ),
    "rsp_create: conn_qual 0": ("rsp_create", lambda w: [0, w.fresh_ep, w.a.evd]),
    "cr_accept: the longest private data": (
        "cr_accept",
        lambda w: [w.request.cr, w.fresh_ep, b"p" * MAX_PRIVATE_DATA],
    ),
    "cr_reject: the longest private data": (
        "cr_reject",
        lambda w: [w.request.cr, b"p" * MAX_PRIVATE_DATA],
    ),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_boundary_value_is_accepted(w: World, name: str) -> None:
    method, args = ACCEPTED[name]
    w.call(method, *args(w))


def test_a_zero_length_bind_names_no_lmr_and_returns_no_key(w: World) -> None:
    """dat_rmr_bind with segment_length 0: whatever the LMR and context, it unbinds (key 0)."""
    (key,) = w.call("rmr_bind", *w.bind_args(lmr=NO_EP, triplet=[0, 0, 0xDEAD]))
    assert key == 0
    (key,) = w.call("rmr_bind", *w.bind_args())
    assert key != 0


# -- a refused call changes nothing -------------------------------------------------------------


def _ep_user(w: World, pz: int) -> Callable[[], object]:
    ep = w.call("ep_create", pz, 0, 0, 0, None)[0]
    return lambda: w.call("ep_free", ep)


def _lmr_user(w: World, pz: int) -> Callable[[], object]:
    lmr = w.call("lmr_create", *w.lmr_args(pz=pz))[0]
    return lambda: w.call("lmr_free", lmr)


def _rmr_user(w: World, pz: int) -> Callable[[], object]:
    rmr = w.call("rmr_create", pz)[0]
    return lambda: w.call("rmr_free", rmr)


def _moved_ep_user(w: World, pz: int) -> Callable[[], object]:
    w.call("ep_modify", w.fresh_ep, {"pz": pz})
    return lambda: w.call("ep_free", w.fresh_ep)


USERS = {"an EP": _ep_user, "an LMR": _lmr_user, "an RMR": _rmr_user, "a moved EP": _moved_ep_user}


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_pz_is_in_use_exactly_while_something_uses_it(w: World, user: str) -> None:
    """dat_pz_free: DAT_INVALID_STATE_PZ_IN_USE while an EP, LMR or RMR is in the PZ; once
    that is freed, the PZ frees."""
    pz = w.other_pz
    free = USERS[user](w, pz)
    with pytest.raises(DatInvalidState) as refused:
        w.call("pz_free", pz)
    assert refused.value.subtype == Sub.INVALID_STATE_PZ_IN_USE
    free()
    w.call("pz_free", pz)
    with pytest.raises(DatInvalidHandle):
        w.call("pz_free", pz)


def test_an_ep_moved_to_another_pz_leaves_the_first(w: World) -> None:
    """dat_ep_modify of the PZ: the old PZ is no longer in use by the EP, the new one is."""
    first = w.other_pz
    ep = w.call("ep_create", first, 0, 0, 0, None)[0]
    w.call("ep_modify", ep, {"pz": w.a.pz})
    w.call("pz_free", first)
    assert w.c.state is not None and w.c.state.eps[ep].pz == w.a.pz


def test_a_refused_ep_modify_changes_nothing(w: World) -> None:
    """dat_ep_modify with one bad change among good ones: refused, and no change applied."""
    ep = w.fresh_ep
    assert w.c.state is not None
    before = w.c.state.eps[ep]
    snapshot = (before.pz, before.recv_evd, before.request_evd, before.connect_evd, before.attr)
    for bad in ({"pz": w.a.lmr.handle}, {"connect_evd": -1}, {"attr": {"colour": 1}}):
        with pytest.raises(DatError):
            w.call("ep_modify", ep, {"recv_evd": 0, "request_evd": 0, "pz": w.other_pz, **bad})
    after = w.c.state.eps[ep]
    assert (after.pz, after.recv_evd, after.request_evd, after.connect_evd, after.attr) == snapshot


def test_a_refused_accept_or_reject_leaves_the_request_pending(w: World) -> None:
    """dat_cr_accept and dat_cr_reject refused for their arguments: the CR is still there and
    a good accept then connects."""
    cr = w.request.cr
    for method, args in (
        ("cr_accept", [cr, 0, b""]),
        ("cr_accept", [cr, w.fresh_ep, TOO_LONG]),
        ("cr_accept", [cr, w.a.ep, b""]),
        ("cr_reject", [cr, TOO_LONG]),
    ):
        with pytest.raises(DatError):
            w.call(method, *args)
    w.call("cr_accept", cr, w.fresh_ep, b"")
    w.fabric.run()
    assert [e.event_number for e in w.a.events()] == [E.CONNECTION_EVENT_ESTABLISHED]


def test_a_refused_rsp_create_leaves_the_ep_unconnected(w: World) -> None:
    """dat_rsp_create on a conn_qual in use: DAT_CONN_QUAL_IN_USE, the EP stays UNCONNECTED
    and can connect."""
    with pytest.raises(DatConnQualInUse):
        w.call("rsp_create", _listening(w, 52), w.fresh_ep, w.a.evd)
    assert w.c.state is not None and w.c.state.eps[w.fresh_ep].state == EpState.UNCONNECTED
    w.call("ep_connect", *w.connect_args())


def test_arguments_that_are_not_an_array(w: World) -> None:
    """A CALL whose args are not an array: DAT_INVALID_PARAMETER, the IA serves on."""
    with pytest.raises(DatInvalidParameter) as refused:
        send(w.c, "pz_free", {"pz": w.a.pz})
    assert refused.value.subtype == Sub.NO_SUBTYPE
    assert send(w.c, "pz_create", []) is not None


def test_a_request_id_that_is_not_an_int_closes_the_ia(w: World) -> None:
    """A CALL with a request id the reply could not carry is a protocol error: that IA closes,
    its connection is broken for the peer, the daemon serves others."""
    w.c.send(encode(FrameType.CALL, "one", "pz_create", []))
    w.fabric.run()
    assert w.c.closed_for and w.c.core.catastrophic
    assert [e.event_number for e in w.b.events()] == [E.CONNECTION_EVENT_DISCONNECTED]
