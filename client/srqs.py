"""The consumer core's shared receive queues (client.core.ClientCore is an SrqCalls):
dat_srq_create, _free, _query, _resize, _set_lw, dat_srq_post_recv and
dat_ep_create_with_srq (docs/host-interface.md section 10).

An SRQ's receives go into its ring in shared memory (the daemon places it at dat_srq_create);
the daemon counts those it completed (DONE) and publishes the SRQ's state. The driver counts the
completions it handed out (``reaped``): a receive occupies the SRQ until then, as
dat_srq_resize and dat_srq_query's outstanding_dto_count say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from client.records import Call, EpMirror, Event, Op
from proto import calls
from proto.attrs import MAX_DTOS, EpAttr
from proto.checks import Region, check_local_iov, is_int
from proto.codec import encode
from proto.constants import DatReturnSubtype, MemPriv, SrqState
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
)
from proto.frames import FrameType
from proto.hostif import U32, Opcode, Ring, RingKind, Word, check_descriptor, write_wqe
from proto.workq import WQ_ENTRIES, WQ_ENTRY_SIZE, srq_ring, srq_segment

Sub = DatReturnSubtype
Triplet = Sequence[int]


@dataclass(eq=False)
class SrqMirror:
    """What the consumer knows of an SRQ: its attributes and its ring (producer side)."""

    handle: int
    pz: int
    max_recv_dtos: int
    max_recv_iov: int
    low_watermark: int
    ring: Ring
    rung: int = 0  # doorbells sent (free-running), against the daemon's HEARD
    kicked: int = 0  # the producer index of the last kick
    reaped: int = 0  # completions of its receives handed out to the consumer

    @property
    def available(self) -> int:
        """Receives posted and not yet taken by a message (DAT_SRQ_PARAM available_dto_count)."""
        return (self.ring.mine - self.ring.word(Word.DONE)) % U32

    @property
    def outstanding(self) -> int:
        """Receives posted whose completion the consumer has not reaped yet (they occupy the
        SRQ: outstanding_dto_count)."""
        return (self.ring.mine - self.reaped) % U32

    def param(self, ia: object) -> dict[str, Any]:
        """dat_srq_query's DAT_SRQ_PARAM."""
        return {
            "ia": ia,
            "srq_state": SrqState(self.ring.word(Word.STATE)),
            "pz": self.pz,
            "max_recv_dtos": self.max_recv_dtos,
            "max_recv_iov": self.max_recv_iov,
            "low_watermark": self.low_watermark,
            "available_dto_count": self.available,
            "outstanding_dto_count": self.outstanding,
        }


