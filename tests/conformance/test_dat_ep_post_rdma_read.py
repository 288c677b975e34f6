"""Conformance: dat_ep_post_rdma_read (../shared/spec/003_b11b4eff8e343ad3.txt), real daemons.

Every sentence of DESCRIPTION, RETURN VALUES and USAGE that states behaviour is named by a test
below ("D": DESCRIPTION, "R": RETURN VALUES, "U": USAGE). The sentences that only oblige the
consumer ("A Consumer must not modify the local_iov or its content until the DTO is completed",
"portable Consumers should not rely on this behavior", "Consumers should not rely on the
Provider copying local_iov information") leave no provider behaviour to observe.

Two fabricd processes serve the whole module (starting a pair per test would cost ~0.4 s each);
every test opens its own IAs and connection and closes them. Where a test needs an operation to
stay outstanding it SIGSTOPs the target daemon, and it learns that its own daemon has handled
the posts by a round trip (dat_ia_query) on the same socket: no test depends on timing.

A refused post is checked by its full DAT_RETURN (``support.refused`` / ``assert_code``), not
just its type: DAT_INVALID_ARGn names the bad argument of dat_ep_post_rdma_read(ep_handle,
num_segments, local_iov, user_cookie, remote_buffer, completion_flags), DAT_INVALID_STATE the
EP's state; the page gives DAT_PRIVILEGES_VIOLATION, DAT_PROTECTION_VIOLATION and
DAT_LENGTH_ERROR no subtype, and datfabric returns DAT_NO_SUBTYPE with them. The exact bounds of
a remote window are in test_rdma_window_bounds.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from client.api import Ep, Ia
from client.dat import dat_ep_post_rdma_read
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
def test_d1_transfers_all_the_data_of_the_remote_buffer_into_the_local_iov(
    nodes: tuple[Node, Node], path: str
) -> None:
    """D: "requests the transfer of all the data specified by the remote_buffer over the
    connection of the ep_handle Endpoint into the local_iov"."""
    size = 1 << 18
    with connected(*_ends(nodes, path), size=size) as (a, b):
        data = pattern(size - 100)
        b.view[100:] = data
        a.ep.post_rdma_read([a.lmr.triplet(0, size - 100)], 5, b.lmr.remote(100, size - 100))
        done = completion(a.request_evd)
        assert (done.status, done.operation, done.cookie) == (St.DTO_SUCCESS, Dtos.RDMA_READ, 5)
        assert done.transfered_length == size - 100
        assert bytes(a.view[: size - 100]) == data


@pytest.mark.parametrize("path", ["tcp", "local"])
def test_d2_segments_fill_in_iov_order_front_full_one_partial_rest_untouched(
    nodes: tuple[Node, Node], path: str
) -> None:
    """D: "The local_iov segments are filled in the I/O Vector order until the whole message is
    received. This ensures that all the "front" segments of the local_iov I/O Vector are
    completely filled, only one segment is partially filled, if needed, and all segments that
    follow it are not filled at all." Segments sit in two LMRs, not in address order, with a
    zero-length segment (whose other fields are irrelevant) among them."""
    attr = EpAttr(max_rdma_read_iov=8)
    with connected(*_ends(nodes, path), attr_a=attr) as (a, b):
        other_buf = a.ia.alloc(4096)
        other = a.ia.lmr_create(MemType.VIRTUAL, other_buf, 4096, a.pz, MemPriv.ALL)
        a.view[:] = b"\xee" * 4096
        other_buf.view[:] = b"\xee" * 4096
        iov = [
            a.lmr.triplet(3000, 100),  # full
            [0xDEAD, 0, 0xBAD],  # zero length: ignored
            other.triplet(10, 50),  # full
            a.lmr.triplet(200, 80),  # partial: 50 of 80
            other.triplet(2000, 60),  # untouched
        ]
        data = pattern(200)
        b.view[:200] = data
        a.ep.post_rdma_read(iov, 9, b.lmr.remote(0, 200))
        done = completion(a.request_evd)
        assert (done.status, done.transfered_length) == (St.DTO_SUCCESS, 200)
        assert bytes(a.view[3000:3100]) == data[:100]
        assert bytes(other_buf.view[10:60]) == data[100:150]
        assert bytes(a.view[200:250]) == data[150:200]
        assert bytes(a.view[250:280]) == b"\xee" * 30, "the partial segment's tail was written"
        assert bytes(other_buf.view[2000:2060]) == b"\xee" * 60, "a following segment was filled"
        for lo, hi in [(0, 200), (250, 3000), (3100, 4096)]:
            assert bytes(a.view[lo:hi]) == b"\xee" * (hi - lo), f"bytes {lo}..{hi} changed"
        assert bytes(other_buf.view[:10]) + bytes(other_buf.view[60:2000]) == b"\xee" * 1950


