"""Shared receive queues: dat_srq_create, _free, _set_lw and dat_ep_create_with_srq, and the
intake of the receives a driver posts to an SRQ's ring (docs/host-interface.md section 10).

An SRQ's receives are one queue for all its EPs: an EP created with it shares the SRQ's list
of taken receives as its own, so the RC target consumes them in posting order on whichever EP a
Send or RDMA Write with immediate data arrives first. A receive posted to the SRQ releases the
EPs whose stream waits for one (receiver not ready). DONE counts the SRQ's receives completed,
on any EP, before their completions are delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fabricd.memory import MemoryRegistry
from fabricd.nic.ep import EVD_SUBTYPES, evd
from fabricd.nic.epdriver import EpDriver
from fabricd.nic.events import Events
from fabricd.nic.lmr import pz
from fabricd.nic.objects import Consumer, Ep, Recv, Srq, lookup
from fabricd.nic.queues import RQ_OPCODES, take
from fabricd.nic.target import Target
from fabricd.nic.views import local_views
from proto import calls
from proto.attrs import MAX_DTOS, MAX_IOV, EpAttr
from proto.constants import DatReturnSubtype as Sub
from proto.constants import MemPriv, SrqState
from proto.errors import DatError, DatInvalidParameter, DatInvalidState
from proto.hostif import RingError, RingKind, Word, format_ring
from proto.schema import Empty
from proto.workq import SRQ_SEGMENT_BYTES, WQ_ENTRIES, WQ_ENTRY_SIZE, srq_ring, srq_segment

log = logging.getLogger("fabricd")


def srq_of(consumer: Consumer, handle: int) -> Srq:
    """The consumer's SRQ, or DAT_INVALID_HANDLE_SRQ."""
    return lookup(consumer.srqs, handle, Sub.INVALID_HANDLE_SRQ, "SRQ")


