"""The shared receive queues' calls (docs/host-interface.md section 10): their arguments and
results as typed records; proto.calls routes them with the rest."""

from __future__ import annotations

from typing import Annotated, NamedTuple

from proto.handle_args import EVD_CONN, EVD_RECV, EVD_REQUEST, HANDLE_PZ, HANDLE_SRQ
from proto.schema import arg


class EpCreateWithSrq(NamedTuple):
    """dat_ep_create_with_srq: as dat_ep_create, its receives taken from ``srq``."""

    pz: Annotated[int, HANDLE_PZ]
    recv_evd: Annotated[int, EVD_RECV]
    request_evd: Annotated[int, EVD_REQUEST]
    connect_evd: Annotated[int, EVD_CONN]
    srq: Annotated[int, HANDLE_SRQ]
    attr: Annotated[dict[str, int] | None, arg(7)]


class SrqCreate(NamedTuple):
    """dat_srq_create: the PZ and the DAT_SRQ_ATTR asked for."""

    pz: Annotated[int, HANDLE_PZ]
    max_recv_dtos: Annotated[int, arg(3)]
    max_recv_iov: Annotated[int, arg(3)]
    low_watermark: Annotated[int, arg(3)]


class SrqHandle(NamedTuple):
    """dat_srq_free."""

    srq: Annotated[int, HANDLE_SRQ]


class SrqSetLw(NamedTuple):
    """dat_srq_set_lw: arms the low watermark event once more."""

    srq: Annotated[int, HANDLE_SRQ]
    low_watermark: Annotated[int, arg(2)]


class SrqCreated(NamedTuple):
    """dat_srq_create: the handle and the attributes granted."""

    srq: int
    max_recv_dtos: int
    max_recv_iov: int
