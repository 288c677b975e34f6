"""What the blocking IA (client.api.Ia) and the asyncio IA (client.aio.AsyncIa) share beyond the
core: the calls on any handle (dat_set_consumer_context, dat_get_consumer_context,
dat_get_handle_type) and the DAT 2.0 calls this provider declines, with why."""

from __future__ import annotations

from typing import Any, Final, NoReturn

from client.core import ClientCore
from proto.constants import DatReturnSubtype, HandleType
from proto.errors import DatModelNotSupported

Sub = DatReturnSubtype

DECLINED: Final = {
    "dat_csp_create": "no common service points: the DAT_COMM connection model is not offered",
    "dat_csp_query": "no common service points: the DAT_COMM connection model is not offered",
    "dat_csp_free": "no common service points: the DAT_COMM connection model is not offered",
    "dat_ep_common_connect": "it connects through a common service point, and none is offered",
    "dat_ep_post_send_with_invalidate": "no remote invalidation of an RMR (as OFED's dapl)",
    "dat_ep_post_rdma_read_to_rmr": "no RDMA Read into an RMR (as OFED's dapl)",
    "dat_cno_fd_create": "no CNO behind a file descriptor (as OFED's dapl)",
    "dat_cno_trigger": "no CNO behind a file descriptor to trigger (as OFED's dapl)",
    "dat_ia_ha_related": "no high availability between IAs (as OFED's dapl)",
}
"""The calls answered DAT_MODEL_NOT_SUPPORTED, the same in the three Python APIs and the C
provider (docs/provider.md, "Entry points"), and the reason each gives."""


def decline(call: str) -> NoReturn:
    """Refuse ``call`` as this provider does: DAT_MODEL_NOT_SUPPORTED, with the reason."""
    raise DatModelNotSupported(message=f"{call}: {DECLINED[call]}")


class HandleCalls:
    """The calls of an IA that take any of its handles, and the declined calls that create
    objects of the IA. The API gives ``_identify``: a handle object as (type, number)."""

    core: ClientCore

    def _identify(self, handle: Any) -> tuple[HandleType, int]:
        raise NotImplementedError

    def set_consumer_context(self, handle: Any, context: Any) -> None:
        """dat_set_consumer_context: any value, kept with the handle (DAT_INVALID_HANDLE for
        one that is not a live handle of this IA)."""
        self.core.set_context(*self._identify(handle), context)

    def get_consumer_context(self, handle: Any) -> Any:
        """dat_get_consumer_context: what dat_set_consumer_context kept (None: nothing)."""
        return self.core.get_context(*self._identify(handle))

    def get_handle_type(self, handle: Any) -> HandleType:
        """dat_get_handle_type."""
        kind, number = self._identify(handle)
        self.core.get_context(kind, number)  # DAT_INVALID_HANDLE if it is not live
        return kind

    def csp_create(self, comm: Any, address: Any, evd: Any) -> NoReturn:
        """dat_csp_create: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_csp_create")

    def csp_query(self, csp: Any) -> NoReturn:
        """dat_csp_query: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_csp_query")

    def csp_free(self, csp: Any) -> NoReturn:
        """dat_csp_free: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_csp_free")

    def cno_fd_create(self) -> NoReturn:
        """dat_cno_fd_create: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_cno_fd_create")

    def ha_related(self, provider: str) -> NoReturn:
        """dat_ia_ha_related: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_ia_ha_related")
