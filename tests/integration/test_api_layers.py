"""The flat dat_* layer (C order, numeric returns) and the asyncio API, against real daemons."""

from __future__ import annotations

import asyncio

from client.aio import AsyncIa
from client.api import Ep, Evd, Ia, Lmr, Psp, Pz
from client.core import CrInfo, Event, LmrInfo
from client.dat import (
    Ref,
    dat_cr_accept,
    dat_cr_query,
    dat_ep_connect,
    dat_ep_create,
    dat_ep_disconnect,
    dat_ep_free,
    dat_ep_get_status,
    dat_ep_post_rdma_read,
    dat_ep_post_rdma_write,
    dat_ep_post_recv,
    dat_ep_post_send,
    dat_ep_query,
    dat_evd_create,
    dat_evd_dequeue,
    dat_evd_free,
    dat_evd_wait,
    dat_ia_close,
    dat_ia_open,
    dat_ia_query,
    dat_lmr_create,
    dat_lmr_free,
    dat_lmr_query,
    dat_psp_create,
    dat_psp_free,
    dat_pz_create,
    dat_pz_free,
    dat_strerror,
)
from fabricd.launch import Node
from proto.constants import (
    DAT_SUCCESS,
    CloseFlags,
    DatReturnSubtype,
    DatReturnType,
    Dtos,
    EpState,
    EvdFlags,
    EventNumber,
    MemPriv,
    MemType,
    dat_error,
)
from proto.errors import (
    DatInvalidHandle,
    DatInvalidState,
    DatLengthError,
    DatQueueEmpty,
)
from tests.conformance.support import Sub, assert_code

WAIT = 10_000_000


def _side(socket: str) -> tuple[Ia, Pz, Evd, Ep, Lmr, memoryview]:
    ia: Ref[Ia] = Ref()
    assert dat_ia_open(socket, 8, Ref(), ia) == DAT_SUCCESS
    assert ia.value is not None
    pz: Ref[Pz] = Ref()
    evd: Ref[Evd] = Ref()
    ep: Ref[Ep] = Ref()
    lmr: Ref[Lmr] = Ref()
    size, addr, ctx = Ref[int](), Ref[int](), Ref[int]()
    assert dat_pz_create(ia.value, pz) == DAT_SUCCESS
    assert pz.value is not None
    assert dat_evd_create(ia.value, 32, None, EvdFlags.DEFAULT, evd) == DAT_SUCCESS
    assert (
        dat_ep_create(ia.value, pz.value, evd.value, evd.value, evd.value, None, ep) == DAT_SUCCESS
    )
    buf = ia.value.alloc(4096)
    assert (
        dat_lmr_create(
            ia.value,
            MemType.VIRTUAL,
            buf.address,
            4096,
            pz.value,
            MemPriv.ALL,
            0,
            lmr,
            ctx,
            Ref(),
            size,
            addr,
        )
        == DAT_SUCCESS
    )
    assert (size.value, addr.value) == (4096, buf.address)
    assert pz.value and evd.value and ep.value and lmr.value
    return ia.value, pz.value, evd.value, ep.value, lmr.value, buf.view


def _event(evd: Evd) -> Event:
    event: Ref[Event] = Ref()
    nmore: Ref[int] = Ref()
    assert dat_evd_wait(evd, WAIT, 1, event, nmore) == DAT_SUCCESS
    assert event.value is not None
    return event.value