def test_d2_num_segments_is_the_number_of_lmr_triplets_used(nodes: tuple[Node, Node]) -> None:
    """D: "The num_segments parameter specifies the number of segments in the local_iov" (flat
    layer, C order): only the first num_segments triplets are used; more than exist is
    DAT_INVALID_PARAMETER."""
    with connected(*nodes) as (a, b):
        a.view[:] = bytes(4096)
        b.view[:96] = pattern(96)
        iov = [a.lmr.triplet(0, 32), a.lmr.triplet(100, 64), a.lmr.triplet(1000, 64)]
        ret = dat_ep_post_rdma_read(a.ep, 2, iov, 1, b.lmr.remote(0, 96), 0)
        assert ret == 0
        assert completion(a.request_evd).transfered_length == 96
        assert bytes(a.view[:32]) + bytes(a.view[100:164]) == pattern(96)
        assert bytes(a.view[1000:1064]) == bytes(64), "a triplet past num_segments was used"
        ret = dat_ep_post_rdma_read(a.ep, 4, iov, 2, b.lmr.remote(0, 96), 0)
        assert_code(ret, DatInvalidParameter, Sub.INVALID_ARG2)


def test_d3_the_user_cookie_is_returned_in_the_completion_event(nodes: tuple[Node, Node]) -> None:
    """D: "The user_cookie is returned to the Consumer in the Completion event for the posted RDMA
    Read", and "There is no requirement on the Consumer that the value user_cookie should be
    unique for each DTO" (cookies are opaque: 0, the largest u64, and a repeated value)."""
    cookies = [0, (1 << 64) - 1, 0x1234_5678_9ABC_DEF0, 7, 7]
    with connected(*nodes) as (a, b):
        for i, cookie in enumerate(cookies):
            a.ep.post_rdma_read([a.lmr.triplet(64 * i, 64)], cookie, b.lmr.remote(0, 64))
        got = [completion(a.request_evd) for _ in cookies]
        assert [e.cookie for e in got] == cookies
        assert all(e.status == St.DTO_SUCCESS and e.ep == a.ep.handle for e in got)


def test_d3_a_cookie_that_is_not_a_u64_is_an_invalid_parameter(nodes: tuple[Node, Node]) -> None:
    """D: user_cookie is a DAT_DTO_COOKIE (64 bits): anything else is DAT_INVALID_PARAMETER."""
    with connected(*nodes) as (a, b):
        for cookie in (-1, 1 << 64):
            with refused(DatInvalidParameter, Sub.INVALID_ARG4):
                a.ep.post_rdma_read([a.lmr.triplet(0, 8)], cookie, b.lmr.remote(0, 8))


def test_d4_the_provider_copies_the_local_iov_at_post(nodes: tuple[Node, Node]) -> None:
    """D: "Providers that allow Consumers to get ownership of the local_iov but not the memory
    it specifies back after the dat_ep_post_rdma_read() returns ... This behavior allows
    Consumers full control of the local_iov after dat_ep_post_rdma_read() returns." The list
    is changed right after the post; the read still lands where it said at post time."""
    with connected(*nodes) as (a, b):
        a.view[:] = bytes(4096)
        b.view[:64] = pattern(64)
        iov = [a.lmr.triplet(0, 64)]
        a.ep.post_rdma_read(iov, 1, b.lmr.remote(0, 64))
        iov[0] = a.lmr.triplet(2048, 64)
        iov.append(a.lmr.triplet(3000, 64))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[:64]) == pattern(64)
        assert bytes(a.view[2048:]) == bytes(2048)


def test_d4_the_local_iov_ownership_is_specified_in_provider_attributes(
    nodes: tuple[Node, Node],
) -> None:
    """D: Providers that give the local_iov back at return "should document this behavior and
    also specify its support in Provider attributes" (DAT_IOV_OWNERSHIP: CONSUMER)."""
    with Ia(nodes[0].socket) as ia:
        assert ia.query().get("iov_ownership_on_return") == IovOwnership.CONSUMER


def test_d5_completion_is_a_dto_event_on_the_request_evd(nodes: tuple[Node, Node]) -> None:
    """D: "The completion of the posted RDMA Read is reported to the Consumer asynchronously
    through a DTO Completion event" (on the EP's request EVD; nothing on its recv or connect
    EVD, nothing at the target)."""
    with connected(*nodes) as (a, b):
        a.ep.post_rdma_read([a.lmr.triplet(0, 128)], 3, b.lmr.remote(0, 128))
        done = completion(a.request_evd)
        assert (done.evd, done.ep, done.operation) == (
            a.request_evd.handle,
            a.ep.handle,
            Dtos.RDMA_READ,
        )
        nothing_queued(a.recv_evd, a.connect_evd, a.request_evd)
        nothing_queued(b.request_evd, b.recv_evd, b.connect_evd)


