"""The exact DAT_RETURN of every failing call the flat layer gained with the rest of DAT 2.0
(EVD and CNO calls, queries, handle calls, dup_connect, handoff, watermarks, EP-scope RMRs, and
the declined calls), over real daemons, by the rule of test_flat_return_codes.py (whose
test_every_failing_flat_call_has_a_row counts these rows too)."""

from __future__ import annotations

from typing import Any

import pytest

from client.api import Cno, Cr, Ep, Evd, Psp, Pz, Rsp
from client.core import Event
from client.dat import (
    Ref,
    dat_cno_create,
    dat_cno_fd_create,
    dat_cno_free,
    dat_cno_modify_agent,
    dat_cno_query,
    dat_cno_trigger,
    dat_cno_wait,
    dat_cr_handoff,
    dat_csp_create,
    dat_csp_free,
    dat_csp_query,
    dat_ep_common_connect,
    dat_ep_dup_connect,
    dat_ep_modify,
    dat_ep_post_rdma_read_to_rmr,
    dat_ep_post_send_with_invalidate,
    dat_ep_recv_query,
    dat_ep_set_watermark,
    dat_evd_clear_unwaitable,
    dat_evd_disable,
    dat_evd_enable,
    dat_evd_modify_cno,
    dat_evd_post_se,
    dat_evd_query,
    dat_evd_resize,
    dat_evd_set_unwaitable,
    dat_evd_wait,
    dat_get_consumer_context,
    dat_get_handle_type,
    dat_ia_ha_related,
    dat_ia_query,
    dat_ib_post_cmp_and_swap,
    dat_ib_post_rdma_write_immed,
    dat_psp_create_any,
    dat_psp_query,
    dat_pz_query,
    dat_rmr_create_for_ep,
    dat_rsp_query,
    dat_set_consumer_context,
)
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import EpParamMask, EvdFlags, EventNumber, Qos
from proto.errors import (
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatModelNotSupported,
    DatQueueFull,
    DatTimeoutExpired,
)
from tests.conformance.support import QUALS, Side, Sub, assert_code, connected
from tests.conformance.test_flat_return_codes import Nodes, Row, wrong

SE = Event(EventNumber.SOFTWARE_EVENT, 0, pointer="x")
IH, IP, IS, MNS = DatInvalidHandle, DatInvalidParameter, DatInvalidState, DatModelNotSupported


def _sw_evd(s: Side, qlen: int = 4) -> Evd:
    return s.ia.evd_create(qlen, EvdFlags.DEFAULT | EvdFlags.SOFTWARE)


def _ep(s: Side) -> Ep:
    return s.ia.ep_create(s.pz, s.recv_evd, s.request_evd, s.connect_evd)


def _full(s: Side) -> int:
    evd = _sw_evd(s, 1)
    evd.post_se("one")
    return dat_evd_post_se(evd, SE)


def _resize_below(s: Side) -> int:
    evd = _sw_evd(s)
    evd.post_se(1)
    evd.post_se(2)
    return dat_evd_resize(evd, 1)


def _unwaitable(s: Side) -> int:
    evd = _sw_evd(s)
    evd.set_unwaitable()
    return dat_evd_wait(evd, 1000, 1, Ref(), Ref())


def _cno_in_use(s: Side) -> int:
    cno = s.ia.cno_create()
    s.ia.evd_create(4, cno=cno)
    return dat_cno_free(cno)


def _freed_cno(s: Side) -> Cno:
    cno = s.ia.cno_create()
    cno.free()
    return cno


def _freed_pz(s: Side) -> Pz:
    pz = s.ia.pz_create()
    pz.free()
    return pz


def _psp(s: Side) -> Psp:
    return s.ia.psp_create(next(QUALS), s.connect_evd)


def _freed_rsp(s: Side) -> Rsp:
    rsp = s.ia.rsp_create(next(QUALS), _ep(s), s.connect_evd)
    rsp.free()
    return rsp


def _handoff_nowhere(a: Side, b: Side, nodes: Nodes) -> int:
    qual = next(QUALS)
    b.ia.psp_create(qual, b.connect_evd)
    a_ep = _ep(a)
    a_ep.connect(nodes[1].address, qual, 10_000_000)
    event, _ = b.connect_evd.wait(10_000_000)
    return dat_cr_handoff(event.cr_handle, 1)  # nobody listens on conn_qual 1


