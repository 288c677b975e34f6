"""Memory windows: dat_rmr_create, dat_rmr_bind and dat_rmr_free.

A bind is checked when it is posted and returns its new rmr_context at once; it executes in
posting order on its EP (the initiator), so the new key works, and the old one stops, only
from then on.
"""

from __future__ import annotations

from collections.abc import Callable

from fabricd.memory import Lmr, MemoryRegistry
from fabricd.nic.initiator import Initiator
from fabricd.nic.lmr import privileges, pz
from fabricd.nic.objects import Bind, Consumer, Ep, Op, Rmr, lookup
from proto import calls, ep_states
from proto.checks import Region, parse_triplet
from proto.constants import DatReturnSubtype as Sub
from proto.constants import Dtos, MemPriv
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from proto.schema import Empty

_CHANGES = MemPriv.REMOTE_WRITE | MemPriv.REMOTE_ATOMIC  # window rights that change the memory


class Windows:
    """The consumers' RMRs."""

    def __init__(
        self, memory: MemoryRegistry, initiator: Initiator, new_handle: Callable[[], int]
    ) -> None:
        self.memory = memory
        self.initiator = initiator
        self.new_handle = new_handle

    def rmr_create(self, consumer: Consumer, a: calls.RmrCreate) -> calls.Handle:
        """dat_rmr_create: an unbound window in a PZ (scope DAT_RMR_SCOPE_PZ)."""
        return self._create(consumer, a, for_ep=False)

    def rmr_create_for_ep(self, consumer: Consumer, a: calls.RmrCreate) -> calls.Handle:
        """dat_rmr_create_for_ep: a window of scope DAT_RMR_SCOPE_EP, whose key reaches memory
        only through the EP it was last bound on (remote accesses arriving on any other
        connection fail DAT_DTO_ERR_REMOTE_ACCESS)."""
        return self._create(consumer, a, for_ep=True)

    def _create(self, consumer: Consumer, a: calls.RmrCreate, for_ep: bool) -> calls.Handle:
        zone = pz(consumer, a.pz)
        rmr = Rmr(self.new_handle(), zone, for_ep=for_ep)
        consumer.rmrs[rmr.handle] = rmr
        consumer.pzs[zone] += 1
        return calls.Handle(rmr.handle)

    def rmr_free(self, consumer: Consumer, a: calls.RmrFree) -> Empty:
        """dat_rmr_free: a bound window is unbound first (its key stops working)."""
        rmr = lookup(consumer.rmrs, a.rmr, Sub.INVALID_HANDLE_RMR, "RMR")
        rmr.unbind(self.memory)
        del consumer.rmrs[rmr.handle]
        if rmr.pz in consumer.pzs:
            consumer.pzs[rmr.pz] -= 1
        return Empty()

    def rmr_bind(self, consumer: Consumer, a: calls.RmrBind) -> calls.RmrContext:
        """dat_rmr_bind: checked now, executed in posting order on the EP, completed with
        RMR_BIND_COMPLETION on its request EVD; returns the new rmr_context at once."""
        if not 0 <= a.cookie < 1 << 64:
            raise DatInvalidParameter(Sub.INVALID_ARG7, "user_cookie must be a u64")
        rmr = lookup(consumer.rmrs, a.rmr, Sub.INVALID_HANDLE_RMR, "RMR")
        ep = lookup(consumer.eps, a.ep, Sub.INVALID_HANDLE_EP, "endpoint")
        address, length, context = parse_triplet(a.triplet, Sub.INVALID_ARG3)
        privs = privileges(a.privileges, Sub.INVALID_ARG4)
        remote = privs & (MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE | MemPriv.REMOTE_ATOMIC)
        lmr = self._bound_lmr(consumer, a.lmr, ep, rmr, (address, length, context), remote)
        if ep.state not in ep_states.REQUEST_POST_STATES:
            raise ep_states.state_error(ep.state, "dat_rmr_bind")
        key = self.memory.reserve_key() if length else 0
        op = Op(Dtos.BIND_MW, a.cookie, a.flags, 0, 0, [])
        op.bind = Bind(rmr, lmr, Region(address, length, rmr.pz, remote), key)
        self.initiator.enqueue(ep, op)
        return calls.RmrContext(key)

    def _bound_lmr(
        self,
        consumer: Consumer,
        handle: int,
        ep: Ep,
        rmr: Rmr,
        triplet: tuple[int, int, int],
        remote: MemPriv,
    ) -> Lmr | None:
        """The LMR a bind's triplet names (None: a zero length unbinds), fully checked."""
        address, length, context = triplet
        if not length:
            return None
        lmr = consumer.lmrs.get(handle) or self.memory.by_lmr_context.get(context)
        if lmr is None or lmr.owner != consumer.id or lmr.lmr_context != context:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, "the triplet names no LMR")
        if not lmr.region.contains(address, length):
            raise DatInvalidParameter(Sub.INVALID_ARG3, "the range exceeds the LMR")
        local = lmr.region.privileges
        if (remote & MemPriv.REMOTE_READ and not local & MemPriv.LOCAL_READ) or (
            remote & _CHANGES and not local & MemPriv.LOCAL_WRITE
        ):
            raise DatPrivilegesViolation(
                message="remote read needs the LMR's local read, remote write or atomic access "
                "its local write"
            )
        if rmr.pz != lmr.region.pz or rmr.pz != ep.pz:
            raise DatProtectionViolation(message="the RMR, LMR and EP are not in one PZ")
        return lmr

    def abandon(self, consumer: Consumer) -> None:
        """The consumer went away: every window's key stops working."""
        for rmr in consumer.rmrs.values():
            rmr.unbind(self.memory)