class SrqCalls:
    """Everything of ClientCore about SRQs; the state it shares with the rest of the core is
    declared here and set up by ClientCore.__init__."""

    name: str
    srqs: dict[int, SrqMirror]
    eps: dict[int, EpMirror]
    regions: dict[int, Region]
    mapper: Any  # client.records.QueueMapper
    queues: Callable[[EpMirror], tuple[Ring, Ring]]  # Posting's
    check_evds: Callable[[int, int, int], None]  # ClientCore's

    def srq(self, handle: Any) -> SrqMirror:
        """The IA's SRQ, or DAT_INVALID_HANDLE_SRQ."""
        found = self.srqs.get(handle) if is_int(handle) else None
        if found is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_SRQ, f"no SRQ {handle!r}")
        return found

    def srq_create(self, pz: int, max_recv_dtos: int, max_recv_iov: int, low_watermark: int) -> Op:
        """dat_srq_create: its receive ring mapped; its handle."""
        values = (max_recv_dtos, max_recv_iov, low_watermark)
        if not all(is_int(v) for v in values) or not 0 <= low_watermark <= max_recv_dtos:
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"bad SRQ attributes {values!r}")
        if max_recv_dtos > MAX_DTOS:
            raise DatInsufficientResources(Sub.RESOURCE_SRQ, "max_recv_dtos past the provider's")
        handle, dtos, iov = yield Call("srq_create", calls.SrqCreate(pz, *values))
        view = self.mapper.map(srq_segment(self.name, handle))
        check_descriptor(view, RingKind.SRQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
        ring = srq_ring(view, producer=True)
        self.srqs[handle] = SrqMirror(handle, pz, dtos, iov, low_watermark, ring)
        return handle

    def srq_free(self, handle: int) -> Op:
        """dat_srq_free: not while an EP uses it (the daemon knows)."""
        self.srq(handle)
        yield Call("srq_free", calls.SrqHandle(handle))
        mirror = self.srqs.pop(handle)
        mirror.ring.view.release()
        mirror.ring.words.release()
        self.mapper.unmap(srq_segment(self.name, handle))

    def srq_set_lw(self, handle: int, low_watermark: int) -> Op:
        """dat_srq_set_lw: a low watermark past max_recv_dtos is DAT_INVALID_PARAMETER."""
        srq = self.srq(handle)
        if not is_int(low_watermark) or not 0 <= low_watermark <= srq.max_recv_dtos:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "low_watermark exceeds max_recv_dtos")
        yield Call("srq_set_lw", calls.SrqSetLw(handle, low_watermark))
        srq.low_watermark = low_watermark

    def srq_resize(self, handle: int, max_recv_dtos: int) -> None:
        """dat_srq_resize: not below the receives it holds (those whose completions were not
        reaped included) nor below the low watermark; its ring already holds the maximum."""
        srq = self.srq(handle)
        if not is_int(max_recv_dtos) or max_recv_dtos <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad srq_max_recv_dto {max_recv_dtos!r}")
        if max_recv_dtos > MAX_DTOS:
            raise DatInsufficientResources(Sub.RESOURCE_SRQ, "past the provider's maximum")
        if max_recv_dtos < srq.outstanding or max_recv_dtos < srq.low_watermark:
            raise DatInvalidState(message="more receives outstanding, or the low watermark")
        srq.max_recv_dtos = max_recv_dtos

    def ep_create_with_srq(
        self,
        pz: int,
        recv_evd: int,
        request_evd: int,
        connect_evd: int,
        srq: int,
        attr: EpAttr | None,
    ) -> Op:
        """dat_ep_create_with_srq: an RC endpoint whose receives come from ``srq``."""
        self.check_evds(recv_evd, request_evd, connect_evd)
        self.srq(srq)
        wire = (attr or EpAttr()).to_wire()
        args = calls.EpCreateWithSrq(pz, recv_evd, request_evd, connect_evd, srq, wire)
        handle, granted = yield Call("ep_create_with_srq", args)
        mirror = self.eps[handle] = EpMirror(
            handle, pz, recv_evd, request_evd, connect_evd, EpAttr.from_wire(granted), srq=srq
        )
        self.queues(mirror)
        return handle

    def srq_post_recv(self, handle: int, local_iov: Sequence[Triplet], cookie: int) -> bytes:
        """dat_srq_post_recv: checked as the spec says and written into the SRQ's ring; the
        doorbell frame to send (nothing when one is in flight)."""
        srq = self.srq(handle)
        if not is_int(cookie) or not 0 <= cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "cookie must be a u64")
        if srq.outstanding >= srq.max_recv_dtos:
            raise DatInsufficientResources(Sub.RESOURCE_SRQ, "the SRQ is full")
        need = MemPriv.LOCAL_WRITE
        check_local_iov(local_iov, self.regions.get, srq.pz, need, srq.max_recv_iov)
        write_wqe(srq.ring, Opcode.RECEIVE, 0, cookie, local_iov)
        srq.ring.publish()
        self.mapper.fence()
        if srq.rung % U32 != srq.ring.word(Word.HEARD):
            return b""  # one is in flight: the daemon looks again after counting it
        srq.rung += 1
        return encode(FrameType.DOORBELL, handle)

    def srq_kick(self) -> bytes:
        """Doorbells for SRQs holding receives the daemon has not taken, when no doorbell is
        in flight (as Posting.kick does for the EPs)."""
        out = []
        for srq in self.srqs.values():
            ring = srq.ring
            if ring.mine == srq.kicked or srq.rung % U32 != ring.word(Word.HEARD):
                continue
            if ring.space() < ring.entries:
                srq.kicked = ring.mine
                srq.rung += 1
                out.append(encode(FrameType.DOORBELL, srq.handle))
        return b"".join(out)

    def reaped(self, event: Event) -> Event:
        """An event handed out to the consumer: a receive of an SRQ no longer occupies it (the
        entry names the SRQ: its EP may be freed by now)."""
        if event.srq:
            srq = self.srqs.get(event.srq)
            if srq is not None:
                srq.reaped += 1
        return event