def _iov8(s: Side) -> list[int]:
    return s.lmr.triplet(0, 8)


def _dup(a: Side, dup: Any, timeout: int = 1000, qos: int = Qos.BEST_EFFORT) -> int:
    return dat_ep_dup_connect(_ep(a), dup, timeout, 0, None, qos)


ROWS = [
    Row("dat_evd_post_se: not an EVD", lambda a, b, n: dat_evd_post_se(wrong(a.pz), SE), IH,
        Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_post_se: no SOFTWARE flag", lambda a, b, n: dat_evd_post_se(a.recv_evd, SE), IP,
        Sub.INVALID_ARG1),
    Row("dat_evd_post_se: not a software event",
        lambda a, b, n: dat_evd_post_se(_sw_evd(a), Event(EventNumber.DTO_COMPLETION_EVENT, 0)),
        IP, Sub.INVALID_ARG2),
    Row("dat_evd_post_se: full", lambda a, b, n: _full(a), DatQueueFull, Sub.NO_SUBTYPE),
    Row("dat_evd_query: not an EVD", lambda a, b, n: dat_evd_query(wrong(a.pz), 0, Ref()), IH,
        Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_query: NULL param", lambda a, b, n: dat_evd_query(a.recv_evd, 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_evd_enable: not an EVD", lambda a, b, n: dat_evd_enable(wrong(a.pz)), IH,
        Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_disable: not an EVD", lambda a, b, n: dat_evd_disable(wrong(a.pz)), IH,
        Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_set_unwaitable: not an EVD", lambda a, b, n: dat_evd_set_unwaitable(wrong(a.pz)),
        IH, Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_clear_unwaitable: not an EVD",
        lambda a, b, n: dat_evd_clear_unwaitable(wrong(a.pz)), IH, Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_wait: unwaitable", lambda a, b, n: _unwaitable(a), IS,
        Sub.INVALID_STATE_EVD_UNWAITABLE),
    Row("dat_evd_modify_cno: not an EVD",
        lambda a, b, n: dat_evd_modify_cno(wrong(a.pz), None), IH, Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_modify_cno: not a CNO",
        lambda a, b, n: dat_evd_modify_cno(a.recv_evd, wrong(a.pz)), IH, Sub.INVALID_HANDLE_CNO),
    Row("dat_evd_modify_cno: a freed CNO",
        lambda a, b, n: dat_evd_modify_cno(a.recv_evd, _freed_cno(a)), IH, Sub.INVALID_HANDLE_CNO),
    Row("dat_evd_resize: not an EVD", lambda a, b, n: dat_evd_resize(wrong(a.pz), 8), IH,
        Sub.INVALID_HANDLE_EVD_REQUEST),
    Row("dat_evd_resize: qlen 0", lambda a, b, n: dat_evd_resize(a.recv_evd, 0), IP,
        Sub.INVALID_ARG2),
    Row("dat_evd_resize: more events queued", lambda a, b, n: _resize_below(a), IS,
        Sub.NO_SUBTYPE),
    Row("dat_cno_create: not an IA", lambda a, b, n: dat_cno_create(wrong(a.pz), None, Ref()), IH,
        Sub.INVALID_HANDLE_IA),
    Row("dat_cno_modify_agent: not a CNO",
        lambda a, b, n: dat_cno_modify_agent(wrong(a.pz), None), IH, Sub.INVALID_HANDLE_CNO),
    Row("dat_cno_query: not a CNO", lambda a, b, n: dat_cno_query(wrong(a.pz), 0, Ref()), IH,
        Sub.INVALID_HANDLE_CNO),
    Row("dat_cno_query: NULL param",
        lambda a, b, n: dat_cno_query(a.ia.cno_create(), 0, None), IP, Sub.INVALID_ARG3),
    Row("dat_cno_wait: not a CNO", lambda a, b, n: dat_cno_wait(wrong(a.pz), 1000, Ref()), IH,
        Sub.INVALID_HANDLE_CNO),
    Row("dat_cno_wait: timeout", lambda a, b, n: dat_cno_wait(a.ia.cno_create(), 1000, Ref()),
        DatTimeoutExpired, Sub.NO_SUBTYPE),
    Row("dat_cno_free: freed", lambda a, b, n: dat_cno_free(_freed_cno(a)), IH,
        Sub.INVALID_HANDLE_CNO),
    Row("dat_cno_free: an EVD attached", lambda a, b, n: _cno_in_use(a), IS,
        Sub.INVALID_STATE_CNO_IN_USE),
    Row("dat_cno_fd_create: declined", lambda a, b, n: dat_cno_fd_create(a.ia, Ref(), Ref()), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_cno_trigger: declined",
        lambda a, b, n: dat_cno_trigger(a.ia.cno_create(), Ref()), MNS, Sub.NO_SUBTYPE),
    Row("dat_pz_query: freed", lambda a, b, n: dat_pz_query(_freed_pz(a), 0, Ref()), IH,
        Sub.INVALID_HANDLE_PZ),
    Row("dat_pz_query: NULL param", lambda a, b, n: dat_pz_query(a.pz, 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_rmr_create_for_ep: not a PZ",
        lambda a, b, n: dat_rmr_create_for_ep(wrong(a.ep), Ref()), IH, Sub.INVALID_HANDLE_PZ),
    Row("dat_psp_create_any: not an IA",
        lambda a, b, n: dat_psp_create_any(wrong(a.pz), Ref(), a.connect_evd, 0, Ref()), IH,
        Sub.INVALID_HANDLE_IA),
    Row("dat_psp_create_any: not an EVD",
        lambda a, b, n: dat_psp_create_any(a.ia, Ref(), wrong(a.pz), 0, Ref()), IH,
        Sub.INVALID_HANDLE_EVD_CR),
    Row("dat_psp_query: not a PSP", lambda a, b, n: dat_psp_query(wrong(a.pz), 0, Ref()), IH,
        Sub.INVALID_HANDLE_PSP),
    Row("dat_psp_query: NULL param", lambda a, b, n: dat_psp_query(_psp(a), 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_rsp_query: freed", lambda a, b, n: dat_rsp_query(_freed_rsp(a), 0, Ref()), IH,
        Sub.INVALID_HANDLE_RSP),
    Row("dat_cr_handoff: not a CR", lambda a, b, n: dat_cr_handoff(wrong(a.pz), 1), IH,
        Sub.INVALID_HANDLE_CR),
    Row("dat_cr_handoff: unknown CR", lambda a, b, n: dat_cr_handoff(Cr(b.ia, 424_242), 1), IH,
        Sub.INVALID_HANDLE_CR),
    Row("dat_cr_handoff: nobody listens", _handoff_nowhere, IP, Sub.INVALID_ARG2),
    Row("dat_ep_modify: not an EP", lambda a, b, n: dat_ep_modify(wrong(a.pz), 0x80, {}), IH,
        Sub.INVALID_HANDLE_EP),
    Row("dat_ep_modify: an unmodifiable field",
        lambda a, b, n: dat_ep_modify(_ep(a), EpParamMask.EP_STATE, {}), IP, Sub.INVALID_ARG2),
    Row("dat_ep_modify: connected",
        lambda a, b, n: dat_ep_modify(a.ep, EpParamMask.EP_ATTR_ALL, {"ep_attr": EpAttr()}), IS,
        Sub.INVALID_STATE_EP_CONNECTED),
    Row("dat_ep_dup_connect: not an EP", lambda a, b, n: _dup(a, wrong(a.pz)), IH,
        Sub.INVALID_HANDLE_EP),
    Row("dat_ep_dup_connect: dup_ep not connected", lambda a, b, n: _dup(a, _ep(a)), IS,
        Sub.INVALID_STATE_EP_UNCONNECTED),
    Row("dat_ep_dup_connect: timeout 0", lambda a, b, n: _dup(a, a.ep, timeout=0), IP,
        Sub.INVALID_ARG3),
    Row("dat_ep_dup_connect: qos", lambda a, b, n: _dup(a, a.ep, qos=Qos.PREMIUM), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_ep_dup_connect: dup_ep accepted its connection", lambda a, b, n: _dup(b, b.ep), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_ep_common_connect: declined",
        lambda a, b, n: dat_ep_common_connect(_ep(a), n[1].address, 1000, 0, None), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_ep_recv_query: not an EP",
        lambda a, b, n: dat_ep_recv_query(wrong(a.pz), Ref(), Ref()), IH, Sub.INVALID_HANDLE_EP),
    Row("dat_ep_set_watermark: not an EP",
        lambda a, b, n: dat_ep_set_watermark(wrong(a.pz), -1, -1), IH, Sub.INVALID_HANDLE_EP),
    Row("dat_ep_set_watermark: soft below INFINITE",
        lambda a, b, n: dat_ep_set_watermark(a.ep, -2, -1), IP, Sub.INVALID_ARG2),
    Row("dat_ep_set_watermark: hard below INFINITE",
        lambda a, b, n: dat_ep_set_watermark(a.ep, -1, -9), IP, Sub.INVALID_ARG3),
    Row("dat_ep_post_send_with_invalidate: declined",
        lambda a, b, n: dat_ep_post_send_with_invalidate(a.ep, 0, [], 0, 0, True, 0), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_ep_post_rdma_read_to_rmr: declined",
        lambda a, b, n: dat_ep_post_rdma_read_to_rmr(a.ep, [0, 0, 0], 0, [0, 0, 0], 0), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_csp_create: declined",
        lambda a, b, n: dat_csp_create(a.ia, None, n[0].address, a.connect_evd, Ref()), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_csp_query: declined", lambda a, b, n: dat_csp_query(None, 0, Ref()), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_csp_free: declined", lambda a, b, n: dat_csp_free(None), MNS, Sub.NO_SUBTYPE),
    Row("dat_ia_ha_related: declined", lambda a, b, n: dat_ia_ha_related(a.ia, "df", Ref()), MNS,
        Sub.NO_SUBTYPE),
    Row("dat_ia_query: an IA mask with no ia_attr",
        lambda a, b, n: dat_ia_query(a.ia, None, 1, None, 0, None), IP, Sub.INVALID_ARG4),
    Row("dat_ia_query: a provider mask with no provider_attr",
        lambda a, b, n: dat_ia_query(a.ia, None, 0, None, 1, None), IP, Sub.INVALID_ARG6),
    Row("dat_set_consumer_context: not a handle",
        lambda a, b, n: dat_set_consumer_context(object(), 1), IH, Sub.NO_SUBTYPE),
    Row("dat_set_consumer_context: another IA's handle",
        lambda a, b, n: dat_set_consumer_context(Pz(b.ia, a.pz.handle), 1), IH, Sub.NO_SUBTYPE),
    Row("dat_get_consumer_context: freed",
        lambda a, b, n: dat_get_consumer_context(_freed_pz(a), Ref()), IH, Sub.NO_SUBTYPE),
    Row("dat_get_consumer_context: NULL context",
        lambda a, b, n: dat_get_consumer_context(a.ep, None), IP, Sub.INVALID_ARG2),
    Row("dat_ib_post_cmp_and_swap: not an EP",
        lambda a, b, n: dat_ib_post_cmp_and_swap(wrong(a.pz), 1, 2, _iov8(a), 0, _iov8(b), 0),
        IH, Sub.INVALID_HANDLE_EP),
    Row("dat_ib_post_rdma_write_immed: not an EP",
        lambda a, b, n: dat_ib_post_rdma_write_immed(wrong(a.pz), 1, [_iov8(a)], 0, _iov8(b), 7,
                                                     0),
        IH, Sub.INVALID_HANDLE_EP),
    Row("dat_get_handle_type: not a handle", lambda a, b, n: dat_get_handle_type(3, Ref()), IH,
        Sub.NO_SUBTYPE),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "subtype"), [row.param() for row in ROWS])
def test_the_flat_layer_returns_the_exact_code(
    nodes: tuple[Node, Node], call: Any, error: type[DatError], subtype: Sub
) -> None:
    """The call returns exactly DAT_ERROR(type, subtype), as a C consumer would compare it."""
    with connected(*nodes) as (a, b):
        assert_code(call(a, b, nodes), error, subtype)
