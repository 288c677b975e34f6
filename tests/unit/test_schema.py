"""proto.schema, proto.calls, proto.events: every call and event field is typed, and a wrong
value gives exactly the DatError its annotation names."""

from __future__ import annotations

import pytest

from proto import calls, events
from proto.calls import METHODS
from proto.codec import pack, unpack
from proto.constants import DatReturnSubtype as Sub
from proto.constants import Dtos
from proto.constants import EventNumber as E
from proto.errors import DatError, DatInvalidHandle, DatInvalidParameter, MalformedFrame
from proto.eventq import SRQ_RECEIVE, SRQ_TAIL
from proto.schema import Empty, FieldSpec, fields, parse
from tests.core.harness import Fabric


def wrong_value(spec: FieldSpec) -> object:
    """A value of a type the field refuses."""
    candidates: list[object] = ["1", 1, b"x", [], {}, 1.5, True]
    for candidate in candidates:
        if not spec.check(candidate):
            return candidate
    raise AssertionError(f"{spec.name} accepts anything ({spec.kind})")


def good_value(spec: FieldSpec) -> object:
    """A value of the field's type."""
    candidates: list[object] = [1, "x", b"x", [], {}, True, None, 1.5]
    for candidate in candidates:
        if spec.check(candidate):
            return candidate
    raise AssertionError(f"no value fits {spec.name}")


ARG_FIELDS = [
    pytest.param(method, i, id=f"{method}.{spec.name}")
    for method, m in METHODS.items()
    for i, spec in enumerate(fields(m.args))
    if spec.kind != "any"
]


@pytest.mark.parametrize(("method", "index"), ARG_FIELDS)
def test_a_wrong_field_gives_its_annotated_error(method: str, index: int) -> None:
    cls = METHODS[method].args
    specs = fields(cls)
    values = [good_value(s) for s in specs]
    values[index] = wrong_value(specs[index])
    with pytest.raises(DatError) as info:
        parse(cls, values, method)
    bad = specs[index].bad
    assert type(info.value) is bad.error
    assert info.value.code == bad.error(bad.subtype).code
    assert specs[index].name in info.value.message


@pytest.mark.parametrize("method", sorted(METHODS))
def test_arity_is_checked(method: str) -> None:
    cls = METHODS[method].args
    n = len(fields(cls))
    for values in ([None] * (n + 1), [None] * max(n - 1, 0) if n else [1], "not a list"):
        with pytest.raises(DatInvalidParameter) as info:
            parse(cls, values, method)
        assert info.value.subtype == Sub.NO_SUBTYPE


def test_bools_are_not_ints_and_ints_are_not_bools() -> None:
    with pytest.raises(DatInvalidHandle):
        parse(calls.PzFree, [True])
    with pytest.raises(DatInvalidParameter):
        parse(calls.FaultLog, [1])
    assert parse(calls.PzFree, [3]) == calls.PzFree(3)


def test_every_method_has_one_route_with_its_record() -> None:
    """The daemon's call tables and proto.calls agree, method by method: the admin calls are
    served on the admin socket only, every other call on the consumer socket only."""
    nic = Fabric().add_node("n").nic
    assert set(nic.admin_calls) == {m for m, spec in METHODS.items() if spec.admin}
    assert set(nic.calls) == {m for m, spec in METHODS.items() if not spec.admin}
    for method, (args, _) in (nic.calls | nic.admin_calls).items():
        assert args is METHODS[method].args, method


def test_moves_ep_is_the_result_ending_in_ep_and_state() -> None:
    moving = {m for m, spec in METHODS.items() if spec.moves_ep}
    assert moving == {
        "ep_modify", "ep_connect", "ep_dup_connect", "ep_disconnect", "ep_reset", "psp_free",
        "rsp_create", "rsp_free", "cr_accept", "cr_reject", "cr_handoff",
    }  # fmt: skip
    assert not METHODS["ep_create"].moves_ep


EVENT_CASES = [
    (E.DTO_COMPLETION_EVENT, events.DtoCompletion(3, 4, 5, 0, 64, 1, True)),
    (E.RMR_BIND_COMPLETION_EVENT, events.RmrBindCompletion(3, 4, 9, 5, 0, False)),
    (E.CONNECTION_REQUEST_EVENT, events.ConnectionRequest(3, 2, 7, 8, "h:1", b"pd", 0)),
    (E.CONNECTION_EVENT_ESTABLISHED, events.ConnectionEvent(3, 4, b"pd", 9)),
    (E.ASYNC_ERROR_EVD_OVERFLOW, events.AsyncError(3, 4, 0)),
    (E.SOFTWARE_EVENT, events.SoftwareEvent(3, 1 << 63)),
]


@pytest.mark.parametrize(("number", "record"), EVENT_CASES)
def test_events_round_trip(number: E, record: events.Event) -> None:
    flags, head, body = events.encode_event(number, record)
    assert events.decode_event(record.evd, number, flags, head, body) == (number, record)


@pytest.mark.parametrize(("number", "record"), EVENT_CASES)
def test_a_malformed_event_is_a_protocol_error(number: E, record: events.Event) -> None:
    flags, head, body = events.encode_event(number, record)
    with pytest.raises(MalformedFrame):
        events.decode_event(record.evd, 0x7777, flags, head, body)
    if body:  # the records that travel as a msgpack array
        for bad in (body[:-1], pack([*unpack(body), 0]), pack(["x", *unpack(body)[1:]]), b"\xc1"):
            with pytest.raises(MalformedFrame):
                events.decode_event(record.evd, number, flags, head, bad)


def test_an_event_must_carry_its_own_record() -> None:
    with pytest.raises(TypeError):
        events.encode_event(E.DTO_COMPLETION_EVENT, events.AsyncError(1, 2, 3))


def test_empty_takes_nothing() -> None:
    assert parse(Empty, []) == Empty()


@pytest.mark.parametrize(
    "record",
    [
        events.DtoCompletion(3, 4, 5, 0, 64, Dtos.RECEIVE, True, srq=9),
        events.DtoCompletion(3, 4, 5, 0, 64, Dtos.IB_RECV_IMMED, True, immediate=7, srq=9),
    ],
)
def test_a_receive_of_an_srq_names_it_and_round_trips(record: events.DtoCompletion) -> None:
    number = events.dto_number(record.op)
    flags, head, body = events.encode_event(number, record)
    assert flags & SRQ_RECEIVE and body[-SRQ_TAIL.size :] == SRQ_TAIL.pack(9)
    assert events.decode_event(record.evd, number, flags, head, body) == (number, record)
    with pytest.raises(MalformedFrame):  # the flag without its 4 bytes
        events.decode_event(record.evd, number, flags, head, body[: -SRQ_TAIL.size - 1])
    send = (*head[:4], int(Dtos.SEND))
    with pytest.raises(MalformedFrame):  # the flag on anything but a receive
        events.decode_event(record.evd, E.DTO_COMPLETION_EVENT, flags, send, body)
