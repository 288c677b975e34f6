"""The three Python APIs offer the same DAT calls: one table names each call's spelling in the
blocking API (client.api and the objects it hands out), the asyncio API (client.aio) and the
flat layer (client.dat, which spells every call as DAT does). The test fails when a spelling is
missing and when an API grows a public call the table does not name."""

from __future__ import annotations

import inspect

import pytest

import client.aio as aio
import client.api as api
import client.dat as flat
from client.common import DECLINED

# DAT call: (blocking, asyncio); the flat layer spells it as the key. A call the provider
# declines (client.common.DECLINED) is spelled in every API too: it answers
# DAT_MODEL_NOT_SUPPORTED there.
CALLS: dict[str, tuple[str, str]] = {
    "dat_ia_open": ("Ia.__init__", "AsyncIa.open"),
    "dat_ia_query": ("Ia.query", "AsyncIa.query"),
    "dat_ia_close": ("Ia.close", "AsyncIa.close"),
    "dat_ia_ha_related": ("Ia.ha_related", "AsyncIa.ha_related"),
    "dat_set_consumer_context": (
        "Ia.set_consumer_context", "AsyncIa.set_consumer_context"
    ),
    "dat_get_consumer_context": (
        "Ia.get_consumer_context", "AsyncIa.get_consumer_context"
    ),
    "dat_get_handle_type": ("Ia.get_handle_type", "AsyncIa.get_handle_type"),
    "dat_pz_create": ("Ia.pz_create", "AsyncIa.pz_create"),
    "dat_pz_query": ("Pz.query", "AsyncIa.pz_query"),
    "dat_pz_free": ("Pz.free", "AsyncIa.pz_free"),
    "dat_evd_create": ("Ia.evd_create", "AsyncIa.evd_create"),
    "dat_evd_query": ("Evd.query", "AsyncEvd.query"),
    "dat_evd_modify_cno": ("Evd.modify_cno", "AsyncEvd.modify_cno"),
    "dat_evd_enable": ("Evd.enable", "AsyncEvd.enable"),
    "dat_evd_disable": ("Evd.disable", "AsyncEvd.disable"),
    "dat_evd_set_unwaitable": (
        "Evd.set_unwaitable", "AsyncEvd.set_unwaitable"
    ),
    "dat_evd_clear_unwaitable": (
        "Evd.clear_unwaitable", "AsyncEvd.clear_unwaitable"
    ),
    "dat_evd_resize": ("Evd.resize", "AsyncEvd.resize"),
    "dat_evd_dequeue": ("Evd.dequeue", "AsyncEvd.dequeue"),
    "dat_evd_wait": ("Evd.wait", "AsyncEvd.wait"),
    "dat_evd_post_se": ("Evd.post_se", "AsyncEvd.post_se"),
    "dat_evd_free": ("Evd.free", "AsyncEvd.free"),
    "dat_cno_create": ("Ia.cno_create", "AsyncIa.cno_create"),
    "dat_cno_query": ("Cno.query", "AsyncCno.query"),
    "dat_cno_modify_agent": ("Cno.modify_agent", "AsyncCno.modify_agent"),
    "dat_cno_wait": ("Cno.wait", "AsyncCno.wait"),
    "dat_cno_free": ("Cno.free", "AsyncCno.free"),
    "dat_cno_fd_create": ("Ia.cno_fd_create", "AsyncIa.cno_fd_create"),
    "dat_cno_trigger": ("Cno.trigger", "AsyncCno.trigger"),
    "dat_lmr_create": ("Ia.lmr_create", "AsyncIa.lmr_create"),
    "dat_lmr_query": ("Lmr.query", "AsyncIa.lmr_query"),
    "dat_lmr_free": ("Lmr.free", "AsyncIa.lmr_free"),
    "dat_lmr_sync_rdma_read": (
        "Ia.lmr_sync_rdma_read", "AsyncIa.lmr_sync_rdma_read"
    ),
    "dat_lmr_sync_rdma_write": (
        "Ia.lmr_sync_rdma_write", "AsyncIa.lmr_sync_rdma_write"
    ),
    "dat_rmr_create": ("Ia.rmr_create", "AsyncIa.rmr_create"),
    "dat_rmr_create_for_ep": (
        "Ia.rmr_create_for_ep", "AsyncIa.rmr_create_for_ep"
    ),
    "dat_rmr_bind": ("Rmr.bind", "AsyncRmr.bind"),
    "dat_rmr_query": ("Rmr.query", "AsyncRmr.query"),
    "dat_rmr_free": ("Rmr.free", "AsyncRmr.free"),
    "dat_ep_create": ("Ia.ep_create", "AsyncIa.ep_create"),
    "dat_ep_query": ("Ep.query", "AsyncEp.query"),
    "dat_ep_get_status": ("Ep.get_status", "AsyncEp.get_status"),
    "dat_ep_modify": ("Ep.modify", "AsyncEp.modify"),
    "dat_ep_connect": ("Ep.connect", "AsyncEp.connect"),
    "dat_ep_dup_connect": ("Ep.dup_connect", "AsyncEp.dup_connect"),
    "dat_ep_common_connect": (
        "Ep.common_connect", "AsyncEp.common_connect"
    ),
    "dat_ep_disconnect": ("Ep.disconnect", "AsyncEp.disconnect"),
    "dat_ep_reset": ("Ep.reset", "AsyncEp.reset"),
    "dat_ep_free": ("Ep.free", "AsyncEp.free"),
    "dat_ep_recv_query": ("Ep.recv_query", "AsyncEp.recv_query"),
    "dat_ep_set_watermark": ("Ep.set_watermark", "AsyncEp.set_watermark"),
    "dat_ep_post_send": ("Ep.post_send", "AsyncEp.post"),
    "dat_ep_post_recv": ("Ep.post_recv", "AsyncEp.post"),
    "dat_ep_post_rdma_write": ("Ep.post_rdma_write", "AsyncEp.post"),
    "dat_ep_post_rdma_read": ("Ep.post_rdma_read", "AsyncEp.post"),
    "dat_ep_post_send_with_invalidate": (
        "Ep.post_send_with_invalidate", "AsyncEp.post_send_with_invalidate"
    ),
    "dat_ep_post_rdma_read_to_rmr": (
        "Ep.post_rdma_read_to_rmr", "AsyncEp.post_rdma_read_to_rmr"
    ),
    "dat_ib_post_fetch_and_add": (
        "Ep.post_fetch_and_add", "AsyncEp.post"
    ),
    "dat_ib_post_cmp_and_swap": (
        "Ep.post_cmp_and_swap", "AsyncEp.post"
    ),
    "dat_ib_post_rdma_write_immed": (
        "Ep.post_rdma_write_immed", "AsyncEp.post"
    ),
    "dat_ep_create_with_srq": (
        "Ia.ep_create_with_srq", "AsyncIa.ep_create_with_srq"
    ),
    "dat_srq_create": ("Ia.srq_create", "AsyncIa.srq_create"),
    "dat_srq_free": ("Srq.free", "AsyncSrq.free"),
    "dat_srq_post_recv": ("Srq.post_recv", "AsyncSrq.post_recv"),
    "dat_srq_query": ("Srq.query", "AsyncSrq.query"),
    "dat_srq_resize": ("Srq.resize", "AsyncSrq.resize"),
    "dat_srq_set_lw": ("Srq.set_lw", "AsyncSrq.set_lw"),
    "dat_psp_create": ("Ia.psp_create", "AsyncIa.psp_create"),
    "dat_psp_create_any": ("Ia.psp_create_any", "AsyncIa.psp_create_any"),
    "dat_psp_query": ("Psp.query", "AsyncIa.psp_query"),
    "dat_psp_free": ("Psp.free", "AsyncIa.psp_free"),
    "dat_rsp_create": ("Ia.rsp_create", "AsyncIa.rsp_create"),
    "dat_rsp_query": ("Rsp.query", "AsyncIa.rsp_query"),
    "dat_rsp_free": ("Rsp.free", "AsyncIa.rsp_free"),
    "dat_csp_create": ("Ia.csp_create", "AsyncIa.csp_create"),
    "dat_csp_query": ("Ia.csp_query", "AsyncIa.csp_query"),
    "dat_csp_free": ("Ia.csp_free", "AsyncIa.csp_free"),
    "dat_cr_query": ("Cr.query", "AsyncIa.cr_query"),
    "dat_cr_accept": ("Cr.accept", "AsyncIa.cr_accept"),
    "dat_cr_reject": ("Cr.reject", "AsyncIa.cr_reject"),
    "dat_cr_handoff": ("Cr.handoff", "AsyncIa.cr_handoff"),
}  # fmt: skip

