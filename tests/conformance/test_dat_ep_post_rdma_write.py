"""Conformance: dat_ep_post_rdma_write, against real fabricd daemons.

No page of ../shared/spec covers RDMA Write: DAT_REFERENCE.md section 1d says it has the checks
of dat_ep_post_rdma_read (spec/003) with the roles of the buffers swapped: the local_iov is
gathered in I/O Vector order, the local LMRs need local read privilege, the rmr_context remote
write privilege, and DAT_LENGTH_ERROR means the remote buffer is smaller than the local data
(the DAT 1.2 dat_ep_post_rdma_write page words each of these the same way). Each test names the
sentence it shows ("D": DESCRIPTION, "R": RETURN VALUES, "U": USAGE).

Two fabricd processes serve the whole module; every test opens its own IAs and connection.
Where an operation must stay outstanding the target daemon is SIGSTOPped, and a round trip to
the initiator's daemon (dat_ia_query) proves it has handled the posts: nothing depends on timing.

A refused post is checked by its full DAT_RETURN (``support.refused`` / ``assert_code``), not
just its type: DAT_INVALID_ARGn names the bad argument of dat_ep_post_rdma_write(ep_handle,
num_segments, local_iov, user_cookie, remote_iov, completion_flags), DAT_INVALID_STATE the EP's
state; the page gives DAT_PRIVILEGES_VIOLATION, DAT_PROTECTION_VIOLATION and DAT_LENGTH_ERROR no
subtype, and datfabric returns DAT_NO_SUBTYPE with them. The exact bounds of a remote window
are in test_rdma_window_bounds.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from client.api import Ep, Ia
from client.dat import dat_ep_post_rdma_write
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import (
    OPTIMAL_ALIGNMENT,
    CloseFlags,
    CompletionFlags,
    Dtos,
    EpState,
    IovOwnership,
    MemPriv,
    MemType,
)
from proto.constants import DtoCompletionStatus as St
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
    DatPrivilegesViolation,
    DatProtectionViolation,
)
from tests.conformance.support import (
    DEADLINE_S,
    EP_STATE_SUBTYPE,
    QUALS,
    WAIT_US,
    E,
    Side,
    Sub,
    _connect,
    _ends,
    _side,
    assert_code,
    completion,
    connected,
    forge,
    nothing_queued,
    pattern,
    paused,
    refused,
)
from tests.integration.flows import wait_event

# -- fixtures and helpers ------------------------------------------------------------------------


# -- DESCRIPTION -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["tcp", "local"])
def test_d1_transfers_all_the_data_of_the_local_iov_into_the_remote_buffer(
    nodes: tuple[Node, Node], path: str
) -> None:
    """D: the RDMA Write "requests the transfer of all the data specified by the local_iov over
    the connection of the ep_handle Endpoint into the remote_buffer"; the target consumer makes
    no call at all (one-sided)."""
    size = 1 << 18
    with connected(*_ends(nodes, path), size=size) as (a, b):
        data = pattern(size - 100)
        a.view[: size - 100] = data
        a.ep.post_rdma_write([a.lmr.triplet(0, size - 100)], 5, b.lmr.remote(100, size - 100))
        done = completion(a.request_evd)
        assert (done.status, done.operation, done.cookie) == (
            St.DTO_SUCCESS,
            Dtos.RDMA_WRITE,
            5,
        )
        assert done.transfered_length == size - 100
        assert bytes(b.view[100:]) == data
        nothing_queued(b.request_evd, b.recv_evd, b.connect_evd)


@pytest.mark.parametrize("path", ["tcp", "local"])
def test_d2_segments_are_gathered_in_iov_order(nodes: tuple[Node, Node], path: str) -> None:
    """D: "The local_iov segments are traversed in the I/O Vector order until all the data is
    transferred" (DAT_REFERENCE 1d: "Writes local_iov to one remote RMR triplet"). Segments
    come from two LMRs, not in address order, with a zero-length segment (its other fields are
    irrelevant); the remote bytes after the written ones stay as they were."""
    with connected(*_ends(nodes, path), attr_a=EpAttr(max_rdma_write_iov=8)) as (a, b):
        other_buf = a.ia.alloc(4096)
        other = a.ia.lmr_create(MemType.VIRTUAL, other_buf, 4096, a.pz, MemPriv.ALL)
        data = pattern(230)
        a.view[3000:3100] = data[:100]
        other_buf.view[10:60] = data[100:150]
        a.view[200:280] = data[150:230]
        iov = [
            a.lmr.triplet(3000, 100),
            [0xDEAD, 0, 0xBAD],
            other.triplet(10, 50),
            a.lmr.triplet(200, 80),
        ]
        b.view[:] = b"\xee" * 4096
        a.ep.post_rdma_write(iov, 9, b.lmr.remote(500, 1000))
        done = completion(a.request_evd)
        assert (done.status, done.transfered_length) == (St.DTO_SUCCESS, 230)
        assert bytes(b.view[500:730]) == data
        assert bytes(b.view[:500]) == b"\xee" * 500
        assert bytes(b.view[730:]) == b"\xee" * (4096 - 730), "bytes past the data were written"


def test_d2_num_segments_is_the_number_of_lmr_triplets_used(nodes: tuple[Node, Node]) -> None:
    """D: "The num_segments parameter specifies the number of segments in the local_iov" (flat
    layer, C order): only the first num_segments triplets are sent; more than exist is
    DAT_INVALID_PARAMETER."""
    with connected(*nodes) as (a, b):
        a.view[:32] = pattern(32)
        a.view[100:164] = pattern(64, 2)
        a.view[1000:1064] = b"x" * 64
        b.view[:] = bytes(4096)
        iov = [a.lmr.triplet(0, 32), a.lmr.triplet(100, 64), a.lmr.triplet(1000, 64)]
        assert dat_ep_post_rdma_write(a.ep, 2, iov, 1, b.lmr.remote(0, 256), 0) == 0
        assert completion(a.request_evd).transfered_length == 96
        assert bytes(b.view[:96]) == pattern(32) + pattern(64, 2)
        assert bytes(b.view[96:]) == bytes(4000), "a triplet past num_segments was sent"
        ret = dat_ep_post_rdma_write(a.ep, 4, iov, 2, b.lmr.remote(0, 256), 0)
        assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG2)


def test_d2_an_empty_local_iov_writes_nothing_and_completes(nodes: tuple[Node, Node]) -> None:
    """D: "all the data specified by the local_iov" may be none (DAT_REFERENCE 1d: nseg 0 is
    allowed as for a send): the write completes with length 0 and the target is unchanged."""
    with connected(*nodes) as (a, b):
        b.view[:64] = b"u" * 64
        a.ep.post_rdma_write([], 3, b.lmr.remote(0, 64))
        done = completion(a.request_evd)
        assert (done.cookie, done.status, done.transfered_length) == (3, St.DTO_SUCCESS, 0)
        assert bytes(b.view[:64]) == b"u" * 64


def test_d3_the_user_cookie_is_returned_in_the_completion_event(nodes: tuple[Node, Node]) -> None:
    """D: "The user_cookie is returned to the Consumer in the Completion event for the posted RDMA
    Write"; "There is no requirement on the Consumer that the value user_cookie should be unique
    for each DTO" (0, the largest u64, a repeated value)."""
    cookies = [0, (1 << 64) - 1, 0x0FED_CBA9_8765_4321, 11, 11]
    with connected(*nodes) as (a, b):
        for i, cookie in enumerate(cookies):
            a.ep.post_rdma_write([a.lmr.triplet(64 * i, 64)], cookie, b.lmr.remote(64 * i, 64))
        got = [completion(a.request_evd) for _ in cookies]
        assert [e.cookie for e in got] == cookies
        assert all(e.status == St.DTO_SUCCESS and e.ep == a.ep.handle for e in got)