class Srqs:
    """The consumers' shared receive queues."""

    def __init__(
        self,
        memory: MemoryRegistry,
        eps: EpDriver,
        events: Events,
        target: Target,
        new_handle: Callable[[], int],
    ) -> None:
        self.memory = memory
        self.eps = eps
        self.events = events
        self.target = target
        self.new_handle = new_handle

    # -- calls ---------------------------------------------------------------------------------

    def srq_create(self, consumer: Consumer, a: calls.SrqCreate) -> calls.SrqCreated:
        """dat_srq_create: an SRQ of at least ``max_recv_dtos`` receives of ``max_recv_iov``
        segments in the PZ, attached to no EP, its ring placed for the driver."""
        zone = pz(consumer, a.pz)
        if not 0 < a.max_recv_dtos <= MAX_DTOS or not 0 < a.max_recv_iov <= MAX_IOV:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "max_recv_dtos or max_recv_iov")
        if not 0 <= a.low_watermark <= a.max_recv_dtos:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "low_watermark exceeds max_recv_dtos")
        handle = self.new_handle()
        name = srq_segment(consumer.name, handle)
        self.memory.create_segment(name, SRQ_SEGMENT_BYTES, consumer.id)
        view = self.memory.map_segment(name)
        format_ring(view, RingKind.SRQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
        ring = srq_ring(view, producer=False)
        srq = Srq(handle, consumer, zone, a.max_recv_iov, name, ring, a.low_watermark)
        ring.set_word(Word.STATE, srq.srq_state)
        consumer.srqs[handle] = srq
        consumer.pzs[zone] += 1
        return calls.SrqCreated(handle, a.max_recv_dtos, a.max_recv_iov)

    def srq_free(self, consumer: Consumer, a: calls.SrqHandle) -> Empty:
        """dat_srq_free: not while an EP uses it; receives still queued go with it."""
        srq = srq_of(consumer, a.srq)
        if srq.eps:
            raise DatInvalidState(Sub.INVALID_STATE_SRQ_IN_USE, f"{len(srq.eps)} EPs use it")
        self._drop(srq)
        return Empty()

    def srq_set_lw(self, consumer: Consumer, a: calls.SrqSetLw) -> Empty:
        """dat_srq_set_lw: the low watermark, armed for one event (at once if the SRQ already
        holds fewer receives)."""
        srq = srq_of(consumer, a.srq)
        if not 0 <= a.low_watermark <= MAX_DTOS:  # (the driver checks its max_recv_dtos)
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"low watermark {a.low_watermark}")
        self.drain(srq)
        srq.low_watermark, srq.armed = a.low_watermark, True
        self.events.srq_low(srq)
        return Empty()

    def ep_create_with_srq(self, consumer: Consumer, a: calls.EpCreateWithSrq) -> calls.EpCreated:
        """dat_ep_create_with_srq: an RC endpoint whose receives come from the SRQ (same PZ)."""
        zone = pz(consumer, a.pz)
        srq = srq_of(consumer, a.srq)
        if srq.pz != zone:
            raise DatInvalidParameter(Sub.INVALID_ARG6, "the SRQ is in another protection zone")
        recv, request, connect = (evd(name, getattr(a, name)) for name in EVD_SUBTYPES)
        try:
            attr = EpAttr.from_wire(a.attr)
        except DatInvalidParameter as err:  # the attributes are the 7th argument here
            raise DatInvalidParameter(Sub.INVALID_ARG7, err.message) from None
        ep = Ep(self.new_handle(), consumer, zone, recv, request, connect, attr)
        ep.srq, ep.recvs = srq, srq.recvs
        self.eps.add(ep)
        srq.eps[ep.handle] = ep
        consumer.pzs[zone] += 1
        return calls.EpCreated(ep.handle, ep.attr.to_wire())

    def abandon(self, consumer: Consumer) -> None:
        """The IA is gone: its SRQs and their segments."""
        for srq in list(consumer.srqs.values()):
            srq.eps.clear()
            self._drop(srq)

    def _drop(self, srq: Srq) -> None:
        consumer = srq.consumer
        del consumer.srqs[srq.handle]
        if srq.pz in consumer.pzs:
            consumer.pzs[srq.pz] -= 1
        srq.recvs.clear()
        srq.ring.view.release()
        srq.ring.words.release()
        self.memory.unmap_segment(srq.segment)
        self.memory.remove_segment(srq.segment)

    # -- the ring ------------------------------------------------------------------------------

    def doorbell(self, srq: Srq) -> None:
        """DOORBELL naming the SRQ: take its receives, count the doorbell, look once more."""
        self.drain(srq)
        srq.heard += 1
        srq.ring.set_word(Word.HEARD, srq.heard)
        self.memory.fence()  # HEARD, then a look: a driver that saw HEARD old rang nothing
        self.drain(srq)

    def drain(self, srq: Srq) -> None:
        """Take every receive the driver published, in order; they release the SRQ's EPs
        whose stream waits for a receive. A receive whose buffer fails its checks is dropped
        (counted done) and puts the SRQ in its error state (DAT_SRQ_TRANSFER_TO_ERROR on the
        async EVD, once); the SRQ serves the receives posted after it still."""
        if srq.consumer.srqs.get(srq.handle) is not srq:
            return
        taken = 0
        for wqe in take(srq.ring, RQ_OPCODES):
            taken += 1
            try:
                if len(wqe.segments) > srq.max_recv_iov:
                    raise DatInvalidParameter(message="more segments than max_recv_iov")
                views, capacity, spans = local_views(
                    self.memory, srq.consumer, srq.pz, wqe.segments, MemPriv.LOCAL_WRITE
                )
            except DatError as err:
                log.info("SRQ %d: receive buffer refused: %s", srq.handle, err)
                srq.done += 1  # it is over: the counts stay true
                srq.ring.set_word(Word.DONE, srq.done)
                if srq.srq_state != SrqState.ERROR:
                    srq.srq_state = SrqState.ERROR
                    srq.ring.set_word(Word.STATE, srq.srq_state)
                    self.events.srq_error(srq)
                continue
            srq.recvs.append(Recv(wqe.cookie, wqe.flags, views, capacity, spans))
        if taken:
            for ep in list(srq.eps.values()):
                link = ep.link
                if link is not None and link.stalled and srq.recvs:
                    self.target.unstall(link)

    def receives(self, srq: Srq) -> None:
        """The receives the SRQ's ring holds, when a message finds none taken (a broken ring
        closes the IA only)."""
        try:
            self.drain(srq)
        except RingError as err:
            srq.consumer.channel.close(f"SRQ {srq.handle}: {err}")

    def poll(self, consumer: Consumer) -> None:
        """Before a call of the IA: what its SRQs' rings hold (a call never overtakes a post;
        a broken ring closes the IA)."""
        try:
            for srq in list(consumer.srqs.values()):
                self.drain(srq)
        except RingError as err:
            consumer.channel.close(f"SRQ: {err}")
