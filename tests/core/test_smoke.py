"""First light of the in-memory fabric."""

from __future__ import annotations

from proto.constants import DtoCompletionStatus, Dtos, EventNumber
from tests.core.flows import pair


def test_write_lands_and_completes() -> None:
    fabric, a, b = pair()
    a.memory(0, 16)[:] = b"0123456789abcdef"
    a.c.post(Dtos.RDMA_WRITE, a.ep, [a.triplet(0, 16)], 7, b.rmr(100, 16), 0)
    fabric.run()
    assert bytes(b.memory(100, 16)) == b"0123456789abcdef"
    (done,) = a.events()
    assert done.event_number == EventNumber.DTO_COMPLETION_EVENT
    assert (done.cookie, done.status, done.transfered_length) == (
        7,
        DtoCompletionStatus.DTO_SUCCESS,
        16,
    )