def test_d3_a_cookie_that_is_not_a_u64_is_an_invalid_parameter(nodes: tuple[Node, Node]) -> None:
    """D: user_cookie is a DAT_DTO_COOKIE (64 bits): anything else is DAT_INVALID_PARAMETER."""
    with connected(*nodes) as (a, b):
        for cookie in (-1, 1 << 64):
            with refused(DatInvalidParameter, Sub.INVALID_ARG4):
                a.ep.post_rdma_write([a.lmr.triplet(0, 8)], cookie, b.lmr.remote(0, 8))


def test_d4_the_provider_copies_the_local_iov_at_post(nodes: tuple[Node, Node]) -> None:
    """D: "Providers that allow Consumers to get ownership of the local_iov but not the memory
    it specifies back after the dat_ep_post_rdma_write() returns ... allows Consumers full
    control of the local_iov": the list changes right after the post, the write still sends
    what it named at post time."""
    with connected(*nodes) as (a, b):
        a.view[:64] = pattern(64)
        a.view[2048:2112] = b"n" * 64
        iov = [a.lmr.triplet(0, 64)]
        a.ep.post_rdma_write(iov, 1, b.lmr.remote(0, 64))
        iov[0] = a.lmr.triplet(2048, 64)
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(b.view[:64]) == pattern(64)


