"""A NULL (None) out-parameter the call must write is DAT_INVALID_PARAMETER with its argument's
position in every flat call that has one, as libdatfabric answers, and nothing is made: before,
a creator either raised AttributeError out of the flat layer or made an object nobody could
reach (a PSP listening on its conn_qual for good). Optional ones (dat_lmr_create's contexts and
sizes, dat_rmr_bind's rmr_context, dat_ep_get_status's idle flags) may be NULL."""

from __future__ import annotations

from typing import Any

import pytest

from client.api import Psp
from client.dat import (
    Ref,
    dat_cno_create,
    dat_cno_wait,
    dat_cr_query,
    dat_ep_create,
    dat_ep_create_with_srq,
    dat_ep_get_status,
    dat_ep_query,
    dat_evd_create,
    dat_evd_dequeue,
    dat_evd_wait,
    dat_ia_open,
    dat_lmr_create,
    dat_lmr_query,
    dat_psp_create,
    dat_psp_create_any,
    dat_pz_create,
    dat_rmr_bind,
    dat_rmr_create,
    dat_rmr_create_for_ep,
    dat_rmr_query,
    dat_rsp_create,
    dat_srq_create,
    dat_srq_query,
)
from fabricd.launch import Node
from proto.attrs import SrqAttr
from proto.constants import DAT_SUCCESS, EvdFlags, MemPriv, MemType
from proto.errors import DatError, DatInvalidParameter
from tests.conformance.support import QUALS, Side, Sub, assert_code, connected
from tests.conformance.test_flat_return_codes import Row, _ep, _request

IP = DatInvalidParameter


def _srq(s: Side) -> Any:
    return s.ia.srq_create(s.pz, 4)


