"""The IB extensions against real daemons: the three Python APIs post them, and the atomics are
atomic: consumers on several nodes adding to one counter at once end with exactly the sum (and
each saw a different original value), and compare-and-swap used as a lock never lets two
consumers hold it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from client.aio import AsyncIa
from client.api import Ep, Evd, Ia, Lmr
from client.dat import (
    dat_ib_post_cmp_and_swap,
    dat_ib_post_fetch_and_add,
    dat_ib_post_rdma_write_immed,
)
from fabricd.launch import Node
from proto.constants import DAT_SUCCESS, Dtos, EventNumber, IbExtType, MemPriv, MemType
from proto.constants import DatReturnSubtype as Sub
from proto.constants import DtoCompletionStatus as St
from proto.errors import DatInvalidParameter, DatLengthError, DatQueueEmpty
from tests.conftest import StartNode
from tests.integration.flows import WAIT_US, connect_pair, wait_event

ATOMIC = MemPriv.ALL | MemPriv.REMOTE_ATOMIC
U64 = 1 << 64


def _done(evd: Evd) -> tuple[int, int, IbExtType | None, int]:
    event, _ = evd.wait(WAIT_US)
    assert event.event_number == EventNumber.IB_DTO_EVENT, event
    assert event.status == St.DTO_SUCCESS, event
    return event.cookie, event.operation, event.ext_type, event.transfered_length


def _u64(view: memoryview, offset: int) -> int:
    return int.from_bytes(view[offset : offset + 8], "little")


def test_blocking_and_flat_apis_across_two_daemons(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    p = connect_pair(a.socket, b.socket, (b.host, b.port), privileges=ATOMIC)
    try:
        p.view_b[0:8] = (41).to_bytes(8, "little")
        p.ep_a.post_fetch_and_add(1, [p.lmr_a.triplet(0, 8)], 1, p.lmr_b.remote(0, 8))
        assert _done(p.evd_a) == (1, Dtos.IB_FETCH_ADD, IbExtType.FETCH_AND_ADD, 8)
        assert (_u64(p.view_a, 0), _u64(p.view_b, 0)) == (41, 42)

        p.ep_a.post_cmp_and_swap(42, 7, [p.lmr_a.triplet(8, 8)], 2, p.lmr_b.remote(0, 8))
        assert _done(p.evd_a) == (2, Dtos.IB_CMP_SWAP, IbExtType.CMP_AND_SWAP, 8)
        assert (_u64(p.view_a, 8), _u64(p.view_b, 0)) == (42, 7)

        p.ep_b.post_recv([p.lmr_b.triplet(4096, 0)], 30)
        p.view_a[1024:1124] = bytes(range(100))
        p.ep_a.post_rdma_write_immed([p.lmr_a.triplet(1024, 100)], 3, p.lmr_b.remote(512), 0xBEEF)
        assert _done(p.evd_a) == (3, Dtos.IB_RDMA_WRITE_IMMED, IbExtType.RDMA_WRITE_IMMED, 100)
        received, _ = p.evd_b.wait(WAIT_US)
        assert (received.event_number, received.cookie, received.operation) == (
            EventNumber.IB_DTO_EVENT,
            30,
            Dtos.IB_RECV_IMMED,
        )
        assert (received.ext_type, received.immed_data, received.transfered_length) == (
            IbExtType.RDMA_WRITE_IMMED_DATA,
            0xBEEF,
            100,
        )
        assert bytes(p.view_b[512:612]) == bytes(range(100))

        # the flat layer: numeric returns, the argument named by its position in the call
        local, remote = p.lmr_a.triplet(16, 8), p.lmr_b.remote(0, 8)
        assert dat_ib_post_fetch_and_add(p.ep_a, 3, local, 4, remote, 0) == DAT_SUCCESS
        assert _done(p.evd_a)[:2] == (4, Dtos.IB_FETCH_ADD)
        assert dat_ib_post_cmp_and_swap(p.ep_a, 10, 11, local, 5, remote, 0) == DAT_SUCCESS
        assert _done(p.evd_a)[:2] == (5, Dtos.IB_CMP_SWAP)
        assert (_u64(p.view_a, 16), _u64(p.view_b, 0)) == (10, 11)
        misaligned = p.lmr_b.remote(4, 8)
        code = DatInvalidParameter(Sub.INVALID_ARG6).code
        assert dat_ib_post_cmp_and_swap(p.ep_a, 1, 2, local, 6, misaligned, 0) == code
        wide = p.lmr_a.triplet(16, 16)
        assert dat_ib_post_fetch_and_add(p.ep_a, 1, wide, 7, remote, 0) == DatLengthError().code
        code = DatInvalidParameter(Sub.INVALID_ARG6).code
        assert dat_ib_post_rdma_write_immed(p.ep_a, 1, [local], 8, remote, U64, 0) == code
        with pytest.raises(DatQueueEmpty):  # the refused posts queued nothing
            p.evd_a.dequeue()
    finally:
        p.close()


def test_asyncio_api_posts_the_extensions(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes

    async def run() -> None:
        ia_a, ia_b = await AsyncIa.open(a.socket), await AsyncIa.open(b.socket)
        try:
            pz_a, pz_b = await ia_a.pz_create(), await ia_b.pz_create()
            evd_a, evd_b = await ia_a.evd_create(64), await ia_b.evd_create(64)
            ep_a = await ia_a.ep_create(pz_a, evd_a, evd_a, evd_a)
            ep_b = await ia_b.ep_create(pz_b, evd_b, evd_b, evd_b)
            buf_a, buf_b = ia_a.alloc(4096), ia_b.alloc(4096)
            lmr_a = await ia_a.lmr_create(MemType.VIRTUAL, buf_a, 4096, pz_a, ATOMIC)
            lmr_b = await ia_b.lmr_create(MemType.VIRTUAL, buf_b, 4096, pz_b, ATOMIC)
            await ia_b.psp_create(4100, evd_b)
            await ep_a.connect((b.host, b.port), 4100, WAIT_US)
            request, _ = await evd_b.wait(WAIT_US)
            await ia_b.cr_accept(request, ep_b)
            await evd_a.wait(WAIT_US)
            await evd_b.wait(WAIT_US)
            buf_b.view[0:8] = (5).to_bytes(8, "little")
            local = [lmr_a.registered_address, 8, lmr_a.lmr_context]
            remote = [lmr_b.registered_address, 8, lmr_b.rmr_context]
            ep_a.post(Dtos.IB_FETCH_ADD, [local], 1, remote, operands=(10, 0))
            event, _ = await evd_a.wait(WAIT_US)
            assert (event.event_number, event.ext_type) == (
                EventNumber.IB_DTO_EVENT,
                IbExtType.FETCH_AND_ADD,
            )
            assert (_u64(buf_a.view, 0), _u64(buf_b.view, 0)) == (5, 15)
        finally:
            await ia_a.close()
            await ia_b.close()

    asyncio.run(run())


# -- atomicity across nodes --------------------------------------------------------------------


@dataclass
class Owner:
    """The consumer whose memory holds the shared words, with one accepted EP per worker."""

    ia: Ia
    lmr: Lmr
    view: memoryview
    eps: list[Ep] = field(default_factory=list)


@dataclass
class Worker:
    """A consumer on some node with one EP connected to the owner, and registered memory
    (8 bytes per outstanding atomic) where the original values land."""

    ia: Ia
    ep: Ep
    evd: Evd
    lmr: Lmr
    view: memoryview

    def atomic(self, post: Callable[[list[int], int], None]) -> int:
        """Post one atomic (its local buffer: the first 8 bytes) and wait: the original."""
        post(self.lmr.triplet(0, 8), 0)
        event, _ = self.evd.wait(WAIT_US)
        assert event.status == St.DTO_SUCCESS, event
        return _u64(self.view, 0)


def _fabric(nodes: list[Node], per_node: int) -> tuple[Owner, list[Worker]]:
    """An owner on the first node; ``per_node`` workers on every node, each connected to it."""
    owner_ia = Ia(nodes[0].socket)
    pz = owner_ia.pz_create()
    evd = owner_ia.evd_create(1024)
    buf = owner_ia.alloc(4096)
    owner = Owner(owner_ia, owner_ia.lmr_create(MemType.VIRTUAL, buf, 4096, pz, ATOMIC), buf.view)
    owner_ia.psp_create(4200, evd)
    workers = []
    for node in nodes:
        for _ in range(per_node):
            ia = Ia(node.socket)
            wpz = ia.pz_create()
            wevd = ia.evd_create(1024)
            ep = ia.ep_create(wpz, wevd, wevd, wevd)
            wbuf = ia.alloc(4096)
            lmr = ia.lmr_create(MemType.VIRTUAL, wbuf, 4096, wpz, ATOMIC)
            ep_owner = owner_ia.ep_create(pz, evd, evd, evd)
            ep.connect((nodes[0].host, nodes[0].port), 4200, WAIT_US)
            request = wait_event(evd, EventNumber.CONNECTION_REQUEST_EVENT)
            owner_ia.cr(request).accept(ep_owner)
            wait_event(evd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            wait_event(wevd, EventNumber.CONNECTION_EVENT_ESTABLISHED)
            owner.eps.append(ep_owner)
            workers.append(Worker(ia, ep, wevd, lmr, wbuf.view))
    return owner, workers


def _run_all(workers: list[Worker], body: Callable[[Worker, int], None]) -> None:
    errors: list[BaseException] = []

    def run(worker: Worker, index: int) -> None:
        try:
            body(worker, index)
        except BaseException as err:  # reported by the test thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(w, i)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors


def _close(owner: Owner, workers: list[Worker]) -> None:
    for w in workers:
        w.ia.close()
    owner.ia.close()


def test_fetch_and_add_from_several_nodes_sums_exactly(start: StartNode) -> None:
    """Two workers on each of three nodes (one of them the owner's: its local path), each
    adding 1 two hundred times with up to four adds outstanding: the counter ends at exactly
    the sum, and the originals they got back are every value from 0 to the sum, once each."""
    nodes = [start(f"fa{i}") for i in range(3)]
    owner, workers = _fabric(nodes, per_node=2)
    adds, window = 200, 4
    counter = owner.lmr.remote(0, 8)
    seen: list[list[int]] = [[] for _ in workers]

    def body(w: Worker, index: int) -> None:
        outstanding = 0
        for n in range(adds):
            w.ep.post_fetch_and_add(1, [w.lmr.triplet(8 * (n % window), 8)], n, counter)
            outstanding += 1
            if outstanding == window or n == adds - 1:
                for _ in range(outstanding):
                    event, _ = w.evd.wait(WAIT_US)
                    assert event.status == St.DTO_SUCCESS, event
                    seen[index].append(_u64(w.view, 8 * (event.cookie % window)))
                outstanding = 0

    try:
        _run_all(workers, body)
        total = adds * len(workers)
        assert _u64(owner.view, 0) == total
        assert sorted(v for got in seen for v in got) == list(range(total))
    finally:
        _close(owner, workers)


def test_cmp_and_swap_as_a_lock_never_lets_two_hold_it(start: StartNode) -> None:
    """Workers on three nodes take a lock word with compare-and-swap (0 -> their id), and
    while holding it add 1 to an occupancy word and take it off again: every add finds the
    occupancy 0 (nobody else inside), every release finds their own id; thirty rounds each."""
    nodes = [start(f"cs{i}") for i in range(3)]
    owner, workers = _fabric(nodes, per_node=2)
    rounds = 30
    lock, inside = owner.lmr.remote(0, 8), owner.lmr.remote(8, 8)
    entered = [0] * len(workers)

    def body(w: Worker, index: int) -> None:
        me = index + 1
        for _ in range(rounds):
            while w.atomic(lambda loc, c: w.ep.post_cmp_and_swap(0, me, [loc], c, lock)):
                pass  # held by another: try again
            was = w.atomic(lambda loc, c: w.ep.post_fetch_and_add(1, [loc], c, inside))
            assert was == 0, f"worker {me} entered with {was} inside"
            entered[index] += 1
            w.atomic(lambda loc, c: w.ep.post_fetch_and_add(U64 - 1, [loc], c, inside))
            held = w.atomic(lambda loc, c: w.ep.post_cmp_and_swap(me, 0, [loc], c, lock))
            assert held == me, f"worker {me} released a lock held by {held}"

    try:
        _run_all(workers, body)
        assert entered == [rounds] * len(workers)
        assert (_u64(owner.view, 0), _u64(owner.view, 8)) == (0, 0)
    finally:
        _close(owner, workers)