def test_d4_the_local_iov_ownership_is_specified_in_provider_attributes(
    nodes: tuple[Node, Node],
) -> None:
    """D: such Providers "should document this behavior and also specify its support in Provider
    attributes" (DAT_IOV_OWNERSHIP: CONSUMER)."""
    with Ia(nodes[0].socket) as ia:
        assert ia.query().get("iov_ownership_on_return") == IovOwnership.CONSUMER


def test_d5_completion_is_a_dto_event_on_the_request_evd(nodes: tuple[Node, Node]) -> None:
    """D: "The completion of the posted RDMA Write is reported to the Consumer asynchronously
    through a DTO Completion event" on the request EVD; nothing on the recv or connect EVDs, and
    nothing at the target."""
    with connected(*nodes) as (a, b):
        a.ep.post_rdma_write([a.lmr.triplet(0, 128)], 3, b.lmr.remote(0, 128))
        done = completion(a.request_evd)
        assert (done.evd, done.ep, done.operation) == (
            a.request_evd.handle,
            a.ep.handle,
            Dtos.RDMA_WRITE,
        )
        nothing_queued(a.recv_evd, a.connect_evd, a.request_evd)
        nothing_queued(b.request_evd, b.recv_evd, b.connect_evd)


def test_d5_suppress_gives_no_event_for_a_successful_write(nodes: tuple[Node, Node]) -> None:
    """D: completion "based on the specified completion_flags value": SUPPRESS "Suppress
    successful Completion". A later signalled write is the sync point."""
    with connected(*nodes) as (a, b):
        a.view[:64] = pattern(64)
        a.ep.post_rdma_write(
            [a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64), CompletionFlags.SUPPRESS
        )
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 2, b.lmr.remote(64, 8))
        assert completion(a.request_evd).cookie == 2
        nothing_queued(a.request_evd)
        assert bytes(b.view[:64]) == pattern(64), "the suppressed write did not happen"


def test_d5_suppress_still_reports_a_failed_write(nodes: tuple[Node, Node]) -> None:
    """D: SUPPRESS suppresses only a *successful* completion: a refused write is reported."""
    with connected(*nodes) as (a, b):
        address, length, key = b.lmr.remote(0, 64)
        a.ep.post_rdma_write(
            [a.lmr.triplet(0, 64)], 4, [address, length, key ^ 0x77], CompletionFlags.SUPPRESS
        )
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (4, St.DTO_ERR_REMOTE_ACCESS)


def test_d5_suppress_still_reports_a_flushed_write(nodes: tuple[Node, Node]) -> None:
    """D: SUPPRESS hides only a successful completion: a suppressed write posted in
    DAT_EP_STATE_DISCONNECTED is still reported, as flushed."""
    with connected(*nodes) as (a, b):
        a.ep.disconnect(CloseFlags.ABRUPT)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 6, b.lmr.remote(0, 8), CompletionFlags.SUPPRESS)
        flushed = completion(a.request_evd)
        assert (flushed.cookie, flushed.status) == (6, St.DTO_ERR_FLUSHED)


def test_d5_a_suppressed_completion_still_returns_its_request_slot(
    nodes: tuple[Node, Node],
) -> None:
    """D: with SUPPRESS the write still completes and frees its request-queue entry (an EP with
    max_request_dtos 1 can post again), though no event is queued."""
    with connected(*nodes, attr_a=EpAttr(max_request_dtos=1)) as (a, b):
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.SUPPRESS)
        deadline = time.monotonic() + DEADLINE_S
        while not a.ep.get_status()[2]:
            assert time.monotonic() < deadline, "the suppressed write never completed"
            time.sleep(0.005)
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 2, b.lmr.remote(0, 8))
        assert completion(a.request_evd).cookie == 2


