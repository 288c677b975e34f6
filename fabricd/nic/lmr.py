"""IA, PZ and LMR calls: registering the consumers' memory (dat_lmr_create and friends).

VIRTUAL and SHARED_VIRTUAL memory is a range of a shared-memory segment the consumer and this
daemon both map, or (segment "") the consumer process's own bytes, which the daemon reaches in
place with cross-memory attach (docs/provider.md); a SHARED_VIRTUAL segment is the node's region
of its 40-byte cookie (all 40 bytes compared), or the process's own shared mapping; an LMR over
an LMR shares its parent's bytes with its own PZ and privileges.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

from fabricd.memory import Lmr, MemoryRegistry
from fabricd.nic.objects import Consumer, SharedRegion, lookup
from proto import calls
from proto.attrs import MAX_LMR_BLOCK, ia_attributes
from proto.checks import Region, parse_triplet
from proto.constants import LMR_COOKIE_SIZE, MemPriv, MemType
from proto.constants import DatReturnSubtype as Sub
from proto.errors import (
    DatInsufficientResources,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatLengthError,
    DatModelNotSupported,
)
from proto.limits import Limits
from proto.schema import Empty
from proto.segments import OWN_MEMORY, SEGMENT_PREFIX, SHARED_PREFIX, shared_segment_name

log = logging.getLogger("fabricd")
NO_PTRACE = (
    "the daemon needs ptrace permission over its consumers (the same user, or CAP_SYS_PTRACE "
    "as docker-compose.yml grants its nodes)"
)


def pz(consumer: Consumer, handle: object) -> int:
    """A protection zone of the consumer, or DAT_INVALID_HANDLE."""
    if type(handle) is not int or handle not in consumer.pzs:
        raise DatInvalidHandle(Sub.INVALID_HANDLE_PZ, f"no protection zone {handle!r}")
    return handle


_PRIVILEGES = int(MemPriv.ALL | MemPriv.REMOTE_ATOMIC)


def privileges(value: int, subtype: Sub) -> MemPriv:
    """DAT_MEM_PRIV flags, or DAT_INVALID_PARAMETER with ``subtype``."""
    if value & ~_PRIVILEGES:
        raise DatInvalidParameter(subtype, f"bad mem_privileges {value!r}")
    return MemPriv(value)


class Registrations:
    """The node's registered memory as the consumers ask for it."""

    def __init__(
        self,
        memory: MemoryRegistry,
        new_handle: Callable[[], int],
        name: str,
        address: Callable[[], str],
        limits: Limits,
    ) -> None:
        self.memory = memory
        self.limits = limits
        self.new_handle = new_handle
        self.name, self.address = name, address  # the address once the shell bound its port
        self.shared: dict[bytes, SharedRegion] = {}  # by cookie: all 40 bytes are the key

    def ia_query(self, consumer: Consumer, a: Empty) -> calls.Attributes:
        """dat_ia_query: the IA and provider attributes."""
        return calls.Attributes(
            ia_attributes(self.name, self.address(), not self.memory.coherent, self.limits)
        )

    def pz_create(self, consumer: Consumer, a: Empty) -> calls.Handle:
        """dat_pz_create."""
        handle = self.new_handle()
        consumer.pzs[handle] = 0
        return calls.Handle(handle)

    def pz_free(self, consumer: Consumer, a: calls.PzFree) -> Empty:
        """dat_pz_free: refused while an EP, LMR or RMR uses the PZ."""
        handle = pz(consumer, a.pz)
        if consumer.pzs[handle]:
            raise DatInvalidState(Sub.INVALID_STATE_PZ_IN_USE, "an EP or LMR still uses this PZ")
        del consumer.pzs[handle]
        return Empty()

    def lmr_create(self, consumer: Consumer, a: calls.LmrCreate) -> calls.LmrCreated:
        """dat_lmr_create: VIRTUAL, SHARED_VIRTUAL or LMR memory in a PZ."""
        zone = pz(consumer, a.pz)
        privs = privileges(a.privileges, Sub.INVALID_ARG6)
        if a.mem_type in (MemType.VIRTUAL, MemType.SHARED_VIRTUAL):
            if consumer.registered + a.length > self.limits.ia_bytes:
                raise DatInsufficientResources(
                    Sub.RESOURCE_MEMORY,
                    f"this IA registers {consumer.registered} bytes; {a.length} more passes "
                    f"its limit of {self.limits.ia_bytes} (--limit ia_bytes)",
                )
            lmr = self._register_virtual(consumer, a, zone, privs)
            lmr.counted = lmr.region.length
            consumer.registered += lmr.counted
        elif a.mem_type == MemType.LMR:
            lmr = self._register_alias(consumer, a, zone, privs)
        else:
            raise DatModelNotSupported(message=f"memory type {a.mem_type!r} is not offered")
        consumer.lmrs[lmr.handle] = lmr
        consumer.pzs[zone] += 1
        region = lmr.region
        return calls.LmrCreated(
            lmr.handle, lmr.lmr_context, lmr.rmr_context, region.length, region.address
        )

    def _register_virtual(
        self, consumer: Consumer, a: calls.LmrCreate, zone: int, privs: MemPriv
    ) -> Lmr:
        if a.length <= 0:
            raise DatLengthError(message="length must be positive")
        cookie = None
        if a.mem_type == MemType.SHARED_VIRTUAL:
            cookie = a.cookie
            if cookie is None or len(cookie) != LMR_COOKIE_SIZE:
                raise DatInvalidParameter(Sub.INVALID_ARG3, "a DAT_LMR_COOKIE is 40 bytes")
        if a.segment == OWN_MEMORY:  # shared or not, the process's own mapping is reached
            lmr = self._register_process(consumer, a, zone, privs)
            lmr.cookie = cookie
            return lmr
        if cookie is not None:
            self._check_shared(consumer, cookie, a.segment)
        elif self.memory.owners.get(a.segment) != consumer.id:
            raise DatInvalidParameter(
                Sub.INVALID_ARG3, f"{a.segment!r} is no segment this IA handed to its node"
            )
        view = self._map_range(a.segment, a.offset, a.length)
        region = Region(a.address, a.length, zone, privs)
        lmr = self.memory.register(
            self.new_handle(), consumer.id, region, a.segment, view, a.offset
        )
        lmr.cookie = cookie
        return lmr

    def _register_process(
        self, consumer: Consumer, a: calls.LmrCreate, zone: int, privs: MemPriv
    ) -> Lmr:
        """The consumer process's own bytes, reached in place (cross-memory attach)."""
        if not consumer.pid:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "this IA's process is not known")
        if not self.memory.coherent:
            raise DatModelNotSupported(message="a process's own memory on a noncoherent node")
        region = Region(a.address, a.length, zone, privs)
        try:
            return self.memory.register_process(
                self.new_handle(), consumer.id, region, consumer.pid
            )
        except OSError as err:
            msg = f"cannot reach {a.address:#x}+{a.length} of process {consumer.pid}: {err}"
            if err.errno == errno.EPERM:  # the node's set-up, not the program: say so where seen
                log.warning("%s: %s", msg, NO_PTRACE)
            raise DatInvalidParameter(Sub.INVALID_ARG3, msg) from None

    def _register_alias(
        self, consumer: Consumer, a: calls.LmrCreate, zone: int, privs: MemPriv
    ) -> Lmr:
        parent = lookup(consumer.lmrs, a.parent, Sub.INVALID_HANDLE_LMR, "LMR")
        if parent.segment:
            self.memory.map_segment(parent.segment)
        region = Region(parent.region.address, parent.region.length, zone, privs)
        lmr = self.memory.register(
            self.new_handle(), consumer.id, region, parent.segment, parent.view[:], parent.offset
        )
        lmr.cookie, lmr.pid = parent.cookie, parent.pid
        return lmr

    def _map_range(self, segment: str, offset: int, length: int) -> memoryview:
        """The consumer's bytes [offset, offset+length) of ``segment``, mapped by the daemon."""
        try:
            whole = self.memory.map_segment(segment)
        except (FileNotFoundError, ValueError) as err:
            raise DatInvalidParameter(Sub.INVALID_ARG3, f"cannot map {segment}: {err}") from None
        except OSError as err:  # out of descriptors or memory
            msg = f"cannot map {segment}: {err}"
            raise DatInsufficientResources(Sub.RESOURCE_MEMORY, msg) from None
        if offset < 0 or offset + length > len(whole):
            self.memory.unmap_segment(segment)
            raise DatInvalidParameter(Sub.INVALID_ARG4, "range outside the shared segment")
        return whole[offset : offset + length]

    def _check_shared(self, consumer: Consumer, cookie: bytes, segment: str) -> None:
        """SHARED_VIRTUAL: the memory must be the platform's shared region of this cookie."""
        if not segment.startswith(SHARED_PREFIX):
            raise DatInvalidState(message="the buffer was not allocated as shared memory")
        region = self.shared.get(cookie)
        if region is None or region.segment != segment or consumer.id not in region.users:
            raise DatInvalidState(message="the buffer is not the shared region of this cookie")

    def shared_attach(self, consumer: Consumer, a: calls.SharedAttach) -> calls.SharedRegion:
        """Create or join the node's shared region of a cookie (the platform's primitive)."""
        if len(a.cookie) != LMR_COOKIE_SIZE:
            raise DatInvalidParameter(Sub.INVALID_ARG1, "a DAT_LMR_COOKIE is 40 bytes")
        if not 0 < a.size <= MAX_LMR_BLOCK:
            raise DatLengthError(message=f"size must be 1..{MAX_LMR_BLOCK} (max_lmr_block_size)")
        region = self.shared.get(a.cookie)
        if region is None:
            segment = shared_segment_name(a.cookie)
            try:
                length = self.memory.create_segment(segment, a.size)
            except OSError as err:
                raise DatInsufficientResources(Sub.RESOURCE_MEMORY, str(err)) from None
            region = self.shared[a.cookie] = SharedRegion(segment, length)
        if a.size > region.length:
            raise DatInvalidParameter(
                Sub.INVALID_ARG2, f"the region of this cookie has {region.length} bytes"
            )
        region.users.add(consumer.id)
        return calls.SharedRegion(region.segment, region.length)

    def may_fetch(self, consumer: Consumer, segment: object) -> bool:
        """The segment desk hands a driver its IA's own segments and the shared regions it
        attached, nothing else (fabricd/desk.py)."""
        owner = self.memory.owners.get(segment) if isinstance(segment, str) else None
        if owner is None or owner not in (0, consumer.id):
            return False
        return owner == consumer.id or any(
            r.segment == segment and consumer.id in r.users for r in self.shared.values()
        )

    def handed_name(self, consumer: Consumer) -> str:
        """The name of the next segment ``consumer`` hands over (its arena's next chunk)."""
        consumer.handed += 1
        return f"{SEGMENT_PREFIX}{consumer.name}-a{consumer.handed}"

    def lmr_sync(self, consumer: Consumer, a: calls.LmrSync) -> Empty:
        """dat_lmr_sync_rdma_write (to_cpu) and dat_lmr_sync_rdma_read, for any LMRs and PZs."""
        ranges = []
        for triplet in a.segments:
            address, length, context = parse_triplet(triplet, Sub.INVALID_ARG2)
            if length == 0:
                continue
            lmr = self.memory.by_lmr_context.get(context)
            if lmr is None or lmr.owner != consumer.id:
                raise DatInvalidParameter(Sub.INVALID_ARG2, f"no LMR with context {context:#x}")
            if not lmr.region.contains(address, length):
                raise DatInvalidParameter(
                    Sub.INVALID_ARG2, f"{address:#x}+{length} lies outside its LMR"
                )
            ranges.append((lmr, address, length))
        for lmr, address, length in ranges:  # all checked first: nothing half done
            self.memory.sync(lmr, address, length, a.to_cpu)
        return Empty()

    def lmr_free(self, consumer: Consumer, a: calls.LmrFree) -> Empty:
        """dat_lmr_free: refused while an RMR is bound to the LMR."""
        lmr = lookup(consumer.lmrs, a.lmr, Sub.INVALID_HANDLE_LMR, "LMR")
        if lmr.bound_rmrs:
            raise DatInvalidState(Sub.INVALID_STATE_LMR_IN_USE, "an RMR is bound to this LMR")
        self.release(consumer, lmr)
        return Empty()

    def release(self, consumer: Consumer, lmr: Lmr) -> None:
        """Forget an LMR: its keys stop working, its mapping is dropped."""
        consumer.lmrs.pop(lmr.handle, None)
        consumer.registered -= lmr.counted
        if lmr.region.pz in consumer.pzs:
            consumer.pzs[lmr.region.pz] -= 1
        self.memory.free(lmr)
        if lmr.segment:
            self.memory.unmap_segment(lmr.segment)

    def abandon(self, consumer: Consumer) -> None:
        """The consumer went away: its LMRs are freed, it leaves the shared regions."""
        for lmr in list(consumer.lmrs.values()):
            self.release(consumer, lmr)
        for cookie, region in list(self.shared.items()):
            region.users.discard(consumer.id)
            if not region.users:
                del self.shared[cookie]
                self.memory.remove_segment(region.segment)
