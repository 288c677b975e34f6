"""The consumer core's memory calls (client.core.ClientCore is a MemoryCalls): PZs, LMRs
(VIRTUAL, SHARED_VIRTUAL, LMR), shared regions, lmr_sync and memory windows, as operations that
ask the daemon (generators the APIs drive)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from client.records import Call as Call
from client.records import CrInfo as CrInfo
from client.records import EpMirror
from client.records import Event as Event
from client.records import LmrInfo as LmrInfo
from client.records import Op as Op
from proto import calls
from proto.checks import Region, is_int, parse_triplet
from proto.constants import (
    LMR_COOKIE_SIZE,
    DatReturnSubtype,
    EventNumber,
    MemPriv,
    MemType,
)
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
)

Sub = DatReturnSubtype
Triplet = Sequence[int]

_DTO_COMPLETION: Final = EventNumber.DTO_COMPLETION_EVENT


class MemoryCalls:
    """Everything of ClientCore that registers memory; the state it shares with the rest of the
    core is declared here and set up by ClientCore.__init__."""

    lmrs: dict[int, LmrInfo]
    regions: dict[int, Region]
    pzs: set[int]
    rmrs: dict[int, bool]
    lmr_sync_req: bool | None

    ep_mirror: Callable[[Any], EpMirror]  # ClientCore's
    check_request: Callable[[EpMirror, int, Sub, str], None]  # Posting's

    def pz_create(self) -> Op:
        """dat_pz_create."""
        (pz,) = yield Call("pz_create")
        self.pzs.add(pz)
        return pz

    def pz_free(self, pz: int) -> Op:
        """dat_pz_free."""
        yield Call("pz_free", calls.PzFree(pz))
        self.pzs.discard(pz)

    def pz_check(self, pz: Any) -> int:
        """dat_pz_query's check: a PZ of this IA, or DAT_INVALID_HANDLE."""
        if not is_int(pz) or pz not in self.pzs:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_PZ, f"no PZ {pz!r}")
        return int(pz)

    def lmr_create(
        self,
        mem_type: int,
        region: Any,
        length: int,
        pz: int,
        privileges: int,
        locate: Any,
    ) -> Op:
        """dat_lmr_create; ``locate(address, length)`` names the shm segment of VIRTUAL memory."""
        args = calls.LmrCreate(int(mem_type), "", 0, 0, None, 0, length, pz, privileges)
        if mem_type in (MemType.VIRTUAL, MemType.SHARED_VIRTUAL):
            cookie = None
            if mem_type == MemType.SHARED_VIRTUAL:
                if not isinstance(region, (tuple, list)) or len(region) != 2:
                    raise DatInvalidParameter(Sub.INVALID_ARG3, "region must be (cookie, address)")
                cookie, region = bytes(region[0]), region[1]
            if not is_int(region):
                raise DatInvalidParameter(Sub.INVALID_ARG3, "region must be a virtual address")
            if not is_int(length):
                raise DatInvalidParameter(Sub.INVALID_ARG4, "length must be a DAT_VLEN")
            if locate(region, 1) is None:
                raise DatInvalidParameter(
                    Sub.INVALID_ARG3, "memory must come from the IA's allocator (ia.alloc)"
                )
            where = locate(region, max(length, 1))
            if where is None:
                raise DatInvalidParameter(Sub.INVALID_ARG4, "the length runs past the buffer")
            args = args._replace(segment=where[0], offset=where[1], address=region, cookie=cookie)
        elif is_int(region):
            args = args._replace(parent=region)
        handle, lmr_ctx, rmr_ctx, size, address = yield Call("lmr_create", args)
        info = LmrInfo(handle, lmr_ctx, rmr_ctx, size, address, pz, MemPriv(privileges))
        self.lmrs[handle] = info
        self.regions[lmr_ctx] = Region(address, size, pz, MemPriv(privileges))
        return info

    def shared_attach(self, cookie: bytes, size: int) -> Op:
        """Create or join the node's shared region of a 40-byte cookie: (segment, length)."""
        if len(cookie) != LMR_COOKIE_SIZE:
            raise DatInvalidParameter(Sub.INVALID_ARG1, "a DAT_LMR_COOKIE is 40 bytes")
        name, length = yield Call("shared_attach", calls.SharedAttach(bytes(cookie), size))
        return name, length

    def lmr_sync(self, to_cpu: bool, segments: Sequence[Triplet]) -> Op:
        """dat_lmr_sync_rdma_write (``to_cpu``) / _read: checked here, done by the daemon only
        when the provider attribute lmr_sync_req says memory is not coherent."""
        if not isinstance(segments, (list, tuple)):
            raise DatInvalidParameter(Sub.INVALID_ARG2, "local_segments must be a list")
        for triplet in segments:
            address, length, context = parse_triplet(triplet, Sub.INVALID_ARG2)
            region = self.regions.get(context)
            if length and region is None:
                raise DatInvalidParameter(Sub.INVALID_ARG2, f"no LMR with context {context:#x}")
            if length and region is not None and not region.contains(address, length):
                raise DatInvalidParameter(
                    Sub.INVALID_ARG2, f"{address:#x}+{length} is outside its LMR"
                )
        if self.lmr_sync_req is None:
            (attrs,) = yield Call("ia_query")
            self.lmr_sync_req = bool(attrs["lmr_sync_req"])
        if self.lmr_sync_req:
            yield Call("lmr_sync", calls.LmrSync(bool(to_cpu), _wire_iov(segments)))

    def lmr_free(self, handle: int) -> Op:
        """dat_lmr_free."""
        yield Call("lmr_free", calls.LmrFree(handle))
        info = self.lmrs.pop(handle, None)
        if info is not None:
            self.regions.pop(info.lmr_context, None)

    def rmr_create(self, pz: int, for_ep: bool = False) -> Op:
        """dat_rmr_create: an unbound memory window in ``pz``; ``for_ep``: dat_rmr_create_for_ep,
        a window of DAT_RMR_SCOPE_EP (its key works only on the EP it is bound to)."""
        method = "rmr_create_for_ep" if for_ep else "rmr_create"
        (rmr,) = yield Call(method, calls.RmrCreate(pz))
        self.rmrs[rmr] = for_ep
        return rmr

    def rmr_free(self, rmr: int) -> Op:
        """dat_rmr_free."""
        yield Call("rmr_free", calls.RmrFree(rmr))
        self.rmrs.pop(rmr, None)

    def rmr_bind(
        self,
        rmr: int,
        lmr: int,
        triplet: Triplet,
        privileges: int,
        ep: int,
        cookie: int,
        flags: int,
    ) -> Op:
        """dat_rmr_bind: the new rmr_context now; RMR_BIND_COMPLETION on the request EVD."""
        if not is_int(cookie) or not 0 <= cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG7, "user_cookie must be a u64")
        mirror = self.ep_mirror(ep)
        self.check_request(mirror, int(flags), Sub.INVALID_ARG8, "an RMR bind")
        wire = list(parse_triplet(triplet, Sub.INVALID_ARG3))
        args = calls.RmrBind(rmr, lmr, wire, int(privileges), ep, cookie, int(flags))
        (context,) = yield Call("rmr_bind", args)
        mirror.binds += 1
        return context


def _wire_iov(local_iov: Sequence[Triplet]) -> list[object]:  # LmrSync.segments
    return [[int(a), int(n), int(c)] for a, n, c in local_iov]
