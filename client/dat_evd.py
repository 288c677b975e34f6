"""The flat DAT layer's EVD and CNO calls (dat_evd_*, dat_cno_*), in the C argument order,
returning the DAT_RETURN (client.dat re-exports them)."""

from __future__ import annotations

from typing import Any

from client.api import Cno, Evd, Ia
from client.common import decline
from client.core import Event
from client.datref import Ref, need, out, query, status
from proto.constants import DAT_SUCCESS, DatReturnSubtype, EventNumber
from proto.errors import DatError, DatInvalidParameter

Sub = DatReturnSubtype


def _evd(evd: Any) -> Evd:
    found: Evd = need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST)
    return found


def _cno(cno: Any) -> Cno:
    found: Cno = need(cno, Cno, Sub.INVALID_HANDLE_CNO)
    return found


# -- EVD ---------------------------------------------------------------------------------------


def dat_evd_create(
    ia: Ia, evd_min_qlen: int, cno: Cno | None, evd_flags: int, evd: Ref[Evd] | None
) -> int:
    """dat_evd_create (``cno`` None: DAT_HANDLE_NULL)."""

    def run() -> None:
        owner: Ia = need(ia, Ia, Sub.INVALID_HANDLE_IA)
        if cno is not None:
            _cno(cno)
        made = out(evd, Sub.INVALID_ARG5, "evd")
        made.value = owner.evd_create(evd_min_qlen, evd_flags, cno)

    return status(run)


def dat_evd_wait(
    evd: Evd, timeout: int, threshold: int, event: Ref[Event] | None, nmore: Ref[int] | None
) -> int:
    """dat_evd_wait: on DAT_TIMEOUT_EXPIRED ``nmore`` is still set."""
    try:
        waiter = _evd(evd)
        got, more = out(event, Sub.INVALID_ARG4, "event"), out(nmore, Sub.INVALID_ARG5, "nmore")
        got.value, more.value = waiter.wait(timeout, threshold)
    except DatError as err:
        if nmore is not None:
            nmore.value = getattr(err, "nmore", nmore.value)
        return err.code
    return DAT_SUCCESS


def dat_evd_dequeue(evd: Evd, event: Ref[Event] | None) -> int:
    """dat_evd_dequeue."""

    def run() -> None:
        taker = _evd(evd)
        ref = out(event, Sub.INVALID_ARG2, "event")  # before an event is taken
        ref.value = taker.dequeue()

    return status(run)


def dat_evd_post_se(evd: Evd, event: Event | None) -> int:
    """dat_evd_post_se: ``event`` a DAT_SOFTWARE_EVENT (its pointer is what is posted)."""

    def run() -> None:
        target = _evd(evd)
        if not isinstance(event, Event) or event.event_number != EventNumber.SOFTWARE_EVENT:
            raise DatInvalidParameter(Sub.INVALID_ARG2, "the event must be a SOFTWARE_EVENT")
        target.post_se(event.pointer)

    return status(run)


def dat_evd_query(evd: Evd, evd_param_mask: int, evd_param: Ref[dict[str, Any]] | None) -> int:
    """dat_evd_query (the whole DAT_EVD_PARAM, whatever the mask)."""
    return query(lambda: _evd(evd).query(), evd_param)


def dat_evd_enable(evd: Evd) -> int:
    """dat_evd_enable."""
    return status(lambda: _evd(evd).enable())


def dat_evd_disable(evd: Evd) -> int:
    """dat_evd_disable."""
    return status(lambda: _evd(evd).disable())


def dat_evd_set_unwaitable(evd: Evd) -> int:
    """dat_evd_set_unwaitable."""
    return status(lambda: _evd(evd).set_unwaitable())


def dat_evd_clear_unwaitable(evd: Evd) -> int:
    """dat_evd_clear_unwaitable."""
    return status(lambda: _evd(evd).clear_unwaitable())


def dat_evd_modify_cno(evd: Evd, cno: Cno | None) -> int:
    """dat_evd_modify_cno (``cno`` None: no CNO)."""
    return status(lambda: _evd(evd).modify_cno(None if cno is None else _cno(cno)))


def dat_evd_resize(evd: Evd, evd_min_qlen: int) -> int:
    """dat_evd_resize."""
    return status(lambda: _evd(evd).resize(evd_min_qlen))


def dat_evd_free(evd: Evd) -> int:
    """dat_evd_free."""
    return status(lambda: _evd(evd).free())


# -- CNO ---------------------------------------------------------------------------------------


def dat_cno_create(ia: Ia, agent: Any, cno: Ref[Cno] | None) -> int:
    """dat_cno_create (``agent``: the DAT_OS_WAIT_PROXY_AGENT, any value)."""

    def run() -> None:
        owner = need(ia, Ia, Sub.INVALID_HANDLE_IA)
        ref = out(cno, Sub.INVALID_ARG3, "cno")  # before anything is made
        ref.value = owner.cno_create(agent)

    return status(run)


def dat_cno_modify_agent(cno: Cno, agent: Any) -> int:
    """dat_cno_modify_agent."""
    return status(lambda: _cno(cno).modify_agent(agent))


def dat_cno_query(cno: Cno, cno_param_mask: int, cno_param: Ref[dict[str, Any]] | None) -> int:
    """dat_cno_query (the whole DAT_CNO_PARAM, whatever the mask)."""
    return query(lambda: _cno(cno).query(), cno_param)


def dat_cno_wait(cno: Cno, timeout: int, evd: Ref[Evd] | None) -> int:
    """dat_cno_wait: the EVD that has an event."""

    def run() -> None:
        waiter = _cno(cno)
        ref = out(evd, Sub.INVALID_ARG3, "evd")  # before it waits
        ref.value = waiter.wait(timeout)

    return status(run)


def dat_cno_free(cno: Cno) -> int:
    """dat_cno_free."""
    return status(lambda: _cno(cno).free())


def dat_cno_fd_create(ia: Ia, fd: Ref[int], cno: Ref[Cno]) -> int:
    """dat_cno_fd_create: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_cno_fd_create"))


def dat_cno_trigger(cno: Cno, evd: Ref[Evd]) -> int:
    """dat_cno_trigger: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_cno_trigger"))
