"""Endpoint calls: dat_ep_create, _modify, _free, _disconnect and _reset.

Connecting is the CM's (fabricd.nic.cm); every state change goes through the EP driver.
"""

from __future__ import annotations

from collections.abc import Callable

from fabricd.nic.epdriver import EpDriver
from fabricd.nic.lmr import pz
from fabricd.nic.objects import Consumer, Ep, lookup
from proto import calls, ep_states
from proto.attrs import EpAttr
from proto.constants import WATERMARK_INFINITE, CloseFlags
from proto.constants import DatReturnSubtype as Sub
from proto.constants import EpState as S
from proto.ep_states import EpInput
from proto.errors import DatInvalidHandle, DatInvalidParameter
from proto.schema import Empty

MODIFIABLE = frozenset({"pz", "recv_evd", "request_evd", "connect_evd", "attr"})
EVD_SUBTYPES = {
    "recv_evd": Sub.INVALID_HANDLE_EVD_RECV,
    "request_evd": Sub.INVALID_HANDLE_EVD_REQUEST,
    "connect_evd": Sub.INVALID_HANDLE_EVD_CONN,
}
BEFORE_CONNECT = frozenset(
    {S.UNCONNECTED, S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.TENTATIVE_CONNECTION_PENDING}
)
"""dat_ep_modify changes EVDs and attributes only before the connection is made."""


def evd(name: str, value: object) -> int:
    """An EVD handle an EP names (0: none), or DAT_INVALID_HANDLE of that EVD's kind."""
    if type(value) is not int or value < 0:
        raise DatInvalidHandle(EVD_SUBTYPES[name], f"bad {name} {value!r}")
    return value


def endpoint(consumer: Consumer, handle: int) -> Ep:
    """The consumer's EP, or DAT_INVALID_HANDLE."""
    return lookup(consumer.eps, handle, Sub.INVALID_HANDLE_EP, "endpoint")


class Endpoints:
    """The consumers' EPs outside connection management."""

    def __init__(self, eps: EpDriver, new_handle: Callable[[], int]) -> None:
        self.eps = eps
        self.new_handle = new_handle

    def ep_create(self, consumer: Consumer, a: calls.EpCreate) -> calls.EpCreated:
        """dat_ep_create: an RC endpoint in UNCONNECTED (a NULL PZ: set by dat_ep_modify)."""
        zone = pz(consumer, a.pz) if a.pz else 0
        recv, request, connect = (evd(name, getattr(a, name)) for name in EVD_SUBTYPES)
        attr = EpAttr.from_wire(a.attr)
        ep = self.eps.add(Ep(self.new_handle(), consumer, zone, recv, request, connect, attr))
        if zone:
            consumer.pzs[zone] += 1
        return calls.EpCreated(ep.handle, ep.attr.to_wire())

    def ep_modify(self, consumer: Consumer, a: calls.EpModify) -> calls.EpModified:
        """dat_ep_modify: PZ only in UNCONNECTED or TENTATIVE_CP; EVDs and attributes before
        the connection is made. Nothing changes unless everything is valid."""
        ep = endpoint(consumer, a.ep)
        changes = a.changes
        if set(changes) - MODIFIABLE:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"cannot modify {changes!r}")
        if ep.state not in BEFORE_CONNECT or (
            "pz" in changes and ep.state not in (S.UNCONNECTED, S.TENTATIVE_CONNECTION_PENDING)
        ):
            raise ep_states.state_error(ep.state, "dat_ep_modify")
        zone = pz(consumer, changes["pz"]) if changes.get("pz") else ep.pz
        attr = EpAttr.from_wire(changes["attr"]) if "attr" in changes else ep.attr
        evds = {name: evd(name, changes.get(name, 0)) for name in EVD_SUBTYPES}
        if zone != ep.pz:
            if ep.pz in consumer.pzs:
                consumer.pzs[ep.pz] -= 1
            consumer.pzs[zone] += 1
            ep.pz = zone
        for name, handle in evds.items():
            if name in changes:
                setattr(ep, name, handle)
        ep.attr = attr
        return calls.EpModified(ep.attr.to_wire(), ep.handle, ep.state)

    def ep_free(self, consumer: Consumer, a: calls.EpHandle) -> Empty:
        """dat_ep_free: an implicit abrupt disconnect (not while a request is pending)."""
        ep = endpoint(consumer, a.ep)
        if ep.state in ep_states.FREE_REFUSED:
            raise ep_states.state_error(ep.state, "dat_ep_free")
        self.eps.destroy(ep)
        return Empty()

    def ep_disconnect(self, consumer: Consumer, a: calls.EpDisconnect) -> calls.EpMoved:
        """dat_ep_disconnect: graceful waits for the outstanding DTOs, abrupt flushes them."""
        ep = endpoint(consumer, a.ep)
        if a.flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {a.flags!r}")
        graceful = a.flags == CloseFlags.GRACEFUL
        if graceful and ep.state == S.DISCONNECT_PENDING:
            return calls.EpMoved(ep.handle, ep.state)  # a second graceful request: no effect
        what = EpInput.DISCONNECT_GRACEFUL if graceful else EpInput.DISCONNECT_ABRUPT
        self.eps.input(ep, what, notify_peer=ep.state != S.CONNECTED or not graceful)
        return calls.EpMoved(ep.handle, ep.state)

    def ep_set_watermark(self, consumer: Consumer, a: calls.EpSetWatermark) -> Empty:
        """dat_ep_set_watermark: new soft and hard high watermarks of the EP's receive buffers
        (-1: DAT_WATERMARK_INFINITE), in any state; one already passed acts at once."""
        ep = endpoint(consumer, a.ep)
        if a.soft < WATERMARK_INFINITE:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad soft high watermark {a.soft}")
        if a.hard < WATERMARK_INFINITE:
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"bad hard high watermark {a.hard}")
        ep.soft_hw, ep.hard_hw = a.soft, a.hard
        self.eps.watermarks(ep)
        return Empty()

    def ep_reset(self, consumer: Consumer, a: calls.EpHandle) -> calls.EpMoved:
        """dat_ep_reset: back to UNCONNECTED, so the EP can connect again."""
        ep = endpoint(consumer, a.ep)
        self.eps.input(ep, EpInput.RESET)
        ep.next_seq, ep.acked, ep.reads_out, ep.reads_done = 1, 0, 0, 0
        return calls.EpMoved(ep.handle, ep.state)
