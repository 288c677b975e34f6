"""Shared receive queues as the blocking and asyncio APIs hand them out (dat_srq_*); both
drive client.srqs through their IA."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from client.handle import Handle
from proto.constants import HandleType

if TYPE_CHECKING:
    from client.aio import AsyncIa

Triplet = Sequence[int]


class Srq(Handle):
    """A shared receive queue of a blocking IA."""

    TYPE = HandleType.SRQ

    def post_recv(self, local_iov: Sequence[Triplet], cookie: int = 0) -> None:
        """dat_srq_post_recv: a receive any EP of the SRQ may take."""
        doorbell = self.ia.core.srq_post_recv(self.handle, local_iov, cookie)
        if doorbell:
            self.ia._send(doorbell)

    def query(self) -> dict[str, Any]:
        """dat_srq_query: DAT_SRQ_PARAM (state, PZ, attributes, available and outstanding)."""
        return self.ia.core.srq(self.handle).param(self.ia)

    def resize(self, max_recv_dtos: int) -> None:
        """dat_srq_resize."""
        self.ia.core.srq_resize(self.handle, max_recv_dtos)

    def set_lw(self, low_watermark: int) -> None:
        """dat_srq_set_lw: arm the low watermark event once."""
        self.ia.run(self.ia.core.srq_set_lw(self.handle, low_watermark))

    def free(self) -> None:
        """dat_srq_free."""
        self.ia.run(self.ia.core.srq_free(self.handle))


class AsyncSrq:
    """A shared receive queue of an asyncio IA."""

    def __init__(self, ia: AsyncIa, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    def post_recv(self, local_iov: Sequence[Triplet], cookie: int = 0) -> None:
        """dat_srq_post_recv."""
        doorbell = self.ia.core.srq_post_recv(self.handle, local_iov, cookie)
        if doorbell:
            self.ia.send(doorbell)

    def query(self) -> dict[str, Any]:
        """dat_srq_query."""
        return self.ia.core.srq(self.handle).param(self.ia)

    def resize(self, max_recv_dtos: int) -> None:
        """dat_srq_resize."""
        self.ia.core.srq_resize(self.handle, max_recv_dtos)

    async def set_lw(self, low_watermark: int) -> None:
        """dat_srq_set_lw."""
        await self.ia.run(self.ia.core.srq_set_lw(self.handle, low_watermark))

    async def free(self) -> None:
        """dat_srq_free."""
        await self.ia.run(self.ia.core.srq_free(self.handle))