def test_d6_unsignalled_without_the_ep_request_flag_is_an_invalid_parameter(
    nodes: tuple[Node, Node],
) -> None:
    """D: "The value of DAT_COMPLETION_UNSIGNALLED_FLAG is only valid if the Endpoint Request
    Completion Flags DAT_COMPLETION_UNSIGNALLED_FLAG. Otherwise, DAT_INVALID_PARAMETER is
    returned." Nothing is written."""
    with connected(*nodes) as (a, b):
        a.view[:8] = b"z" * 8
        b.view[:8] = bytes(8)
        with refused(DatInvalidParameter, Sub.INVALID_ARG6):
            a.ep.post_rdma_write(
                [a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.UNSIGNALLED
            )
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 2, b.lmr.remote(8, 8))
        assert completion(a.request_evd).cookie == 2
        assert bytes(b.view[:8]) == bytes(8), "the refused write was carried out"


def test_d6_unsignalled_is_valid_when_the_ep_request_flags_include_it(
    nodes: tuple[Node, Node],
) -> None:
    """D: UNSIGNALLED "is only valid if the Endpoint Request Completion Flags" include it: such
    an EP accepts it and the write happens."""
    attr = EpAttr(request_completion_flags=CompletionFlags.UNSIGNALLED)
    with connected(*nodes, attr_a=attr) as (a, b):
        a.view[:64] = pattern(64)
        a.ep.post_rdma_write(
            [a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64), CompletionFlags.UNSIGNALLED
        )
        deadline = time.monotonic() + DEADLINE_S
        while bytes(b.view[:64]) != pattern(64):
            assert time.monotonic() < deadline, "the unsignalled write never landed"
            time.sleep(0.005)


def test_d6_an_unsignalled_completion_is_queued_without_notification(
    nodes: tuple[Node, Node],
) -> None:
    """D: DAT_COMPLETION_UNSIGNALLED_FLAG is "Non-notification completion": the event is still
    queued on the request EVD, it only does not wake a waiter (dat_evd_wait: "By default, all
    completions are Notification events"); dropping it is SUPPRESS. The signalled write posted
    after it is the sync point."""
    attr = EpAttr(request_completion_flags=CompletionFlags.UNSIGNALLED)
    with connected(*nodes, attr_a=attr) as (a, b):
        a.ep.post_rdma_write(
            [a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.UNSIGNALLED
        )
        a.ep.post_rdma_write([a.lmr.triplet(8, 8)], 2, b.lmr.remote(8, 8))
        first = completion(a.request_evd)
        assert (first.cookie, first.status) == (1, St.DTO_SUCCESS)
        assert completion(a.request_evd).cookie == 2


def test_d6_a_fenced_write_waits_for_every_earlier_read(nodes: tuple[Node, Node]) -> None:
    """D: BARRIER_FENCE "Request for Barrier Fence": a fenced RDMA Write does not start before
    the RDMA Reads posted earlier have completed (DAT_REFERENCE 2e). It sends the buffer that two
    earlier reads fill; the target daemon is stopped while all three are posted, so a write that
    did not wait would carry the old bytes."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        b.view[:128] = pattern(128)
        b.view[1024:1152] = b"." * 128
        a.view[:128] = b"s" * 128
        with paused(b_node):
            a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            a.ep.post_rdma_read([a.lmr.triplet(64, 64)], 2, b.lmr.remote(64, 64))
            a.ep.post_rdma_write(
                [a.lmr.triplet(0, 128)],
                3,
                b.lmr.remote(1024, 128),
                CompletionFlags.BARRIER_FENCE,
            )
            a.sync()
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in (1, 2, 3)]
        assert bytes(b.view[1024:1152]) == pattern(128), "the fenced write did not wait"


def test_d6_a_fenced_write_with_no_earlier_read_completes_in_order(
    nodes: tuple[Node, Node],
) -> None:
    """D: BARRIER_FENCE only orders against earlier reads: with none outstanding the fenced
    write is carried out like any other, in posting order."""
    with connected(*nodes) as (a, b):
        a.view[:192] = pattern(192)
        a.ep.post_rdma_write([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
        a.ep.post_rdma_write(
            [a.lmr.triplet(64, 64)], 2, b.lmr.remote(64, 64), CompletionFlags.BARRIER_FENCE
        )
        a.ep.post_rdma_write([a.lmr.triplet(128, 64)], 3, b.lmr.remote(128, 64))
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in (1, 2, 3)]
        assert bytes(b.view[:192]) == pattern(192)


def test_d7_a_successful_post_is_carried_out_without_further_calls(
    nodes: tuple[Node, Node],
) -> None:
    """D: "The DAT_SUCCESS return of the dat_ep_post_rdma_write() is at least the equivalent of
    posting an RDMA Write operation directly by native Transport": once the post returns, the
    bytes reach the target with no further DAT call by either consumer."""
    with connected(*nodes) as (a, b):
        a.view[:] = pattern(4096)
        b.view[:] = bytes(4096)
        a.ep.post_rdma_write([a.lmr.triplet(0, 4096)], 1, b.lmr.remote(0, 4096))
        deadline = time.monotonic() + DEADLINE_S
        while bytes(b.view) != pattern(4096):
            assert time.monotonic() < deadline, "the posted write was not carried out"
            time.sleep(0.005)
        assert completion(a.request_evd).status == St.DTO_SUCCESS


def test_d7_posting_is_nonblocking_while_the_target_cannot_answer(
    nodes: tuple[Node, Node],
) -> None:
    """D: "Providers should avoid resource allocation as part of dat_ep_post_rdma_write() to
    ensure that this operation is nonblocking": posts return while the target daemon is
    stopped, and complete once it runs again."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        a.view[:96] = pattern(96)
        with paused(b_node):
            for i in range(3):
                a.ep.post_rdma_write([a.lmr.triplet(32 * i, 32)], i, b.lmr.remote(32 * i, 32))
            a.sync()
            nothing_queued(a.request_evd)
            assert not a.ep.get_status()[2], "the writes are outstanding"
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in range(3)]
        assert bytes(b.view[:96]) == pattern(96)