# Public names that are no DAT call: memory from the arena, plumbing, handles' conveniences.
HELPERS = {
    "Ia.alloc", "Ia.alloc_shared", "Ia.mem_free", "Ia.run", "Ia.kick", "Ia.cr",
    "AsyncIa.alloc", "AsyncIa.alloc_shared", "AsyncIa.mem_free", "AsyncIa.run",
    "AsyncIa.kick", "AsyncIa.send",
    "Lmr.triplet", "Lmr.remote", "Rmr.remote", "AsyncRmr.remote",
}  # fmt: skip
FLAT_EXTRAS = {"dat_strerror", "Ref"}

BLOCKING = ("Ia", "Pz", "Evd", "Cno", "Lmr", "Ep", "Rmr", "Psp", "Rsp", "Cr", "Srq")
ASYNCIO = ("AsyncIa", "AsyncEvd", "AsyncCno", "AsyncEp", "AsyncRmr", "AsyncSrq")


def _find(spelling: str, *modules: object) -> object | None:
    cls, _, name = spelling.partition(".")
    for module in modules:
        owner = getattr(module, cls, None)
        if owner is not None:
            return getattr(owner, name, None)
    return None


def _public(cls: type) -> set[str]:
    return {
        f"{cls.__name__}.{name}"
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or inspect.ismethod(member))
    }


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_api_spells_every_call(call: str) -> None:
    blocking, asyncio_ = CALLS[call]
    assert _find(blocking, api) is not None, blocking
    assert _find(asyncio_, aio) is not None, asyncio_
    assert callable(getattr(flat, call, None)), call


def test_no_api_offers_a_call_the_table_does_not_name() -> None:
    named = {b for b, _ in CALLS.values()} | {a for _, a in CALLS.values()} | HELPERS
    blocking = set().union(*(_public(getattr(api, c)) for c in BLOCKING))
    asyncio_ = set().union(*(_public(getattr(aio, c)) for c in ASYNCIO))
    assert {"Ep.post_send", "Pz.free", "AsyncIa.pz_free", "AsyncEp.modify"} <= blocking | asyncio_
    assert sorted(blocking - named) == [] and sorted(asyncio_ - named) == []
    flat_names = set(CALLS) | FLAT_EXTRAS
    assert sorted(set(flat.__all__) - flat_names) == []


def test_the_declined_calls_are_calls_of_the_table() -> None:
    """client.common.DECLINED names DAT calls every API spells (each answers
    DAT_MODEL_NOT_SUPPORTED: tests/conformance/test_declined.py calls every one of them)."""
    assert DECLINED and set(DECLINED) <= set(CALLS)