def test_d5_suppress_gives_no_event_for_a_successful_read(nodes: tuple[Node, Node]) -> None:
    """D: completion is reported "based on the specified completion_flags value":
    DAT_COMPLETION_SUPPRESS_FLAG "Suppress successful Completion". A later signalled read is
    the sync point (completions of one EP come in posting order)."""
    with connected(*nodes) as (a, b):
        b.view[:64] = pattern(64)
        a.ep.post_rdma_read(
            [a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64), CompletionFlags.SUPPRESS
        )
        a.ep.post_rdma_read([a.lmr.triplet(64, 64)], 2, b.lmr.remote(0, 64))
        assert completion(a.request_evd).cookie == 2
        nothing_queued(a.request_evd)
        assert bytes(a.view[:64]) == pattern(64), "the suppressed read did not happen"


def test_d5_suppress_still_reports_a_failed_read(nodes: tuple[Node, Node]) -> None:
    """D: SUPPRESS suppresses only a *successful* completion: a failed read is reported."""
    with connected(*nodes) as (a, b):
        address, length, key = b.lmr.remote(0, 64)
        a.ep.post_rdma_read(
            [a.lmr.triplet(0, 64)], 4, [address, length, key ^ 0x77], CompletionFlags.SUPPRESS
        )
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (4, St.DTO_ERR_REMOTE_ACCESS)


def test_d5_suppress_still_reports_a_flushed_read(nodes: tuple[Node, Node]) -> None:
    """D: SUPPRESS hides only a successful completion: a suppressed read posted in
    DAT_EP_STATE_DISCONNECTED is still reported, as flushed."""
    with connected(*nodes) as (a, b):
        a.ep.disconnect(CloseFlags.ABRUPT)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 6, b.lmr.remote(0, 8), CompletionFlags.SUPPRESS)
        flushed = completion(a.request_evd)
        assert (flushed.cookie, flushed.status) == (6, St.DTO_ERR_FLUSHED)


def test_d5_a_suppressed_completion_still_returns_its_request_slot(
    nodes: tuple[Node, Node],
) -> None:
    """D: with SUPPRESS the read still completes: its request-queue entry is freed, so an EP
    with max_request_dtos 1 can post again (no event was queued)."""
    with connected(*nodes, attr_a=EpAttr(max_request_dtos=1)) as (a, b):
        a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.SUPPRESS)
        deadline = time.monotonic() + DEADLINE_S
        while not a.ep.get_status()[2]:
            assert time.monotonic() < deadline, "the suppressed read never completed"
            time.sleep(0.005)
        a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 2, b.lmr.remote(0, 8))
        assert completion(a.request_evd).cookie == 2


def test_d6_unsignalled_without_the_ep_request_flag_is_an_invalid_parameter(
    nodes: tuple[Node, Node],
) -> None:
    """D: "The value of DAT_COMPLETION_UNSIGNALLED_FLAG is only valid if the Endpoint Request
    Completion Flags DAT_COMPLETION_UNSIGNALLED_FLAG. Otherwise, DAT_INVALID_PARAMETER is
    returned." (default request_completion_flags: EVD_THRESHOLD)."""
    with connected(*nodes) as (a, b):
        assert not a.ep.attr.request_completion_flags & CompletionFlags.UNSIGNALLED
        with refused(DatInvalidParameter, Sub.INVALID_ARG6):
            a.ep.post_rdma_read(
                [a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.UNSIGNALLED
            )
        a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 2, b.lmr.remote(0, 8))
        assert completion(a.request_evd).cookie == 2, "the refused post was carried out"


def test_d6_unsignalled_is_valid_when_the_ep_request_flags_include_it(
    nodes: tuple[Node, Node],
) -> None:
    """D: UNSIGNALLED "is only valid if the Endpoint Request Completion Flags" include it: an
    EP created with request_completion_flags UNSIGNALLED accepts it and the read happens."""
    attr = EpAttr(request_completion_flags=CompletionFlags.UNSIGNALLED)
    with connected(*nodes, attr_a=attr) as (a, b):
        b.view[:64] = pattern(64)
        a.ep.post_rdma_read(
            [a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64), CompletionFlags.UNSIGNALLED
        )
        a.ep.post_rdma_read([a.lmr.triplet(64, 8)], 2, b.lmr.remote(0, 8))
        deadline = time.monotonic() + DEADLINE_S
        while bytes(a.view[:64]) != pattern(64):
            assert time.monotonic() < deadline, "the unsignalled read never landed"
            time.sleep(0.005)


