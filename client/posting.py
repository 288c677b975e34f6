"""Posting: an IA's work queues as their producer (docs/host-interface.md sections 4 and 5).

dat_ep_post_send, _recv, _rdma_write and _rdma_read, and the IB extensions' dat_ib_post_
fetch_and_add, _cmp_and_swap and _rdma_write_immed, are checked here against the local mirrors
of the endpoints and LMRs, giving the spec's synchronous return codes, and written into the
EP's send or receive queue in shared memory; a doorbell frame is made only when the daemon may
not look, and a kick makes good a doorbell skipped in a race of the two sides' stores. The
common post is client/_ringpost.c's (EpMirror.fast is what it reads of the EP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from client import _ringpost as ringpost
from client.postrules import IB_DTOS, OPERANDS, POST_RULES
from client.records import EpMirror, QueueMapper
from proto import ep_states
from proto.checks import Region, check_local_iov, is_int, parse_triplet
from proto.codec import encode
from proto.constants import CompletionFlags, DatReturnSubtype, Dtos
from proto.errors import (
    DatInsufficientResources,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
)
from proto.frames import FrameType
from proto.hostif import (
    ATOMIC_BYTES,
    U32,
    Opcode,
    Ring,
    RingKind,
    Word,
    check_descriptor,
    word_at,
    write_wqe,
)
from proto.workq import RQ_OFFSET, SQ_OFFSET, WQ_ENTRIES, WQ_ENTRY_SIZE, wq_rings, wq_segment

Sub = DatReturnSubtype
Triplet = Sequence[int]

_SUPPRESS: Final = int(CompletionFlags.SUPPRESS)
_UNSIGNALLED: Final = int(CompletionFlags.UNSIGNALLED)
_STATE: Final = Word.STATE
_POSTABLE: Final = frozenset(map(int, ep_states.REQUEST_POST_STATES))
_POSTABLE_BITS: Final = sum(1 << state for state in _POSTABLE)
_POLL_AT, _HEARD_AT = word_at(Word.POLL), word_at(Word.HEARD)


def _check_atomic(used: Sequence[tuple[Region, int, int]], target: tuple[int, int, int]) -> None:
    """An atomic's original value lands in one local segment of exactly 8 bytes; it acts on 8
    bytes at an 8-byte aligned remote address."""
    if len(used) != 1 or used[0][2] != ATOMIC_BYTES or target[1] < ATOMIC_BYTES:
        raise DatLengthError(message="an atomic takes one 8-byte local segment and 8 remote bytes")
    if target[0] % ATOMIC_BYTES:
        raise DatInvalidParameter(Sub.INVALID_ARG5, "an atomic's remote address is 8-byte aligned")


PlainPost = Callable[[int, Sequence[Triplet], int, Triplet | None, int], bool | None]
"""A kind's common post: (handle, local_iov, cookie, remote, flags) -> True (written, a
doorbell due), False (written) or None (declined: nothing written)."""


def plain_posts(
    post: Callable[..., bool | None], eps: dict[int, EpMirror], regions: dict[int, Region]
) -> dict[Dtos, PlainPost]:
    """``post`` (client._ringpost.post) bound to an IA's tables and each kind's bits, for the
    kinds it takes."""
    return {
        kind: partial(post, eps, regions, rule.opcode_bits, rule.need_bits)
        for kind, rule in POST_RULES.items()
        if rule.plain
    }


class Posting:
    """The producer side of an IA's work queues (the core's EP mirrors and LMR regions are
    shared, not copied: the core adds and forgets them)."""

    def __init__(
        self,
        name: str,
        mapper: QueueMapper,
        eps: dict[int, EpMirror],
        regions: dict[int, Region],
        ep_mirror: Callable[[Any], EpMirror],
    ) -> None:
        self.name = name
        self.mapper = mapper
        self.eps = eps
        self.regions = regions
        self.ep_mirror = ep_mirror
        self.plain = plain_posts(ringpost.post, eps, regions)
        """The common post of each kind that has one (client._ringpost.post bound to this
        IA's tables): ``post`` tries it first, and the blocking API's Ep calls it straight
        (``doorbell`` when it says one is due; ``post`` when it declines, to name the error):
        two Python calls less per post. 4 KiB Writes at window 64, the best of 300 windows of
        posts (a one-off script): Ep.post_rdma_write 0.69 -> 0.49 us; `python -m bench.ab HEAD
        --rounds 8`, window 64, one in 16 signalled: 4 KiB Writes 1.05 x, 64 B Writes 1.10 x,
        64 B Sends 1.06 x (ranges overlapping), window-1 Write latency within noise."""

    def queues(self, ep: EpMirror) -> tuple[Ring, Ring]:
        """The EP's send and receive queue, mapped on first use."""
        if ep.sq is None or ep.rq is None:
            view = self.mapper.map(wq_segment(self.name, ep.handle))
            check_descriptor(view[SQ_OFFSET:RQ_OFFSET], RingKind.SQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
            check_descriptor(view[RQ_OFFSET:], RingKind.RQ, WQ_ENTRIES, WQ_ENTRY_SIZE)
            ep.sq, ep.rq = wq_rings(view, producer=True)
        if ep.fast is None:
            ep.fast = self.snapshot(ep, ep.sq, ep.rq)
        return ep.sq, ep.rq

    @staticmethod
    def snapshot(ep: EpMirror, sq: Ring, rq: Ring) -> tuple[Any, ...]:
        """EpMirror.fast: what client._ringpost reads of the EP, in the order of its
        ``enum fast_item``."""
        attr = ep.attr
        iov_ok = 0
        for rule in POST_RULES.values():
            if rule.plain and getattr(attr, rule.max_iov) >= 1:
                iov_ok |= 1 << rule.opcode_bits
        unsignalled = bool(attr.request_completion_flags & _UNSIGNALLED)
        return (
            sq.view, rq.view, sq, rq, int(ep.pz), int(bool(ep.srq)),
            int(attr.max_request_dtos), int(attr.max_recv_dtos), int(attr.max_message_size),
            int(attr.max_rdma_size), int(unsignalled), iov_ok, _POSTABLE_BITS,
        )  # fmt: skip

    def post_extended(
        self,
        kind: Dtos,
        handle: int,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet | None,
        flags: int,
        operands: tuple[int, int],
    ) -> bytes:
        """dat_ib_post_fetch_and_add, _cmp_and_swap and _rdma_write_immed: the operands
        checked, then ``post``; argument errors are named by their position in the extension's
        call."""
        rule = POST_RULES[kind]
        if kind < IB_DTOS:
            raise DatInvalidParameter(message=f"{kind.name} is not an IB extension DTO")
        for value, (subtype, limit) in zip(operands, OPERANDS[rule.opcode], strict=True):
            if not is_int(value) or not 0 <= value <= limit:
                raise DatInvalidParameter(subtype, f"operand {value!r} out of its C type's range")
        try:
            return self.post(kind, handle, local_iov, cookie, remote, flags, operands)
        except DatInvalidParameter as err:
            if not rule.shift or not Sub.INVALID_ARG1 <= err.subtype < Sub.INVALID_ARG10:
                raise
            raise DatInvalidParameter(Sub(err.subtype + rule.shift), err.message) from None

    def post(
        self,
        kind: Dtos,
        handle: int,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet | None,
        flags: int,
        operands: tuple[int, int] = (0, 0),
    ) -> bytes:
        """Check a post as dat_ep_post_* specify (raising the spec's DatError) and write its WQE;
        returns the doorbell frame to send, or nothing when one is already in flight (the IB
        extensions come through ``post_extended``).

        The hot path of the library: a Send, Receive, RDMA Write or Read of one segment is
        checked and written by client._ringpost (in C: bench.breakdown's post, window 64,
        2.6 us in Python -> 0.74 us), which declines, writing nothing, whatever it does not
        take or would fail; the checks below then name the error. What depends on the kind
        comes from one table, flags are compared as plain ints (an IntFlag operator costs
        ~1 us) and the EP's state as the raw word the daemon published."""
        plain = self.plain.get(kind)
        if plain is not None:
            posted = plain(handle, local_iov, cookie, remote, flags)
            if posted is not None:
                return self.doorbell(handle) if posted else b""
        rule = POST_RULES[kind]
        ep = self.ep_mirror(handle)
        attr = ep.attr
        if not is_int(cookie) or not 0 <= cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "cookie must be a u64")
        if not is_int(flags) or int(flags) & ~0x3F:
            raise DatInvalidParameter(rule.flags_arg, f"bad completion flags {flags!r}")
        flags = int(flags)
        sq, rq = self.queues(ep)
        if rule.receive:
            if ep.srq:
                raise DatInvalidState(message="the EP takes its receives from an SRQ")
            if flags & _SUPPRESS:
                raise DatInvalidParameter(Sub.INVALID_ARG5, "receives cannot be suppressed")
            if ep.recvs >= attr.max_recv_dtos:
                raise DatInsufficientResources(Sub.RESOURCE_TEP, "receive queue is full")
            check_local_iov(local_iov, self.regions.get, ep.pz, rule.need, attr.max_recv_iov)
            write_wqe(rq, rule.opcode, flags, cookie, local_iov)
            rq.publish()
            return self._doorbell(ep)
        self.check_request(ep, flags, rule.flags_arg, rule.opcode)
        used = check_local_iov(
            local_iov, self.regions.get, ep.pz, rule.need, getattr(attr, rule.max_iov)
        )
        total = used[0][2] if len(used) == 1 else sum(length for _, _, length in used)
        target = (0, 0, 0)
        if rule.send:
            if total > attr.max_message_size:
                raise DatLengthError(message="message larger than max_message_size")
        else:
            target = parse_triplet(remote, Sub.INVALID_ARG5)  # None too: INVALID_ARG5
            r_len = target[1]
            if total > r_len and not rule.into_local:
                raise DatLengthError(message="the remote buffer is smaller than the local data")
            if r_len > total and rule.into_local:
                raise DatLengthError(message="the local buffer is too small for the remote data")
            if total > attr.max_rdma_size or r_len > attr.max_rdma_size:
                raise DatLengthError(message="larger than the EP's max_rdma_size")
            if rule.atomic:
                _check_atomic(used, target)
        write_wqe(sq, rule.opcode, flags, cookie, local_iov, target, operands=operands)
        sq.publish()
        return self._doorbell(ep)

    def check_request(self, ep: EpMirror, flags: int, flags_arg: Sub, what: str | Opcode) -> None:
        """What every request (a post to the send queue, dat_rmr_bind) must pass: the EP's
        state as the daemon published it, UNSIGNALLED only where the EP's attributes allow it,
        room in the request queue. ``what`` (an opcode: its name, only for the error) names
        the request."""
        sq, _ = self.queues(ep)
        if sq.word(_STATE) not in _POSTABLE:
            name = what if isinstance(what, str) else what.name
            raise ep_states.state_error(ep.state, f"posting {name}")
        if flags & _UNSIGNALLED and not ep.attr.request_completion_flags & _UNSIGNALLED:
            raise DatInvalidParameter(
                flags_arg, "UNSIGNALLED needs the EP's request_completion_flags to allow it"
            )
        if ep.requests >= ep.attr.max_request_dtos:
            raise DatInsufficientResources(Sub.RESOURCE_TEP, "request queue is full")

    def _doorbell(self, ep: EpMirror) -> bytes:
        """The doorbell frame, unless the daemon will look anyway: it polls the EP (POLL, read
        after a full barrier that orders it after our index store), or a doorbell is in
        flight (it has not counted every one yet)."""
        assert ep.sq is not None
        self.mapper.fence()
        words = ep.sq.words
        if words[_POLL_AT] or ep.rung % U32 != words[_HEARD_AT]:
            return b""
        return self._ring(ep)

    def doorbell(self, handle: int) -> bytes:
        """The doorbell frame of a post that wrote its WQE and found one due."""
        return self._ring(self.eps[handle])

    @staticmethod
    def _ring(ep: EpMirror) -> bytes:
        """The doorbell frame, counted."""
        ep.rung += 1
        return encode(FrameType.DOORBELL, ep.handle)

    def kick(self) -> bytes:
        """Doorbells for every EP whose queues hold WQEs the daemon has not taken although it
        has taken every doorbell (so none is coming) and does not poll it, at most one per new
        WQE: a driver sends these before it blocks or finds an EVD empty, so a doorbell skipped
        in a race of the two sides' stores is always made good."""
        out = []
        for ep in self.eps.values():
            if ep.sq is None or ep.rq is None:
                continue
            mark = (ep.sq.mine, ep.rq.mine)
            in_flight = ep.rung % U32 != ep.sq.word(Word.HEARD)
            if (
                mark != ep.kicked
                and not in_flight
                and not ep.sq.word(Word.POLL)  # a polling daemon looks again without one
                and (ep.sq.space() < ep.sq.entries or ep.rq.space() < ep.rq.entries)
            ):
                ep.kicked = mark
                ep.rung += 1
                out.append(encode(FrameType.DOORBELL, ep.handle))
        return b"".join(out)
