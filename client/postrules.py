"""What each post needs, as one table (client.posting's checks read it): the opcode, the
local privilege and segment limit, which argument the completion flags are, where the data
lands; and the IB extensions' operands with the argument each is and its C type's range."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from proto.constants import DatReturnSubtype as Sub
from proto.constants import Dtos, MemPriv
from proto.hostif import U32, Opcode

U64: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class PostRule:
    """What a post of one kind needs: its opcode, the local privilege and segment limit
    (an EpAttr field), which argument its completion_flags are, where the data lands."""

    opcode: Opcode
    need: MemPriv
    max_iov: str
    flags_arg: Sub  # completion_flags: 5th argument of post_send/recv, 6th of the RDMA posts
    receive: bool = False
    send: bool = False  # no remote buffer
    into_local: bool = False  # an RDMA Read: the remote bytes land in the local iov
    atomic: bool = False  # 8 bytes at an aligned remote address; the original comes back
    shift: int = 0  # the call has this many arguments more before the iov (compare-and-swap)
    plain: bool = False  # client._ringpost may take it (one segment, no operands)
    opcode_bits: int = field(init=False)
    need_bits: int = field(init=False)  # ``need`` as a plain int: IntFlag operators are slow

    def __post_init__(self) -> None:
        object.__setattr__(self, "need_bits", int(self.need))
        object.__setattr__(self, "opcode_bits", int(self.opcode))


POST_RULES: Final = {
    Dtos.SEND: PostRule(
        Opcode.SEND,
        MemPriv.LOCAL_READ,
        "max_request_iov",
        Sub.INVALID_ARG5,
        send=True,
        plain=True,
    ),
    Dtos.RECEIVE: PostRule(
        Opcode.RECEIVE,
        MemPriv.LOCAL_WRITE,
        "max_recv_iov",
        Sub.INVALID_ARG5,
        receive=True,
        plain=True,
    ),
    Dtos.RDMA_WRITE: PostRule(
        Opcode.RDMA_WRITE, MemPriv.LOCAL_READ, "max_rdma_write_iov", Sub.INVALID_ARG6, plain=True
    ),
    Dtos.RDMA_READ: PostRule(
        Opcode.RDMA_READ,
        MemPriv.LOCAL_WRITE,
        "max_rdma_read_iov",
        Sub.INVALID_ARG6,
        into_local=True,
        plain=True,
    ),
    Dtos.IB_FETCH_ADD: PostRule(
        Opcode.FETCH_ADD, MemPriv.LOCAL_WRITE, "max_rdma_read_iov", Sub.INVALID_ARG6, atomic=True
    ),
    Dtos.IB_CMP_SWAP: PostRule(
        Opcode.CMP_SWAP,
        MemPriv.LOCAL_WRITE,
        "max_rdma_read_iov",
        Sub.INVALID_ARG6,
        atomic=True,
        shift=1,
    ),
    Dtos.IB_RDMA_WRITE_IMMED: PostRule(
        Opcode.RDMA_WRITE_IMM, MemPriv.LOCAL_READ, "max_rdma_write_iov", Sub.INVALID_ARG7
    ),
}
"""The argument positions name the flat calls': dat_ib_post_fetch_and_add(ep, add_value,
local_iov, cookie, remote_iov, flags), dat_ib_post_cmp_and_swap(ep, compare, swap, local_iov,
cookie, remote_iov, flags), dat_ib_post_rdma_write_immed(ep, num_segments, local_iov, cookie,
remote_iov, immed_data, flags)."""
IB_DTOS: Final = Dtos.IB_RDMA_WRITE_IMMED
OPERANDS: Final = {  # the argument and range of the WQE's operand, then of its compare
    Opcode.FETCH_ADD: ((Sub.INVALID_ARG2, U64), (Sub.INVALID_ARG2, 0)),
    Opcode.CMP_SWAP: ((Sub.INVALID_ARG3, U64), (Sub.INVALID_ARG2, U64)),
    Opcode.RDMA_WRITE_IMM: ((Sub.INVALID_ARG6, U32 - 1), (Sub.INVALID_ARG6, 0)),
}
