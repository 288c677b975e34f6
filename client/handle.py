"""The base of every object the blocking DAT API hands out: a handle number of its IA, and the
DAT_HANDLE_TYPE dat_get_handle_type answers for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from proto.constants import HandleType

if TYPE_CHECKING:
    from client.api import Ia


class Handle:
    """A handle of an IA (client.api.Ia): ``handle`` is the number the core knows it by."""

    TYPE: ClassVar[HandleType]

    def __init__(self, ia: Ia, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.handle}>"