ROWS = [
    Row("dat_ia_open: NULL async_evd",
        lambda a, b, n: dat_ia_open(str(n[0].socket), 8, None, Ref()), IP, Sub.INVALID_ARG3),
    Row("dat_ia_open: NULL ia",
        lambda a, b, n: dat_ia_open(str(n[0].socket), 8, Ref(), None), IP, Sub.INVALID_ARG4),
    Row("dat_pz_create: NULL pz", lambda a, b, n: dat_pz_create(a.ia, None), IP, Sub.INVALID_ARG2),
    Row("dat_lmr_create: NULL lmr",
        lambda a, b, n: dat_lmr_create(a.ia, MemType.VIRTUAL, a.ia.alloc(64), 64, a.pz,
                                       MemPriv.ALL, 0, None, Ref(), Ref(), Ref(), Ref()),
        IP, Sub.INVALID_ARG8),
    Row("dat_lmr_query: NULL param", lambda a, b, n: dat_lmr_query(a.lmr, 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_rmr_create: NULL rmr", lambda a, b, n: dat_rmr_create(a.pz, None), IP,
        Sub.INVALID_ARG2),
    Row("dat_rmr_create_for_ep: NULL rmr", lambda a, b, n: dat_rmr_create_for_ep(a.pz, None), IP,
        Sub.INVALID_ARG2),
    Row("dat_rmr_query: NULL param",
        lambda a, b, n: dat_rmr_query(a.ia.rmr_create(a.pz), 0, None), IP, Sub.INVALID_ARG3),
    Row("dat_evd_create: NULL evd",
        lambda a, b, n: dat_evd_create(a.ia, 8, None, EvdFlags.DEFAULT, None), IP,
        Sub.INVALID_ARG5),
    Row("dat_evd_dequeue: NULL event", lambda a, b, n: dat_evd_dequeue(a.recv_evd, None), IP,
        Sub.INVALID_ARG2),
    Row("dat_evd_wait: NULL event", lambda a, b, n: dat_evd_wait(a.recv_evd, 0, 1, None, Ref()),
        IP, Sub.INVALID_ARG4),
    Row("dat_evd_wait: NULL nmore", lambda a, b, n: dat_evd_wait(a.recv_evd, 0, 1, Ref(), None),
        IP, Sub.INVALID_ARG5),
    Row("dat_cno_create: NULL cno", lambda a, b, n: dat_cno_create(a.ia, None, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_cno_wait: NULL evd", lambda a, b, n: dat_cno_wait(a.ia.cno_create(), 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_ep_create: NULL ep",
        lambda a, b, n: dat_ep_create(a.ia, a.pz, a.recv_evd, a.request_evd, a.connect_evd, None,
                                      None),
        IP, Sub.INVALID_ARG7),
    Row("dat_ep_query: NULL param", lambda a, b, n: dat_ep_query(a.ep, 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_ep_get_status: NULL ep_state",
        lambda a, b, n: dat_ep_get_status(a.ep, None, Ref(), Ref()), IP, Sub.INVALID_ARG2),
    Row("dat_psp_create: NULL psp",
        lambda a, b, n: dat_psp_create(a.ia, next(QUALS), a.connect_evd, 0, None), IP,
        Sub.INVALID_ARG5),
    Row("dat_psp_create_any: NULL conn_qual",
        lambda a, b, n: dat_psp_create_any(a.ia, None, a.connect_evd, 0, Ref()), IP,
        Sub.INVALID_ARG2),
    Row("dat_psp_create_any: NULL psp",
        lambda a, b, n: dat_psp_create_any(a.ia, Ref(), a.connect_evd, 0, None), IP,
        Sub.INVALID_ARG5),
    Row("dat_rsp_create: NULL rsp",
        lambda a, b, n: dat_rsp_create(a.ia, next(QUALS), _ep(a), a.connect_evd, None), IP,
        Sub.INVALID_ARG5),
    Row("dat_cr_query: NULL param", lambda a, b, n: dat_cr_query(_request(a, b, n), 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_srq_create: NULL srq",
        lambda a, b, n: dat_srq_create(a.ia, a.pz, SrqAttr(4), None), IP, Sub.INVALID_ARG4),
    Row("dat_srq_query: NULL param", lambda a, b, n: dat_srq_query(_srq(a), 0, None), IP,
        Sub.INVALID_ARG3),
    Row("dat_ep_create_with_srq: NULL ep",
        lambda a, b, n: dat_ep_create_with_srq(a.ia, a.pz, a.recv_evd, a.request_evd,
                                               a.connect_evd, _srq(a), None, None),
        IP, Sub.INVALID_ARG8),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "subtype"), [row.param() for row in ROWS])
def test_a_null_out_parameter_is_the_exact_code(
    nodes: tuple[Node, Node], call: Any, error: type[DatError], subtype: Sub
) -> None:
    with connected(*nodes) as (a, b):
        assert_code(call(a, b, nodes), error, subtype)


def test_a_creator_given_a_null_out_parameter_makes_nothing(nodes: tuple[Node, Node]) -> None:
    """The conn_qual a refused dat_psp_create named is free, the EP a refused dat_rsp_create
    named takes an RSP."""
    with connected(*nodes) as (a, _b):
        qual = next(QUALS)
        assert dat_psp_create(a.ia, qual, a.connect_evd, 0, None) != DAT_SUCCESS
        psp: Ref[Psp] = Ref()
        assert dat_psp_create(a.ia, qual, a.connect_evd, 0, psp) == DAT_SUCCESS
        assert psp.value is not None
        psp.value.free()
        ep, qual = _ep(a), next(QUALS)
        assert dat_rsp_create(a.ia, qual, ep, a.connect_evd, None) != DAT_SUCCESS
        assert dat_rsp_create(a.ia, qual, ep, a.connect_evd, Ref()) == DAT_SUCCESS


def test_optional_out_parameters_may_be_null(nodes: tuple[Node, Node]) -> None:
    with connected(*nodes) as (a, _b):
        lmr: Ref[Any] = Ref()
        made = dat_lmr_create(a.ia, MemType.VIRTUAL, a.ia.alloc(64), 64, a.pz, MemPriv.ALL, 0,
                              lmr, None, None, None, None)  # fmt: skip
        assert made == DAT_SUCCESS and lmr.value is not None
        assert dat_ep_get_status(a.ep, Ref(), None, None) == DAT_SUCCESS
        rmr = a.ia.rmr_create(a.pz)
        bound = dat_rmr_bind(rmr, a.lmr, a.lmr.triplet(0, 64), MemPriv.ALL, 0, a.ep, 1, 0, None)
        assert bound == DAT_SUCCESS