def test_flat_layer_ports_c_code_line_by_line(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes
    ia_a, pz_a, evd_a, ep_a, lmr_a, view_a = _side(a.socket)
    ia_b, _pz_b, evd_b, ep_b, lmr_b, view_b = _side(b.socket)
    attr: Ref[dict[str, object]] = Ref()
    assert dat_ia_query(ia_b, None, 0, attr, 0, None) == DAT_SUCCESS
    assert attr.value is not None and attr.value["adapter_name"] == "node-b"

    # before connecting, a send is refused with the EP-state subtype
    ret = dat_ep_post_send(ep_a, 1, [lmr_a.triplet(0, 8)], 1, 0)
    assert ret == dat_error(
        DatReturnType.INVALID_STATE, DatReturnSubtype.INVALID_STATE_EP_UNCONNECTED
    )
    major, minor = Ref[str](), Ref[str]()
    assert dat_strerror(ret, major, minor) == DAT_SUCCESS
    assert (major.value, minor.value) == ("DAT_INVALID_STATE", "DAT_INVALID_STATE_EP_UNCONNECTED")
    assert_code(dat_pz_free(pz_a), DatInvalidState, Sub.INVALID_STATE_PZ_IN_USE)  # the EP uses it
    ret = dat_ep_free(evd_a)  # type: ignore[arg-type]
    assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_EP)
    empty: Ref[Event] = Ref()
    assert_code(dat_evd_dequeue(evd_a, empty), DatQueueEmpty, Sub.NO_SUBTYPE)

    psp: Ref[Psp] = Ref()
    assert dat_psp_create(ia_b, 45248, evd_b, 0, psp) == DAT_SUCCESS
    assert dat_ep_post_recv(ep_b, 1, [lmr_b.triplet(0, 64)], 77, 0) == DAT_SUCCESS
    pdata = bytes(range(1, 49))
    assert dat_ep_connect(ep_a, b.address, 45248, WAIT, 48, pdata, 0, 0) == DAT_SUCCESS
    request = _event(evd_b)
    assert request.event_number == EventNumber.CONNECTION_REQUEST_EVENT
    assert request.private_data == pdata
    cr_param: Ref[CrInfo] = Ref()
    assert dat_cr_query(request.cr_handle, 0, cr_param) == DAT_SUCCESS
    assert cr_param.value is not None and cr_param.value.private_data == pdata
    assert cr_param.value.conn_qual == 45248
    assert dat_cr_accept(request.cr_handle, ep_b, 2, b"ok") == DAT_SUCCESS
    est = _event(evd_a)
    assert (est.event_number, est.private_data) == (EventNumber.CONNECTION_EVENT_ESTABLISHED, b"ok")
    assert _event(evd_b).event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED

    state: Ref[int] = Ref()
    idle: Ref[bool] = Ref()
    assert dat_ep_get_status(ep_b, state, idle, None) == DAT_SUCCESS
    assert (state.value, idle.value) == (EpState.CONNECTED, False)  # a receive is posted
    param: Ref[dict[str, object]] = Ref()
    assert dat_ep_query(ep_a, 0, param) == DAT_SUCCESS
    assert param.value is not None and param.value["ep_state"] == EpState.CONNECTED
    lmr_param: Ref[LmrInfo] = Ref()
    assert dat_lmr_query(lmr_b, 0, lmr_param) == DAT_SUCCESS
    assert lmr_param.value is not None and lmr_param.value.rmr_context == lmr_b.rmr_context
    view_a[:16] = b"sixteen bytes..."
    assert dat_ep_post_send(ep_a, 1, [lmr_a.triplet(0, 16)], 5, 0) == DAT_SUCCESS
    recv = _event(evd_b)
    assert (recv.cookie, recv.transfered_length, recv.operation) == (77, 16, Dtos.RECEIVE)
    assert _event(evd_a).cookie == 5
    assert (
        dat_ep_post_rdma_write(ep_a, 1, [lmr_a.triplet(0, 16)], 6, lmr_b.remote(100, 16), 0)
        == DAT_SUCCESS
    )
    assert _event(evd_a).cookie == 6
    assert bytes(view_b[100:116]) == b"sixteen bytes..."
    # the remote buffer is too small for the local data: DAT_LENGTH_ERROR, synchronously
    ret = dat_ep_post_rdma_write(ep_a, 1, [lmr_a.triplet(0, 16)], 7, lmr_b.remote(0, 8), 0)
    assert_code(ret, DatLengthError, Sub.NO_SUBTYPE)
    assert (
        dat_ep_post_rdma_read(ep_a, 1, [lmr_a.triplet(200, 16)], 8, lmr_b.remote(100, 16), 0)
        == DAT_SUCCESS
    )
    assert _event(evd_a).cookie == 8
    assert bytes(view_a[200:216]) == b"sixteen bytes..."

    assert dat_ep_disconnect(ep_a, CloseFlags.ABRUPT) == DAT_SUCCESS
    assert _event(evd_a).event_number == EventNumber.CONNECTION_EVENT_DISCONNECTED
    assert _event(evd_b).event_number == EventNumber.CONNECTION_EVENT_DISCONNECTED
    assert_code(dat_evd_free(evd_a), DatInvalidState, Sub.INVALID_STATE_EVD_IN_USE)  # EP uses it
    assert dat_ep_free(ep_a) == DAT_SUCCESS
    assert dat_evd_free(evd_a) == DAT_SUCCESS
    assert dat_lmr_free(lmr_a) == DAT_SUCCESS
    assert_code(dat_lmr_free(lmr_a), DatInvalidHandle, Sub.INVALID_HANDLE_LMR)
    assert dat_pz_free(pz_a) == DAT_SUCCESS
    assert psp.value is not None and dat_psp_free(psp.value) == DAT_SUCCESS
    assert dat_ia_close(ia_a, CloseFlags.ABRUPT) == DAT_SUCCESS
    assert dat_ia_close(ia_b, CloseFlags.ABRUPT) == DAT_SUCCESS