def test_d6_an_unsignalled_completion_is_queued_without_notification(
    nodes: tuple[Node, Node],
) -> None:
    """D: DAT_COMPLETION_UNSIGNALLED_FLAG is "Non-notification completion": the completion
    event is still reported on the request EVD, it only does not notify (wake) a waiter
    (dat_evd_wait: "By default, all completions are Notification events"; udat.h:
    "Completions with unsignaled notifications"). SUPPRESS is the flag that drops it. The
    signalled read posted after it is the sync point; the unsignalled event precedes it."""
    attr = EpAttr(request_completion_flags=CompletionFlags.UNSIGNALLED)
    with connected(*nodes, attr_a=attr) as (a, b):
        a.ep.post_rdma_read(
            [a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), CompletionFlags.UNSIGNALLED
        )
        a.ep.post_rdma_read([a.lmr.triplet(8, 8)], 2, b.lmr.remote(0, 8))
        first = completion(a.request_evd)
        assert (first.cookie, first.status) == (1, St.DTO_SUCCESS)
        assert completion(a.request_evd).cookie == 2


def test_d6_a_read_with_barrier_fence_completes_with_its_data_in_order(
    nodes: tuple[Node, Node],
) -> None:
    """D: completion_flags DAT_COMPLETION_BARRIER_FENCE_FLAG "Request for Barrier Fence" is
    accepted on a read; the fenced read and the operations around it complete in order."""
    with connected(*nodes) as (a, b):
        b.view[:192] = pattern(192)
        a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
        a.ep.post_rdma_read(
            [a.lmr.triplet(64, 64)], 2, b.lmr.remote(64, 64), CompletionFlags.BARRIER_FENCE
        )
        a.ep.post_rdma_read([a.lmr.triplet(128, 64)], 3, b.lmr.remote(128, 64))
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in (1, 2, 3)]
        assert bytes(a.view[:192]) == pattern(192)


def test_d6_a_fenced_read_waits_for_earlier_reads_and_later_operations_wait_for_it(
    nodes: tuple[Node, Node],
) -> None:
    """D: "Request for Barrier Fence" on a read: it starts only when the earlier RDMA Reads have
    completed, and what is posted after it does not overtake it. The target takes one incoming
    read at a time (max_rdma_read_in 1; the initiator may have 8 out), so a fenced read sent
    while the first is outstanding would break the connection; the write posted after it
    changes the bytes it reads, so a write that overtook it would show in its data. The target
    daemon is stopped while all three are posted."""
    a_node, b_node = nodes
    attr_a, attr_b = EpAttr(max_rdma_read_out=8), EpAttr(max_rdma_read_in=1)
    with connected(a_node, b_node, attr_a=attr_a, attr_b=attr_b) as (a, b):
        b.view[:128] = pattern(128)
        a.view[2048:2112] = b"w" * 64
        with paused(b_node):
            a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            a.ep.post_rdma_read(
                [a.lmr.triplet(64, 64)], 2, b.lmr.remote(64, 64), CompletionFlags.BARRIER_FENCE
            )
            a.ep.post_rdma_write([a.lmr.triplet(2048, 64)], 3, b.lmr.remote(64, 64))
            a.sync()
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in (1, 2, 3)]
        assert bytes(a.view[:128]) == pattern(128), "the later write overtook the fenced read"
        assert bytes(b.view[64:128]) == b"w" * 64
        nothing_queued(a.connect_evd, b.connect_evd)