@pytest.mark.parametrize("how", ["local disconnect", "peer disconnect", "broken"])
def test_d8_valid_in_disconnected_and_flushed_to_the_request_evd(
    nodes: tuple[Node, Node], how: str
) -> None:
    """D: "The operation is valid for the Endpoint in the DAT_EP_STATE_CONNECTED and
    DAT_EP_STATE_DISCONNECTED states. If the operation returns successfully for the Endpoint in
    the DAT_EP_STATE_DISCONNECTED state, the posted RDMA Write is immediately flushed to
    request_evd_handle." Nothing reaches the target."""
    with connected(*nodes) as (a, b):
        if how == "local disconnect":
            a.ep.disconnect(CloseFlags.ABRUPT)
            wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        elif how == "peer disconnect":
            b.ep.disconnect(CloseFlags.ABRUPT)
            wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        else:
            address, length, key = b.lmr.remote(0, 8)
            a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 99, [address, length, key ^ 1])
            assert completion(a.request_evd).status == St.DTO_ERR_REMOTE_ACCESS
            wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert a.ep.state == EpState.DISCONNECTED
        a.view[:64] = pattern(64)
        b.view[:64] = b"k" * 64
        a.ep.post_rdma_write([a.lmr.triplet(0, 64)], 42, b.lmr.remote(0, 64))
        flushed = completion(a.request_evd)
        assert (flushed.cookie, flushed.status, flushed.operation) == (
            42,
            St.DTO_ERR_FLUSHED,
            Dtos.RDMA_WRITE,
        )
        b.sync()
        assert bytes(b.view[:64]) == b"k" * 64
        nothing_queued(a.recv_evd, a.connect_evd)


# -- RETURN VALUES -------------------------------------------------------------------------------