def test_asyncio_api_drives_the_same_core(two_nodes: tuple[Node, Node]) -> None:
    a, b = two_nodes

    async def main() -> None:
        async with await AsyncIa.open(a.socket) as ia_a, await AsyncIa.open(b.socket) as ia_b:
            pz_a, pz_b = await ia_a.pz_create(), await ia_b.pz_create()
            evd_a, evd_b = await ia_a.evd_create(16), await ia_b.evd_create(16)
            ep_a = await ia_a.ep_create(pz_a, evd_a, evd_a, evd_a)
            ep_b = await ia_b.ep_create(pz_b, evd_b, evd_b, evd_b)
            buf_a, buf_b = ia_a.alloc(1 << 16), ia_b.alloc(1 << 16)
            lmr_a = await ia_a.lmr_create(MemType.VIRTUAL, buf_a, 1 << 16, pz_a, MemPriv.ALL)
            lmr_b = await ia_b.lmr_create(MemType.VIRTUAL, buf_b, 1 << 16, pz_b, MemPriv.ALL)
            await ia_b.psp_create(9, evd_b)
            await ep_a.connect(b.address, 9, WAIT)
            request, _ = await evd_b.wait(WAIT)
            await ia_b.cr_accept(request, ep_b)
            established, _ = await evd_a.wait(WAIT)
            assert established.event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
            buf_a.view[:] = bytes(i % 251 for i in range(1 << 16))
            remote = [lmr_b.registered_address, 1 << 16, lmr_b.rmr_context]
            ep_a.post(
                Dtos.RDMA_WRITE,
                [[lmr_a.registered_address, 1 << 16, lmr_a.lmr_context]],
                11,
                remote,
            )
            done, nmore = await evd_a.wait(WAIT)
            assert (done.cookie, done.status, done.transfered_length, nmore) == (11, 0, 1 << 16, 0)
            assert bytes(buf_b.view) == bytes(buf_a.view)
            await ep_a.disconnect()
            assert ep_a.state.name == "DISCONNECTED"

    asyncio.run(main())


def test_asyncio_api_offers_windows_rsps_cnos_modify_sync_and_pz_free(
    two_nodes: tuple[Node, Node],
) -> None:
    """What the asyncio API lacked before it caught up with the blocking one, in one flow: an
    EP modified onto its EVD, an RSP taking the request, a CNO waking for it, a memory window
    bound and written through, lmr_sync, and every object freed (pz_free last)."""
    a, b = two_nodes

    async def main() -> None:
        async with await AsyncIa.open(a.socket) as ia_a, await AsyncIa.open(b.socket) as ia_b:
            pz_a, pz_b = await ia_a.pz_create(), await ia_b.pz_create()
            cno = ia_b.cno_create()
            evd_a, evd_b = await ia_a.evd_create(16), await ia_b.evd_create(16, cno=cno)
            ep_a = await ia_a.ep_create(pz_a, evd_a, evd_a, None)
            await ep_a.modify(connect_evd=evd_a)
            assert ep_a.query()["connect_evd"] == evd_a.handle
            ep_b = await ia_b.ep_create(pz_b, evd_b, evd_b, evd_b)
            buf_a, buf_b = ia_a.alloc(4096), ia_b.alloc(4096)
            lmr_a = await ia_a.lmr_create(MemType.VIRTUAL, buf_a, 4096, pz_a, MemPriv.ALL)
            lmr_b = await ia_b.lmr_create(MemType.VIRTUAL, buf_b, 4096, pz_b, MemPriv.ALL)
            assert ia_b.lmr_query(lmr_b) is lmr_b
            await ia_b.rsp_create(10, ep_b, evd_b)
            await ep_a.connect(b.address, 10, WAIT)
            woken = await cno.wait(WAIT)
            assert woken.handle == evd_b.handle
            request, _ = await evd_b.wait(WAIT)
            await ia_b.cr_accept(request, None)  # an RSP's request carries its EP
            assert (await evd_a.wait(WAIT))[
                0
            ].event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
            assert (await evd_b.wait(WAIT))[
                0
            ].event_number == EventNumber.CONNECTION_EVENT_ESTABLISHED
            window = await ia_b.rmr_create(pz_b)
            await window.bind(lmr_b, [lmr_b.registered_address + 64, 64, lmr_b.lmr_context],
                              MemPriv.REMOTE_WRITE, ep_b, 7)  # fmt: skip
            bound, _ = await evd_b.wait(WAIT)
            assert (bound.event_number, bound.cookie) == (EventNumber.RMR_BIND_COMPLETION_EVENT, 7)
            buf_a.view[:8] = b"windowed"
            ep_a.post(Dtos.RDMA_WRITE, [[lmr_a.registered_address, 8, lmr_a.lmr_context]], 1,
                      window.remote(0, 8))  # fmt: skip
            done, _ = await evd_a.wait(WAIT)
            assert done.status == 0 and ep_a.get_status()[0] == EpState.CONNECTED
            await ia_b.lmr_sync_rdma_write([[lmr_b.registered_address, 4096, lmr_b.lmr_context]])
            assert bytes(buf_b.view[64:72]) == b"windowed"
            assert window.query()["rmr_context"] == window.rmr_context != lmr_b.rmr_context
            await ep_a.disconnect()
            for ep in (ep_a, ep_b):
                while ep.state != EpState.DISCONNECTED:
                    await asyncio.sleep(0.01)
                await ep.free()
            await window.free()
            spare = await ia_b.ep_create(pz_b, evd_b, evd_b, evd_b)
            await ia_b.rsp_free(await ia_b.rsp_create(11, spare, evd_b))  # one that never fired
            await spare.free()
            await evd_b.free()
            cno.free()  # no EVD is attached any more
            await ia_b.lmr_free(lmr_b)
            await ia_b.pz_free(pz_b)

    asyncio.run(main())
