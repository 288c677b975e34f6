"""What every function of the flat DAT layer (client.dat) shares: the out-parameter ``Ref``, a
call's DatError made its DAT_RETURN, the handle check and the iov check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from client.core import Triplet
from proto.constants import (
    DAT_SUCCESS,
    DatReturnSubtype,
)
from proto.errors import (
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
)

T = TypeVar("T")
Sub = DatReturnSubtype


class Ref(Generic[T]):
    """An out-parameter: the call stores its result in ``value``."""

    def __init__(self, value: T | None = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Ref({self.value!r})"


def status(fn: Callable[[], None]) -> int:
    """Run a call; its DatError is its DAT_RETURN (DAT_SUCCESS if none)."""
    try:
        fn()
    except DatError as err:
        return err.code
    return DAT_SUCCESS


def need(handle: Any, cls: type[Any], sub: DatReturnSubtype) -> Any:
    """The handle, if it is of ``cls``; else DAT_INVALID_HANDLE with ``sub``."""
    if not isinstance(handle, cls):
        raise DatInvalidHandle(sub, f"not a {cls.__name__} handle: {handle!r}")
    return handle


def out(ref: Ref[T] | None, arg: DatReturnSubtype, name: str) -> Ref[T]:
    """A required out-parameter; NULL (None) is DAT_INVALID_PARAMETER naming its position, as
    libdatfabric answers (checked after the handles, before anything is made)."""
    if ref is None:
        raise DatInvalidParameter(arg, f"{name} is NULL")
    return ref


def query(fn: Callable[[], T], param: Ref[T] | None) -> int:
    """A dat_*_query: the handle check (in ``fn``) first, then a NULL ``param`` (the third
    argument) is DAT_INVALID_PARAMETER."""

    def run() -> None:
        value = fn()
        out(param, Sub.INVALID_ARG3, "the param out-parameter").value = value

    return status(run)


def put(ref: Ref[Any] | None, value: Any) -> None:
    """Store an out-parameter (a NULL one, None, is skipped)."""
    if ref is not None:
        ref.value = value


def iov(
    num_segments: int, local_iov: Sequence[Triplet] | None, arg: Sub = Sub.INVALID_ARG2
) -> Sequence[Triplet]:
    """The first ``num_segments`` triplets (``arg``: num_segments' position in the call)."""
    given = local_iov or []
    if num_segments < 0 or num_segments > len(given):
        raise DatInvalidParameter(arg, "num_segments does not match the triplets given")
    return given[:num_segments]