def test_r_insufficient_resources_when_the_request_queue_is_full(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INSUFFICIENT_RESOURCES "The operation failed due to resource limitations":
    max_request_dtos writes are outstanding (target stopped), one more is refused; once they
    complete the EP takes posts again."""
    a_node, b_node = nodes
    with connected(a_node, b_node, attr_a=EpAttr(max_request_dtos=2)) as (a, b):
        with paused(b_node):
            a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8))
            a.ep.post_rdma_write([a.lmr.triplet(8, 8)], 2, b.lmr.remote(8, 8))
            with refused(DatInsufficientResources, Sub.RESOURCE_TEP):
                a.ep.post_rdma_write([a.lmr.triplet(16, 8)], 3, b.lmr.remote(16, 8))
        assert [completion(a.request_evd).cookie for _ in range(2)] == [1, 2]
        a.ep.post_rdma_write([a.lmr.triplet(16, 8)], 3, b.lmr.remote(16, 8))
        assert completion(a.request_evd).cookie == 3
        nothing_queued(a.request_evd)


@pytest.mark.parametrize("where", ["before its start", "past its end", "inside another LMR"])
def test_r_invalid_parameter_for_a_segment_outside_its_lmr(
    nodes: tuple[Node, Node], where: str
) -> None:
    """R: DAT_INVALID_PARAMETER "one of the IOV segments pointed to a memory outside its LMR".
    The LMR covers the middle of a buffer, so the bytes around it are real memory."""
    with connected(*nodes) as (a, b):
        middle = a.ia.lmr_create(MemType.VIRTUAL, a.buf.address + 1024, 1024, a.pz, MemPriv.ALL)
        base, ctx = middle.registered_address, middle.lmr_context
        segment = {
            "before its start": [base - 8, 64, ctx],
            "past its end": [base + 1024 - 32, 64, ctx],
            "inside another LMR": [a.buf.address, 64, ctx],
        }[where]
        with refused(DatInvalidParameter, Sub.INVALID_ARG3):
            a.ep.post_rdma_write([segment], 1, b.lmr.remote(0, 64))
        nothing_queued(a.request_evd)


def test_r_a_segment_outside_its_lmr_is_never_sent_past_the_library(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INVALID_PARAMETER for a segment outside its LMR is the library's answer; a post
    that skips the library (forged frame) is refused by the daemon too: the write fails with a
    local protection error and the bytes outside the LMR never reach the target."""
    with connected(*nodes) as (a, b):
        middle = a.ia.lmr_create(MemType.VIRTUAL, a.buf.address + 1024, 1024, a.pz, MemPriv.ALL)
        a.view[:] = b"\xee" * 4096
        b.view[:64] = bytes(64)
        forge(
            a,
            Dtos.RDMA_WRITE,
            77,
            [[middle.registered_address - 16, 64, middle.lmr_context]],
            b.lmr.remote(0, 64),
        )
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (77, St.DTO_ERR_LOCAL_PROTECTION)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        b.sync()
        assert bytes(b.view[:64]) == bytes(64)


def test_r_invalid_parameter_for_more_segments_than_the_ep_allows(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": more segments than max_rdma_write_iov."""
    with connected(*nodes, attr_a=EpAttr(max_rdma_write_iov=2)) as (a, b):
        iov = [a.lmr.triplet(16 * i, 16) for i in range(3)]
        with refused(DatInvalidParameter, Sub.INVALID_ARG2):
            a.ep.post_rdma_write(iov, 1, b.lmr.remote(0, 48))
        a.ep.post_rdma_write(iov[:2], 2, b.lmr.remote(0, 32))
        assert completion(a.request_evd).cookie == 2


@pytest.mark.parametrize("flags", [0x40, 0x80, 0x100])
def test_r_invalid_parameter_for_undefined_completion_flags(
    nodes: tuple[Node, Node], flags: int
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": completion_flags bits DAT does not define."""
    with connected(*nodes) as (a, b), refused(DatInvalidParameter, Sub.INVALID_ARG6):
        a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), flags)


@pytest.mark.parametrize("handle", ["unknown", "freed", "not an EP"])
def test_r_invalid_handle_for_a_bad_ep_handle(nodes: tuple[Node, Node], handle: str) -> None:
    """R: DAT_INVALID_HANDLE "The ep_handle parameter is invalid"."""
    with connected(*nodes) as (a, b):
        iov, remote = [a.lmr.triplet(0, 8)], b.lmr.remote(0, 8)
        if handle == "not an EP":
            ret = dat_ep_post_rdma_write(a.lmr, 1, iov, 1, remote, 0)  # type: ignore[arg-type]
            assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_EP)
            return
        ep = Ep(a.ia, 987_654)
        if handle == "freed":
            spare = a.ia.ep_create(a.pz, a.recv_evd, a.request_evd, a.connect_evd)
            spare.free()
            ep = spare
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
            ep.post_rdma_write(iov, 1, remote)