def test_d6_an_operation_fenced_after_a_read_waits_for_the_read_data(
    nodes: tuple[Node, Node],
) -> None:
    """D: "Request for Barrier Fence": an operation posted with BARRIER_FENCE after an RDMA Read
    does not start before the read has completed (DAT_REFERENCE 2e: "wait for earlier RDMA
    reads"). The fenced RDMA Write sends the buffer the read fills, so the target must receive
    the read's data. The target daemon is stopped while both are posted, so without a fence
    the write leaves with the old bytes."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        b.view[:64] = pattern(64)
        b.view[1024:1088] = b"." * 64
        a.view[:64] = b"s" * 64
        with paused(b_node):
            a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, b.lmr.remote(0, 64))
            a.ep.post_rdma_write(
                [a.lmr.triplet(0, 64)], 2, b.lmr.remote(1024, 64), CompletionFlags.BARRIER_FENCE
            )
            a.sync()
        got = [completion(a.request_evd) for _ in range(2)]
        assert [(e.cookie, e.status) for e in got] == [(1, St.DTO_SUCCESS), (2, St.DTO_SUCCESS)]
        assert bytes(b.view[1024:1088]) == pattern(64), "the fenced write did not wait"


def test_d7_a_successful_post_is_carried_out_without_further_calls(
    nodes: tuple[Node, Node],
) -> None:
    """D: "The DAT_SUCCESS return of the dat_ep_post_rdma_read() is at least the equivalent of
    posting an RDMA Read operation directly by native Transport": once the post returns, the
    data lands with no further DAT call by either consumer (the test only watches memory)."""
    with connected(*nodes) as (a, b):
        a.view[:] = bytes(4096)
        b.view[:] = pattern(4096)
        a.ep.post_rdma_read([a.lmr.triplet(0, 4096)], 1, b.lmr.remote(0, 4096))
        deadline = time.monotonic() + DEADLINE_S
        while bytes(a.view) != pattern(4096):
            assert time.monotonic() < deadline, "the posted read was not carried out"
            time.sleep(0.005)
        assert completion(a.request_evd).status == St.DTO_SUCCESS


def test_d7_posting_is_nonblocking_while_the_target_cannot_answer(
    nodes: tuple[Node, Node],
) -> None:
    """D: "Providers should avoid resource allocation as part of dat_ep_post_rdma_read() to
    ensure that this operation is nonblocking": posts return while the target daemon is
    stopped; the reads complete once it runs again."""
    a_node, b_node = nodes
    with connected(a_node, b_node) as (a, b):
        b.view[:96] = pattern(96)
        with paused(b_node):
            for i in range(3):
                a.ep.post_rdma_read([a.lmr.triplet(32 * i, 32)], i, b.lmr.remote(32 * i, 32))
            a.sync()
            nothing_queued(a.request_evd)
            assert not a.ep.get_status()[2], "the reads are outstanding"
        got = [completion(a.request_evd) for _ in range(3)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in range(3)]
        assert bytes(a.view[:96]) == pattern(96)


@pytest.mark.parametrize("how", ["local disconnect", "peer disconnect", "broken"])
def test_d8_valid_in_disconnected_and_flushed_to_the_request_evd(
    nodes: tuple[Node, Node], how: str
) -> None:
    """D: "The operation is valid for the Endpoint in the DAT_EP_STATE_CONNECTED and
    DAT_EP_STATE_DISCONNECTED states. If the operation returns successfully for the Endpoint in
    the DAT_EP_STATE_DISCONNECTED state, the posted RDMA Read is immediately flushed to
    request_evd_handle." Nothing reaches the local buffer."""
    with connected(*nodes) as (a, b):
        if how == "local disconnect":
            a.ep.disconnect(CloseFlags.ABRUPT)
            wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        elif how == "peer disconnect":
            b.ep.disconnect(CloseFlags.ABRUPT)
            wait_event(a.connect_evd, E.CONNECTION_EVENT_DISCONNECTED)
        else:
            address, length, key = b.lmr.remote(0, 8)
            a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 99, [address, length, key ^ 1])
            assert completion(a.request_evd).status == St.DTO_ERR_REMOTE_ACCESS
            wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert a.ep.state == EpState.DISCONNECTED
        a.view[:64] = b"k" * 64
        b.view[:64] = pattern(64)
        a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 42, b.lmr.remote(0, 64))
        flushed = completion(a.request_evd)
        assert (flushed.cookie, flushed.status, flushed.operation) == (
            42,
            St.DTO_ERR_FLUSHED,
            Dtos.RDMA_READ,
        )
        assert bytes(a.view[:64]) == b"k" * 64
        nothing_queued(a.recv_evd, a.connect_evd)


# -- RETURN VALUES -------------------------------------------------------------------------------


def test_r_insufficient_resources_when_the_request_queue_is_full(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INSUFFICIENT_RESOURCES "The operation failed due to resource limitations": the EP's
    max_request_dtos reads are outstanding (target stopped), so one more is refused; once they
    complete the EP takes posts again."""
    a_node, b_node = nodes
    with connected(a_node, b_node, attr_a=EpAttr(max_request_dtos=2)) as (a, b):
        with paused(b_node):
            a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8))
            a.ep.post_rdma_read([a.lmr.triplet(8, 8)], 2, b.lmr.remote(0, 8))
            with refused(DatInsufficientResources, Sub.RESOURCE_TEP):
                a.ep.post_rdma_read([a.lmr.triplet(16, 8)], 3, b.lmr.remote(0, 8))
        assert [completion(a.request_evd).cookie for _ in range(2)] == [1, 2]
        a.ep.post_rdma_read([a.lmr.triplet(16, 8)], 3, b.lmr.remote(0, 8))
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
            a.ep.post_rdma_read([segment], 1, b.lmr.remote(0, 64))
        nothing_queued(a.request_evd)


def test_r_a_segment_outside_its_lmr_never_reaches_memory_past_the_library(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INVALID_PARAMETER for a segment outside its LMR is the library's answer; a post
    that skips the library (forged frame) is refused by the daemon too: the read fails with a
    local protection error and not one byte outside the LMR changes."""
    with connected(*nodes) as (a, b):
        middle = a.ia.lmr_create(MemType.VIRTUAL, a.buf.address + 1024, 1024, a.pz, MemPriv.ALL)
        a.view[:] = b"\xee" * 4096
        b.view[:64] = pattern(64)
        segment = [middle.registered_address - 16, 64, middle.lmr_context]
        forge(a, Dtos.RDMA_READ, 77, [segment], b.lmr.remote(0, 64))
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (77, St.DTO_ERR_LOCAL_PROTECTION)
        assert bytes(a.view) == b"\xee" * 4096
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)


