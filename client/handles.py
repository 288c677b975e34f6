"""The objects the blocking DAT API hands out (PZ, LMR, RMR, PSP, RSP here; EVD, CNO and CR in
client/handles_evd.py, EP in client/handles_ep.py): each a handle of its IA, with the spec's
method names (dat_ep_post_send is ``Ep.post_send``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from client.core import LmrInfo, Triplet
from client.handle import Handle
from client.handles_ep import Ep
from client.handles_evd import Cno, Cr, Evd
from client.records import WindowState
from proto.constants import CompletionFlags, DatReturnSubtype, HandleType, MemPriv, MemType
from proto.errors import DatInvalidHandle

if TYPE_CHECKING:
    from client.api import Ia

Sub = DatReturnSubtype


class Pz(Handle):
    """A protection zone."""

    TYPE = HandleType.PZ

    def query(self) -> dict[str, Any]:
        """dat_pz_query: DAT_PZ_PARAM (its IA)."""
        self.ia.core.pz_check(self.handle)
        return {"ia": self.ia}

    def free(self) -> None:
        """dat_pz_free."""
        self.ia.run(self.ia.core.pz_free(self.handle))


class Lmr(Handle):
    """A registered local memory region."""

    TYPE = HandleType.LMR

    def __init__(self, ia: Ia, info: LmrInfo) -> None:
        super().__init__(ia, info.handle)
        self.info = info
        self.lmr_context = info.lmr_context
        self.rmr_context = info.rmr_context
        self.registered_size = info.registered_size
        self.registered_address = info.registered_address

    def triplet(self, offset: int = 0, length: int | None = None) -> list[int]:
        """An LMR triplet [virtual_address, segment_length, lmr_context] into this region."""
        if length is None:
            length = self.registered_size - offset
        return [self.registered_address + offset, length, self.lmr_context]

    def remote(self, offset: int = 0, length: int | None = None) -> list[int]:
        """The RMR triplet a peer needs to reach this region."""
        if length is None:
            length = self.registered_size - offset
        return [self.registered_address + offset, length, self.rmr_context]

    def query(self) -> LmrInfo:
        """dat_lmr_query."""
        if self.handle not in self.ia.core.lmrs:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, f"LMR {self.handle} was freed")
        return self.info

    def free(self) -> None:
        """dat_lmr_free."""
        self.ia.run(self.ia.core.lmr_free(self.handle))


class Rmr(Handle, WindowState):
    """A memory window: bound with dat_rmr_bind to part of an LMR, it has its own key (of EP
    scope for one made by dat_rmr_create_for_ep)."""

    TYPE = HandleType.RMR

    def __init__(self, ia: Ia, handle: int, pz: Pz, for_ep: bool = False) -> None:
        Handle.__init__(self, ia, handle)
        WindowState.__init__(self, pz, for_ep)

    def bind(
        self,
        lmr: Lmr | None,
        lmr_triplet: Triplet,
        privileges: int,
        ep: Ep,
        cookie: int = 0,
        flags: int = CompletionFlags.DEFAULT,
    ) -> int:
        """dat_rmr_bind: returns the new rmr_context (a length of 0 unbinds)."""
        lmr_handle = lmr.handle if lmr else 0
        bind = self.ia.core.rmr_bind(
            self.handle, lmr_handle, lmr_triplet, privileges, ep.handle, cookie, flags
        )
        return self._bound(lmr, lmr_triplet, privileges, self.ia.run(bind))

    def free(self) -> None:
        """dat_rmr_free."""
        self.ia.run(self.ia.core.rmr_free(self.handle))


class Psp(Handle):
    """A public service point."""

    TYPE = HandleType.PSP

    def query(self) -> dict[str, Any]:
        """dat_psp_query: DAT_PSP_PARAM (the IA, conn_qual, CR EVD, flags)."""
        info = self.ia.core.sp_query(self.handle, rsp=False)
        evd = Evd(self.ia, info.evd)
        return {"ia": self.ia, "conn_qual": info.conn_qual, "evd": evd, "psp_flags": info.flags}

    def free(self) -> None:
        """dat_psp_free."""
        self.ia.run(self.ia.core.psp_free(self.handle))


class Rsp(Handle):
    """A reserved service point."""

    TYPE = HandleType.RSP

    def query(self) -> dict[str, Any]:
        """dat_rsp_query: DAT_RSP_PARAM (the IA, conn_qual, CR EVD, EP)."""
        info = self.ia.core.sp_query(self.handle, rsp=True)
        evd, ep = Evd(self.ia, info.evd), Ep(self.ia, info.ep)
        return {"ia": self.ia, "conn_qual": info.conn_qual, "evd": evd, "ep": ep}

    def free(self) -> None:
        """dat_rsp_free."""
        self.ia.run(self.ia.core.rsp_free(self.handle))


__all__ = [
    "Cno",
    "Cr",
    "Ep",
    "Evd",
    "Lmr",
    "MemPriv",
    "MemType",
    "Psp",
    "Pz",
    "Rmr",
    "Rsp",
]