@contextmanager
def _ep_in(nodes: tuple[Node, Node], state: EpState) -> Iterator[tuple[Side, list[int]]]:
    """An EP in ``state`` with a usable LMR, and a valid remote triplet to write to."""
    a_node, b_node = nodes
    with ExitStack() as stack:
        a, b = _side(stack, a_node), _side(stack, b_node)
        qual = next(QUALS)
        if state == EpState.UNCONNECTED:
            yield a, b.lmr.remote(0, 8)
        elif state in (EpState.RESERVED, EpState.PASSIVE_CONNECTION_PENDING):
            b.ia.rsp_create(qual, b.ep, b.connect_evd)
            if state == EpState.PASSIVE_CONNECTION_PENDING:
                a.ep.connect(b_node.address, qual, WAIT_US)
                wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT)
            yield b, a.lmr.remote(0, 8)
        elif state in (EpState.ACTIVE_CONNECTION_PENDING, EpState.COMPLETION_PENDING):
            b.ia.psp_create(qual, b.connect_evd)
            a.ep.connect(b_node.address, qual, WAIT_US)
            request = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT)
            if state == EpState.ACTIVE_CONNECTION_PENDING:
                yield a, b.lmr.remote(0, 8)
            else:
                with paused(a_node):  # the active side cannot send its RTU
                    b.ia.cr(request).accept(b.ep)
                    yield b, a.lmr.remote(0, 8)
        else:  # DISCONNECT_PENDING: a graceful disconnect waits for an outstanding write
            _connect(a, b, b_node)
            with paused(b_node):
                a.ep.post_rdma_write([a.lmr.triplet(0, 8)], 0, b.lmr.remote(0, 8))
                a.ep.disconnect(CloseFlags.GRACEFUL)
                yield a, b.lmr.remote(0, 8)


@pytest.mark.parametrize(
    "state",
    [
        EpState.UNCONNECTED,
        EpState.RESERVED,
        EpState.ACTIVE_CONNECTION_PENDING,
        EpState.PASSIVE_CONNECTION_PENDING,
        EpState.COMPLETION_PENDING,
        EpState.DISCONNECT_PENDING,
    ],
    ids=lambda s: s.name,
)
def test_r_invalid_state_outside_connected_and_disconnected(
    nodes: tuple[Node, Node], state: EpState
) -> None:
    """R: DAT_INVALID_STATE "Endpoint was not in the DAT_EP_STATE_CONNECTED or
    DAT_EP_STATE_DISCONNECTED state"."""
    with _ep_in(nodes, state) as (side, remote):
        assert side.ep.state == state
        with refused(DatInvalidState, EP_STATE_SUBTYPE[state]):
            side.ep.post_rdma_write([side.lmr.triplet(0, 8)], 5, remote)