def test_r_invalid_parameter_for_more_segments_than_the_ep_allows(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": more segments than max_rdma_read_iov."""
    with connected(*nodes, attr_a=EpAttr(max_rdma_read_iov=2)) as (a, b):
        iov = [a.lmr.triplet(16 * i, 16) for i in range(3)]
        with refused(DatInvalidParameter, Sub.INVALID_ARG2):
            a.ep.post_rdma_read(iov, 1, b.lmr.remote(0, 48))
        a.ep.post_rdma_read(iov[:2], 2, b.lmr.remote(0, 32))
        assert completion(a.request_evd).cookie == 2


@pytest.mark.parametrize("flags", [0x40, 0x80, 0x100])
def test_r_invalid_parameter_for_undefined_completion_flags(
    nodes: tuple[Node, Node], flags: int
) -> None:
    """R: DAT_INVALID_PARAMETER "Invalid parameter": completion_flags bits DAT does not define."""
    with connected(*nodes) as (a, b), refused(DatInvalidParameter, Sub.INVALID_ARG6):
        a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 1, b.lmr.remote(0, 8), flags)


@pytest.mark.parametrize("handle", ["unknown", "freed", "not an EP"])
def test_r_invalid_handle_for_a_bad_ep_handle(nodes: tuple[Node, Node], handle: str) -> None:
    """R: DAT_INVALID_HANDLE "The ep_handle parameter is invalid"."""
    with connected(*nodes) as (a, b):
        iov, remote = [a.lmr.triplet(0, 8)], b.lmr.remote(0, 8)
        if handle == "not an EP":
            ret = dat_ep_post_rdma_read(a.lmr, 1, iov, 1, remote, 0)  # type: ignore[arg-type]
            assert_code(ret, DatInvalidHandle, Sub.INVALID_HANDLE_EP)
            return
        ep = Ep(a.ia, 987_654)
        if handle == "freed":
            spare = a.ia.ep_create(a.pz, a.recv_evd, a.request_evd, a.connect_evd)
            spare.free()
            ep = spare
        with refused(DatInvalidHandle, Sub.INVALID_HANDLE_EP):
            ep.post_rdma_read(iov, 1, remote)


@contextmanager
def _ep_in(nodes: tuple[Node, Node], state: EpState) -> Iterator[tuple[Side, list[int]]]:
    """An EP in ``state`` with a usable LMR, and a valid remote triplet to read from."""
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
        else:  # DISCONNECT_PENDING: a graceful disconnect waits for an outstanding read
            _connect(a, b, b_node)
            with paused(b_node):
                a.ep.post_rdma_read([a.lmr.triplet(0, 8)], 0, b.lmr.remote(0, 8))
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
            side.ep.post_rdma_read([side.lmr.triplet(0, 8)], 5, remote)


