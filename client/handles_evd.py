"""The blocking API's event objects: EVDs, CNOs, and the CRs that CONNECTION_REQUEST events
hand out (client.api re-exports them)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NoReturn

from client.common import decline
from client.core import CrInfo, Event
from client.handle import Handle
from proto.constants import TIMEOUT_INFINITE, DatReturnSubtype, HandleType
from proto.errors import DatInvalidState, DatQueueEmpty, DatTimeoutExpired
from proto.hostif import ASYNC_EVD

Sub = DatReturnSubtype


class Evd(Handle):
    """An event dispatcher."""

    TYPE = HandleType.EVD

    def dequeue(self) -> Event:
        """dat_evd_dequeue: DAT_QUEUE_EMPTY when nothing is queued (an empty EVD reads the
        socket once, so a dead daemon's IA_CATASTROPHIC shows, and kicks the EPs' queues)."""
        core = self.ia.core
        try:
            event = core.evd_dequeue(self.handle)
        except DatQueueEmpty:
            self.ia._pump(0)
            self.ia.kick()
            event = core.evd_dequeue(self.handle)
        return self._handed_out(event) if event.cr else event

    def _handed_out(self, event: Event) -> Event:
        if event.cr:
            return replace(event, cr_handle=Cr(self.ia, event.cr))
        return event

    def wait(self, timeout: int = TIMEOUT_INFINITE, threshold: int = 1) -> tuple[Event, int]:
        """dat_evd_wait: (event, nmore); DAT_TIMEOUT_EXPIRED carries ``nmore`` too; an EVD
        made unwaitable meanwhile gives DAT_INVALID_STATE."""
        core = self.ia.core
        evd = core.evd_wait_begin(self.handle, threshold)
        try:
            if not core.evd_ready(evd, threshold):  # else, nothing to wait for
                self.ia._until(
                    lambda: core.evd_ready(evd, threshold) or not evd.waitable,
                    timeout,
                    dead_ok=self.handle == ASYNC_EVD,
                    arm=lambda: core.arm((evd,), threshold),
                    spin=evd.spin,
                )
        except DatTimeoutExpired:
            raise core.evd_timeout(evd, threshold, timeout) from None
        finally:
            evd.waiting = False
        if not evd.waitable:
            raise DatInvalidState(Sub.INVALID_STATE_EVD_UNWAITABLE, "the EVD became unwaitable")
        event = self._handed_out(core.take(evd))
        return event, len(evd.queue)

    def post_se(self, pointer: Any = None) -> None:
        """dat_evd_post_se: queue a software event."""
        self.ia.run(self.ia.core.evd_post_se(self.handle, pointer))

    def query(self) -> dict[str, Any]:
        """dat_evd_query: DAT_EVD_PARAM (the IA, qlen, state, CNO and flags)."""
        param = self.ia.core.evd_query(self.handle)
        cno = param["cno"]
        return {**param, "ia": self.ia, "cno": Cno(self.ia, cno) if cno else None}

    def resize(self, qlen: int) -> None:
        """dat_evd_resize: DAT_INVALID_STATE while more than ``qlen`` events are queued."""
        self.ia.run(self.ia.core.evd_resize(self.handle, qlen))

    def modify_cno(self, cno: Cno | None) -> None:
        """dat_evd_modify_cno: the CNO this EVD wakes (None: none)."""
        self.ia.core.evd_modify_cno(self.handle, cno.handle if cno is not None else 0)

    def enable(self) -> None:
        """dat_evd_enable."""
        self.ia.core.evd_enable(self.handle, True)

    def disable(self) -> None:
        """dat_evd_disable: events still queue, but wake no waiter of the EVD's CNO."""
        self.ia.core.evd_enable(self.handle, False)

    def set_unwaitable(self) -> None:
        """dat_evd_set_unwaitable: dat_evd_wait refuses until clear_unwaitable."""
        self.ia.core.evd_waitable(self.handle, False)

    def clear_unwaitable(self) -> None:
        """dat_evd_clear_unwaitable."""
        self.ia.core.evd_waitable(self.handle, True)

    def free(self) -> None:
        """dat_evd_free."""
        self.ia.run(self.ia.core.evd_free(self.handle))


class Cno(Handle):
    """A consumer notification object: one waiter for many EVDs."""

    TYPE = HandleType.CNO

    def wait(self, timeout: int = TIMEOUT_INFINITE) -> Evd:
        """dat_cno_wait: the EVD that has an event (only an enabled EVD wakes it)."""
        found: list[int] = []
        core = self.ia.core

        def ready() -> bool:
            evd = core.cno_ready(self.handle)
            if evd:
                found.append(evd)
            return bool(evd)

        def arm() -> None:
            core.arm([core.evds[h] for h in sorted(core.cnos.get(self.handle, ()))], 1)

        self.ia._until(ready, timeout, arm=arm)
        return Evd(self.ia, found[-1])

    def query(self) -> dict[str, Any]:
        """dat_cno_query: DAT_CNO_PARAM (the IA, the proxy type and agent)."""
        return {**self.ia.core.cno_query(self.handle), "ia": self.ia}

    def modify_agent(self, agent: Any) -> None:
        """dat_cno_modify_agent."""
        self.ia.core.cno_modify_agent(self.handle, agent)

    def trigger(self) -> NoReturn:
        """dat_cno_trigger: declined (DAT_MODEL_NOT_SUPPORTED: no CNO behind a descriptor)."""
        decline("dat_cno_trigger")

    def free(self) -> None:
        """dat_cno_free."""
        self.ia.core.cno_free(self.handle)


class Cr(Handle):
    """A connection request."""

    TYPE = HandleType.CR

    def query(self) -> CrInfo:
        """dat_cr_query."""
        return self.ia.core.cr_info(self.handle)

    def accept(self, ep: Any, private_data: bytes = b"") -> None:
        """dat_cr_accept (``ep``: an Ep, or None for the EP the request carries)."""
        self.ia.run(self.ia.core.cr_accept(self.handle, ep.handle if ep else None, private_data))

    def reject(self, private_data: bytes = b"") -> None:
        """dat_cr_reject."""
        self.ia.run(self.ia.core.cr_reject(self.handle, private_data))

    def handoff(self, conn_qual: int) -> None:
        """dat_cr_handoff: the request goes to the listener of ``conn_qual`` on this node, and
        this CR is destroyed."""
        self.ia.run(self.ia.core.cr_handoff(self.handle, conn_qual))