def test_r_length_error_when_the_remote_buffer_is_too_small_for_the_local_data(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_LENGTH_ERROR "The size of the remote buffer is too small for the data of the local
    buffer" (DAT_REFERENCE 1d: "as send + LE"). A larger remote buffer is fine."""
    with connected(*nodes) as (a, b):
        iov = [a.lmr.triplet(0, 60), a.lmr.triplet(100, 40)]
        with refused(DatLengthError, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write(iov, 1, b.lmr.remote(0, 99))
        a.ep.post_rdma_write(iov, 2, b.lmr.remote(0, 100))
        done = completion(a.request_evd)
        assert (done.cookie, done.transfered_length) == (2, 100)


def test_r_length_error_beyond_the_eps_max_rdma_size(nodes: tuple[Node, Node]) -> None:
    """R: DAT_LENGTH_ERROR for a write larger than the EP's max_rdma_size attribute."""
    with connected(*nodes, attr_a=EpAttr(max_rdma_size=128)) as (a, b):
        with refused(DatLengthError, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write([a.lmr.triplet(0, 129)], 1, b.lmr.remote(0, 129))
        a.ep.post_rdma_write([a.lmr.triplet(0, 128)], 2, b.lmr.remote(0, 128))
        assert completion(a.request_evd).cookie == 2


def test_r_protection_violation_for_a_local_lmr_of_another_pz(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PROTECTION_VIOLATION "Protection Zone mismatch between ... an LMR of one of the
    local_iov segments and the local Endpoint"."""
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        foreign = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, a.ia.pz_create(), MemPriv.ALL)
        with refused(DatProtectionViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write(
                [a.lmr.triplet(0, 8), foreign.triplet(0, 8)], 1, b.lmr.remote(0, 16)
            )
        nothing_queued(a.request_evd)


def test_r_remote_pz_mismatch_fails_the_write_at_completion(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PROTECTION_VIOLATION for a "Protection Zone mismatch between ... the rmr_context
    and the remote Endpoint": only the target can tell, so it shows at completion as
    DAT_DTO_ERR_REMOTE_ACCESS; the connection breaks and nothing lands."""
    with connected(*nodes) as (a, b):
        buf = b.ia.alloc(256)
        buf.view[:64] = bytes(64)
        elsewhere = b.ia.lmr_create(MemType.VIRTUAL, buf, 256, b.ia.pz_create(), MemPriv.ALL)
        a.view[:64] = pattern(64)
        a.ep.post_rdma_write([a.lmr.triplet(0, 64)], 1, elsewhere.remote(0, 64))
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (1, St.DTO_ERR_REMOTE_ACCESS)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert bytes(buf.view[:64]) == bytes(64)


def test_r_privileges_violation_without_local_read_on_a_local_lmr(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "one of the LMRs used in local_iov ... does not have the
    local read privileges"."""
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        write_only = a.ia.lmr_create(
            MemType.VIRTUAL, buf, 256, a.pz, MemPriv.LOCAL_WRITE | MemPriv.REMOTE_WRITE
        )
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write([write_only.triplet(0, 8)], 1, b.lmr.remote(0, 8))
        nothing_queued(a.request_evd)


def test_r_privileges_violation_for_an_invalid_lmr(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "Either one of the LMRs used in local_iov is invalid"."""
    with connected(*nodes) as (a, b):
        address, length, ctx = a.lmr.triplet(0, 8)
        bogus = next(c for c in (ctx ^ 0x5A5A, ctx ^ 0xA5A5) if c not in a.ia.core.regions)
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_write([[address, length, bogus]], 1, b.lmr.remote(0, 8))


@pytest.mark.parametrize("path", ["tcp", "local"])
def test_r_no_remote_write_privilege_fails_the_write_at_completion(
    nodes: tuple[Node, Node], path: str
) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "rmr_context does not have the remote write privileges"
    (DAT_REFERENCE 1d). The target checks the rmr_context, so this shows at completion as
    DAT_DTO_ERR_REMOTE_ACCESS: the write does not land, later DTOs are flushed, the connection
    breaks."""
    with connected(*_ends(nodes, path)) as (a, b):
        buf = b.ia.alloc(256)
        buf.view[:64] = bytes(64)
        read_only = b.ia.lmr_create(
            MemType.VIRTUAL, buf, 256, b.pz, MemPriv.LOCAL_WRITE | MemPriv.REMOTE_READ
        )
        assert read_only.rmr_context
        a.view[:64] = pattern(64)
        a.ep.post_rdma_write([a.lmr.triplet(0, 64)], 1, read_only.remote(0, 64))
        a.ep.post_rdma_write([a.lmr.triplet(0, 64)], 2, b.lmr.remote(0, 64))
        failed, flushed = completion(a.request_evd), completion(a.request_evd)
        assert (failed.cookie, failed.status) == (1, St.DTO_ERR_REMOTE_ACCESS)
        assert (flushed.cookie, flushed.status) == (2, St.DTO_ERR_FLUSHED)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert bytes(buf.view[:64]) == bytes(64), "a refused write landed"


@pytest.mark.parametrize("where", ["past the end", "before the start"])
def test_r_a_remote_range_outside_the_rmr_fails_at_completion(
    nodes: tuple[Node, Node], where: str
) -> None:
    """R: the remote counterpart of "a memory outside its LMR": the target refuses, the write
    completes with DAT_DTO_ERR_REMOTE_ACCESS, and not one byte lands."""
    with connected(*nodes) as (a, b):
        address, _, key = b.lmr.remote()
        start = address + 4096 - 8 if where == "past the end" else address - 8
        b.view[:] = b"q" * 4096
        a.view[:16] = pattern(16)
        a.ep.post_rdma_write([a.lmr.triplet(0, 16)], 1, [start, 16, key])
        assert completion(a.request_evd).status == St.DTO_ERR_REMOTE_ACCESS
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert bytes(b.view) == b"q" * 4096


# -- USAGE ---------------------------------------------------------------------------------------


def test_u_optimal_alignment_is_advertised_and_unaligned_segments_still_work(
    nodes: tuple[Node, Node],
) -> None:
    """U: "the Consumer should align each buffer segment of local_iov to the Optimal Buffer
    Alignment attribute of the Provider ... to the DAT_OPTIMAL_ALIGNMENT": it is reported and
    the allocator honours it; alignment is only advice (odd offsets work)."""
    with connected(*nodes) as (a, b):
        alignment = a.ia.query()["optimal_buffer_alignment"]
        assert alignment == OPTIMAL_ALIGNMENT
        assert a.buf.address % alignment == 0
        assert a.ia.alloc(100).address % alignment == 0
        a.view[1:34] = pattern(33)
        a.view[301:368] = pattern(67, 3)
        a.ep.post_rdma_write(
            [a.lmr.triplet(1, 33), a.lmr.triplet(301, 67)], 1, b.lmr.remote(5, 100)
        )
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(b.view[5:105]) == pattern(33) + pattern(67, 3)