def test_r_length_error_when_the_local_buffer_is_too_small_for_the_remote_data(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_LENGTH_ERROR "The size of the receiving buffer is too small for sending buffer
    data. The size of the local buffer is too small for the data of the remote buffer." A local
    iov at least as large as the remote buffer is fine."""
    with connected(*nodes) as (a, b):
        iov = [a.lmr.triplet(0, 60), a.lmr.triplet(100, 40)]
        with refused(DatLengthError, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read(iov, 1, b.lmr.remote(0, 101))
        a.ep.post_rdma_read(iov, 2, b.lmr.remote(0, 100))
        done = completion(a.request_evd)
        assert (done.cookie, done.transfered_length) == (2, 100)


def test_r_protection_violation_for_a_local_lmr_of_another_pz(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PROTECTION_VIOLATION "Protection Zone mismatch between ... an LMR of one of the
    local_iov segments and the local Endpoint"."""
    with connected(*nodes) as (a, b):
        other_pz = a.ia.pz_create()
        buf = a.ia.alloc(256)
        foreign = a.ia.lmr_create(MemType.VIRTUAL, buf, 256, other_pz, MemPriv.ALL)
        with refused(DatProtectionViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read([a.lmr.triplet(0, 8), foreign.triplet(0, 8)], 1, b.lmr.remote())
        nothing_queued(a.request_evd)


def test_r_remote_pz_mismatch_fails_the_read_at_completion(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PROTECTION_VIOLATION for a "Protection Zone mismatch between ... the rmr_context
    and the remote Endpoint". The initiator cannot know the remote PZ when it posts, so this
    one shows at completion: DAT_DTO_ERR_REMOTE_ACCESS, and the connection breaks."""
    with connected(*nodes) as (a, b):
        buf = b.ia.alloc(256)
        buf.view[:64] = pattern(64)
        elsewhere = b.ia.lmr_create(MemType.VIRTUAL, buf, 256, b.ia.pz_create(), MemPriv.ALL)
        a.view[:64] = bytes(64)
        a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, elsewhere.remote(0, 64))
        failed = completion(a.request_evd)
        assert (failed.cookie, failed.status) == (1, St.DTO_ERR_REMOTE_ACCESS)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_BROKEN)
        assert bytes(a.view[:64]) == bytes(64)


def test_r_privileges_violation_without_local_write_on_a_local_lmr(
    nodes: tuple[Node, Node],
) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "one of the LMRs used in local_iov ... does not have the
    local write privileges"."""
    with connected(*nodes) as (a, b):
        buf = a.ia.alloc(256)
        read_only = a.ia.lmr_create(
            MemType.VIRTUAL, buf, 256, a.pz, MemPriv.LOCAL_READ | MemPriv.REMOTE_READ
        )
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read([read_only.triplet(0, 8)], 1, b.lmr.remote(0, 8))
        nothing_queued(a.request_evd)


def test_r_privileges_violation_for_an_invalid_lmr(nodes: tuple[Node, Node]) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "Either one of the LMRs used in local_iov is invalid" (an
    lmr_context no LMR of this consumer has)."""
    with connected(*nodes) as (a, b):
        address, length, ctx = a.lmr.triplet(0, 8)
        bogus = next(c for c in (ctx ^ 0x5A5A, ctx ^ 0xA5A5) if c not in a.ia.core.regions)
        with refused(DatPrivilegesViolation, Sub.NO_SUBTYPE):
            a.ep.post_rdma_read([[address, length, bogus]], 1, b.lmr.remote(0, 8))


@pytest.mark.parametrize("path", ["tcp", "local"])
def test_r_no_remote_read_privilege_fails_the_read_at_completion(
    nodes: tuple[Node, Node], path: str
) -> None:
    """R: DAT_PRIVILEGES_VIOLATION "rmr_context does not have the remote read privileges". The
    rmr_context is checked by the target, so this shows at completion as
    DAT_DTO_ERR_REMOTE_ACCESS and breaks the connection."""
    with connected(*_ends(nodes, path)) as (a, b):
        buf = b.ia.alloc(256)
        write_only = b.ia.lmr_create(
            MemType.VIRTUAL, buf, 256, b.pz, MemPriv.LOCAL_READ | MemPriv.REMOTE_WRITE
        )
        assert write_only.rmr_context
        a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 1, write_only.remote(0, 64))
        a.ep.post_rdma_read([a.lmr.triplet(0, 64)], 2, b.lmr.remote(0, 64))
        failed, flushed = completion(a.request_evd), completion(a.request_evd)
        assert (failed.cookie, failed.status) == (1, St.DTO_ERR_REMOTE_ACCESS)
        assert (flushed.cookie, flushed.status) == (2, St.DTO_ERR_FLUSHED)
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)
        wait_event(b.connect_evd, E.CONNECTION_EVENT_BROKEN)


@pytest.mark.parametrize("where", ["past the end", "before the start"])
def test_r_a_remote_range_outside_the_rmr_fails_at_completion(
    nodes: tuple[Node, Node], where: str
) -> None:
    """R: the remote counterpart of "a memory outside its LMR": the target refuses, the read
    completes with DAT_DTO_ERR_REMOTE_ACCESS and nothing lands locally."""
    with connected(*nodes) as (a, b):
        address, _, key = b.lmr.remote()
        start = address + 4096 - 8 if where == "past the end" else address - 8
        remote = [start, 16, key]
        a.view[:16] = b"q" * 16
        a.ep.post_rdma_read([a.lmr.triplet(0, 16)], 1, remote)
        assert completion(a.request_evd).status == St.DTO_ERR_REMOTE_ACCESS
        assert bytes(a.view[:16]) == b"q" * 16
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)


# -- USAGE ---------------------------------------------------------------------------------------


def test_u_optimal_alignment_is_advertised_and_unaligned_segments_still_work(
    nodes: tuple[Node, Node],
) -> None:
    """U: "the Consumer should align each buffer segment of local_iov to the Optimal Buffer
    Alignment attribute of the Provider ... to the DAT_OPTIMAL_ALIGNMENT": the provider reports
    it, its allocator honours it, and alignment is only advice (odd offsets work)."""
    with connected(*nodes) as (a, b):
        alignment = a.ia.query()["optimal_buffer_alignment"]
        assert alignment == OPTIMAL_ALIGNMENT
        assert a.buf.address % alignment == 0
        assert a.ia.alloc(100).address % alignment == 0
        b.view[:100] = pattern(100)
        a.ep.post_rdma_read([a.lmr.triplet(1, 33), a.lmr.triplet(301, 67)], 1, b.lmr.remote(0, 100))
        assert completion(a.request_evd).status == St.DTO_SUCCESS
        assert bytes(a.view[1:34]) + bytes(a.view[301:368]) == pattern(100)


def _post_reads(a: Side, b: Side, cookies: range) -> None:
    for i in cookies:
        a.ep.post_rdma_read([a.lmr.triplet(32 * i, 32)], i, b.lmr.remote(32 * i, 32))


def test_u_more_reads_than_the_targets_incoming_limit_break_the_connection(
    nodes: tuple[Node, Node],
) -> None:
    """U: "If connection was established without outstanding RDMA Read attributes matching on
    Endpoints on both sides (outstanding RDMA Read outgoing on one end is larger than the
    outstanding RDMA Read incoming on the other end), connection is broken when the number of
    incoming RDMA Read exceeds the outstanding RDMA Read incoming attribute of the Endpoint."
    The initiator may have 8 reads out, the target takes 2 in; 3 reach it at once (it is
    stopped while they are posted)."""
    a_node, b_node = nodes
    with connected(
        a_node,
        b_node,
        attr_a=EpAttr(max_rdma_read_out=8),
        attr_b=EpAttr(max_rdma_read_in=2),
    ) as (a, b):
        with paused(b_node):
            _post_reads(a, b, range(3))
            a.sync()
        got = [completion(a.request_evd) for _ in range(3)]
        assert sorted(e.cookie for e in got) == [0, 1, 2], "each read completes exactly once"
        assert not all(e.status == St.DTO_SUCCESS for e in got), "the excess read succeeded"
        wait_event(a.connect_evd, E.CONNECTION_EVENT_BROKEN)


def test_u_consumer_flow_control_within_the_targets_incoming_limit_keeps_the_connection(
    nodes: tuple[Node, Node],
) -> None:
    """U: "The Consumer can use its own flow control to ensure that it does not post more RDMA
    Reads then the remote EP outstanding RDMA Read incoming attribute is. Thus, they do not rely
    on the underlying Transport enforcing it." Mismatched attributes (out 8, in 2), but never
    more than 2 reads outstanding: every read succeeds and the connection stays up."""
    a_node, b_node = nodes
    with connected(
        a_node,
        b_node,
        attr_a=EpAttr(max_rdma_read_out=8),
        attr_b=EpAttr(max_rdma_read_in=2),
    ) as (a, b):
        b.view[:256] = pattern(256)
        for batch in (range(0, 2), range(2, 4), range(4, 6)):
            with paused(b_node):
                _post_reads(a, b, batch)
                a.sync()
            got = [completion(a.request_evd) for _ in batch]
            assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in batch]
        assert bytes(a.view[:192]) == pattern(256)[:192]
        assert a.ep.state == EpState.CONNECTED
        nothing_queued(a.connect_evd, b.connect_evd)


def test_u_matching_read_limits_never_break_the_connection(nodes: tuple[Node, Node]) -> None:
    """U: the breakage applies only to a connection "established without outstanding RDMA Read
    attributes matching": with out 2 == in 2, four reads posted at once (target stopped) all
    succeed; the initiator keeps the excess to itself."""
    a_node, b_node = nodes
    with connected(
        a_node,
        b_node,
        attr_a=EpAttr(max_rdma_read_out=2),
        attr_b=EpAttr(max_rdma_read_in=2),
    ) as (a, b):
        b.view[:128] = pattern(128)
        with paused(b_node):
            _post_reads(a, b, range(4))
            a.sync()
        got = [completion(a.request_evd) for _ in range(4)]
        assert [(e.cookie, e.status) for e in got] == [(i, St.DTO_SUCCESS) for i in range(4)]
        assert bytes(a.view[:128]) == pattern(128)
        nothing_queued(a.connect_evd)
