"""Shared receive queues against real daemons: large Sends arriving together on two EPs of one
SRQ, over two TCP streams, each land whole in a receive of their own; the asyncio API drives
an SRQ too."""

from __future__ import annotations

import asyncio

from client.aio import AsyncIa
from client.api import Ia
from fabricd.launch import Node
from proto.constants import DtoCompletionStatus as St
from proto.constants import Dtos, EventNumber, MemPriv, MemType
from tests.conftest import StartNode
from tests.integration.flows import WAIT_US, wait_event

MIB = 1 << 20


def test_large_sends_at_once_on_two_eps_each_land_in_a_receive_of_their_own(
    start: StartNode,
) -> None:
    """The senders are on two other nodes, so their streams may interleave at the owner's
    (tests/core/test_srq.py interleaves them for sure, half a Send at a time)."""
    b = start("srq-owner")
    sender_nodes = [start("srq-a"), start("srq-b")]
    with Ia(b.socket) as owner:
        pz = owner.pz_create()
        evd = owner.evd_create(64)
        srq = owner.srq_create(pz, 8)
        buf = owner.alloc(4 * MIB)
        lmr = owner.lmr_create(MemType.VIRTUAL, buf, 4 * MIB, pz, MemPriv.ALL)
        eps = [owner.ep_create_with_srq(pz, evd, evd, evd, srq) for _ in range(2)]
        senders = []
        for i, ep in enumerate(eps):
            ia = Ia(sender_nodes[i].socket)
            spz = ia.pz_create()
            sevd = ia.evd_create(64)
            sep = ia.ep_create(spz, sevd, sevd, sevd)
            sbuf = ia.alloc(MIB)
            slmr = ia.lmr_create(MemType.VIRTUAL, sbuf, MIB, spz, MemPriv.ALL)
            sbuf.view[:] = bytes([0x41 + i]) * MIB
            psp = owner.psp_create(4300 + i, evd)
            sep.connect((b.host, b.port), 4300 + i, WAIT_US)
            owner.cr(wait_event(evd, EventNumber.CONNECTION_REQUEST_EVENT)).accept(ep)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            wait_event(sevd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            psp.free()
            senders.append((ia, sep, sevd, slmr))
        try:
            for round_ in range(5):
                for k in range(2):
                    srq.post_recv([lmr.triplet(k * MIB, MIB)], 10 * round_ + k)
                for _, sep, _, slmr in senders:
                    sep.post_send([slmr.triplet(0, MIB)], round_)
                for _, _, sevd, _ in senders:
                    assert sevd.wait(WAIT_US)[0].status == St.DTO_SUCCESS
                got = [evd.wait(WAIT_US)[0] for _ in range(2)]
                assert sorted(e.cookie for e in got) == [10 * round_, 10 * round_ + 1]
                assert all(
                    (e.status, e.operation, e.transfered_length) == (0, Dtos.RECEIVE, MIB)
                    for e in got
                )
                assert {e.ep for e in got} == {ep.handle for ep in eps}
                halves = {bytes(buf.view[k * MIB : (k + 1) * MIB]) for k in range(2)}
                assert halves == {b"A" * MIB, b"B" * MIB}, f"round {round_}: a receive got both"
                buf.view[: 2 * MIB] = bytes(2 * MIB)
        finally:
            for ia, *_ in senders:
                ia.close()


def test_asyncio_api_drives_an_srq(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes

    async def run() -> None:
        async with await AsyncIa.open(b.socket) as owner, await AsyncIa.open(a.socket) as other:
            pz = await owner.pz_create()
            evd = await owner.evd_create(16)
            srq = await owner.srq_create(pz, 4, 1, 0)
            ep = await owner.ep_create_with_srq(pz, evd, evd, evd, srq)
            buf = owner.alloc(4096)
            lmr = await owner.lmr_create(MemType.VIRTUAL, buf, 4096, pz, MemPriv.ALL)
            srq.post_recv([[lmr.registered_address, 64, lmr.lmr_context]], 7)
            opz = await other.pz_create()
            oevd = await other.evd_create(16)
            oep = await other.ep_create(opz, oevd, oevd, oevd)
            obuf = other.alloc(4096)
            olmr = await other.lmr_create(MemType.VIRTUAL, obuf, 4096, opz, MemPriv.ALL)
            await owner.psp_create(4310, evd)
            await oep.connect((b.host, b.port), 4310, WAIT_US)
            request, _ = await evd.wait(WAIT_US)
            await owner.cr_accept(request, ep)
            await evd.wait(WAIT_US)
            await oevd.wait(WAIT_US)
            obuf.view[:5] = b"hello"
            oep.post(Dtos.SEND, [[olmr.registered_address, 5, olmr.lmr_context]], 1)
            got, _ = await evd.wait(WAIT_US)
            assert (got.cookie, got.transfered_length, bytes(buf.view[:5])) == (7, 5, b"hello")
            assert srq.query()["outstanding_dto_count"] == 0
            await ep.free()
            await srq.free()

    asyncio.run(run())
