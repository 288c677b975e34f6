"""Endpoint and IA attributes (DAT_EP_ATTR, DAT_IA_ATTR): provider defaults and limits."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from proto.constants import (
    IB_EXTENSION_VERSION,
    VERSION_MAJOR,
    VERSION_MINOR,
    CompletionFlags,
    DatReturnSubtype,
    EpCreatorForPsp,
    Extension,
    HaLb,
    IovOwnership,
    MemType,
    PzSupport,
    Qos,
    RmrScope,
    ServiceType,
)
from proto.errors import DatInvalidParameter
from proto.limits import Limits

MAX_DTOS: Final = 4096
MAX_IOV: Final = 16
MAX_RDMA_READ: Final = 64
MAX_MESSAGE_SIZE: Final = 1 << 30


_ZERO_IS_DEFAULT: Final = (
    "max_message_size",
    "max_rdma_size",
    "max_rdma_read_iov",
    "max_rdma_write_iov",
)
"""EP attributes whose 0 means the provider's default: an EP that moves no byte is no use, and
on verbs providers these are not per-EP attributes at all (one SGE limit for every request),
so programs written for them leave them 0 in a zeroed DAT_EP_ATTR."""


@dataclass(slots=True)
class EpAttr:
    """DAT_EP_ATTR; the defaults are what dat_ep_create uses when attr is NULL."""

    service_type: int = ServiceType.RC
    max_message_size: int = MAX_MESSAGE_SIZE
    max_rdma_size: int = MAX_MESSAGE_SIZE
    qos: int = Qos.BEST_EFFORT
    recv_completion_flags: int = CompletionFlags.EVD_THRESHOLD
    request_completion_flags: int = CompletionFlags.EVD_THRESHOLD
    max_recv_dtos: int = 16
    max_request_dtos: int = 16
    max_recv_iov: int = 4
    max_request_iov: int = 4
    max_rdma_read_in: int = 4
    max_rdma_read_out: int = 4
    max_rdma_read_iov: int = 4
    max_rdma_write_iov: int = 4

    def to_wire(self) -> dict[str, int]:
        """The attributes as a msgpack-able mapping (a shallow copy: dataclasses.asdict
        deep-copies every field, ~0.2 ms an EP)."""
        return {name: getattr(self, name) for name in _EP_ATTR_NAMES}

    @classmethod
    def from_wire(cls, data: object) -> EpAttr:
        """Build from a mapping, refusing unknown names and out-of-range values (IP|ARG6)."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise DatInvalidParameter(DatReturnSubtype.INVALID_ARG6, "ep_attr must be a mapping")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise DatInvalidParameter(
                DatReturnSubtype.INVALID_ARG6, f"unknown ep_attr {sorted(unknown)}"
            )
        given = {k: v for k, v in data.items() if type(v) is int}
        for name in _ZERO_IS_DEFAULT:  # C programs leave these 0 in a zeroed DAT_EP_ATTR
            if given.get(name) == 0:
                del given[name]
        attr = cls(**given)
        attr.validate()
        return attr

    def validate(self) -> None:
        """Check every field against the provider limits (dat_ep_create: IP|ARG6)."""
        limits = {
            "max_recv_dtos": MAX_DTOS,
            "max_request_dtos": MAX_DTOS,
            "max_recv_iov": MAX_IOV,
            "max_request_iov": MAX_IOV,
            "max_rdma_read_in": MAX_RDMA_READ,
            "max_rdma_read_out": MAX_RDMA_READ,
            "max_rdma_read_iov": MAX_IOV,
            "max_rdma_write_iov": MAX_IOV,
            "max_message_size": MAX_MESSAGE_SIZE,
            "max_rdma_size": MAX_MESSAGE_SIZE,
        }
        for name, limit in limits.items():
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= limit:
                raise DatInvalidParameter(
                    DatReturnSubtype.INVALID_ARG6, f"{name}={value!r} outside 0..{limit}"
                )
        if self.service_type != ServiceType.RC:
            raise DatInvalidParameter(DatReturnSubtype.INVALID_ARG6, "only RC service is offered")


_EP_ATTR_NAMES = tuple(f.name for f in fields(EpAttr))


@dataclass(frozen=True)
class SrqAttr:
    """DAT_SRQ_ATTR: what dat_srq_create asks for."""

    max_recv_dtos: int
    max_recv_iov: int = 1
    low_watermark: int = 0  # DAT_SRQ_LW_DEFAULT


MAX_LMR_BLOCK: Final = 1 << 40
"""The largest LMR (and SHARED_VIRTUAL region) a consumer may register: max_lmr_block_size."""


def ia_attributes(
    adapter_name: str, address: str, lmr_sync_req: bool, limits: Limits
) -> dict[str, object]:
    """DAT_IA_ATTR and the provider attributes a dat_ia_query reports (the per-IA limits as
    the attributes that name them)."""
    return {
        "adapter_name": adapter_name,
        "vendor_name": "datfabric",
        "ia_address": address,
        "max_eps": limits.ia_eps,
        "max_dto_per_ep": MAX_DTOS,
        "max_rdma_read_per_ep_in": MAX_RDMA_READ,
        "max_rdma_read_per_ep_out": MAX_RDMA_READ,
        "max_evds": limits.ia_evds,
        "max_evd_qlen": 1 << 20,
        "max_iov_segments_per_dto": MAX_IOV,
        "max_lmrs": limits.ia_lmrs,
        "max_lmr_block_size": min(MAX_LMR_BLOCK, limits.ia_bytes),
        "max_pzs": limits.ia_pzs,
        "max_message_size": MAX_MESSAGE_SIZE,
        "max_rdma_size": MAX_MESSAGE_SIZE,
        "max_rmrs": limits.ia_rmrs,
        "max_srqs": limits.ia_srqs,
        "max_ep_per_srq": limits.ia_eps,
        "max_recv_per_srq": MAX_DTOS,
        "max_private_data_size": limits.private_data,
        "optimal_buffer_alignment": 256,
        "lmr_sync_req": lmr_sync_req,
        "iov_ownership_on_return": IovOwnership.CONSUMER,  # local_iov is copied at post
        "extension_supported": Extension.IB,  # dat_ib_extensions.h: atomics, immediate data
        "extension_version": IB_EXTENSION_VERSION,
        "provider_specific_attr": dict(IB_EXTENSION_ATTRS),
    }


IB_EXTENSION_ATTRS: Final = (
    ("DAT_IB_FETCH_AND_ADD", "TRUE"),
    ("DAT_IB_CMP_AND_SWAP", "TRUE"),
    ("DAT_IB_IMMED_DATA", "TRUE"),
)
"""The provider-specific attributes programs probe for the IB extension operations (the names
of dat_ib_extensions.h's DAT_IB_ATTR_*); UD, counters and collectives are not offered."""


def provider_attributes(ia: dict[str, object], name: str) -> dict[str, object]:
    """DAT_PROVIDER_ATTR as both drivers report it (libdatfabric's attrs.c fills the same
    fields), from the attributes the daemon reports (``ia``: dat_ia_query's reply) and the
    name the IA was opened by."""
    return {
        "provider_name": name,
        "provider_version_major": 2,
        "provider_version_minor": 0,
        "dapl_version_major": VERSION_MAJOR,
        "dapl_version_minor": VERSION_MINOR,
        "lmr_mem_types_supported": MemType.VIRTUAL | MemType.LMR | MemType.SHARED_VIRTUAL,
        "iov_ownership_on_return": IovOwnership.CONSUMER,
        "dat_qos_supported": Qos.BEST_EFFORT,
        "completion_flags_supported": CompletionFlags.DEFAULT,
        "is_thread_safe": False,
        "max_private_data_size": ia.get("max_private_data_size", 0),
        "supports_multipath": False,
        "ep_creator": EpCreatorForPsp.IFASKED,
        "pz_support": PzSupport.UNIQUE,
        "optimal_buffer_alignment": ia.get("optimal_buffer_alignment", 256),
        "ep_recv_info_supported": True,  # dat_ep_recv_query answers both counts
        "lmr_sync_req": bool(ia.get("lmr_sync_req", False)),
        "dto_async_return_guaranteed": True,
        "rdma_write_for_rdma_read_req": False,
        "rmr_scope_supported": RmrScope.ANY,  # dat_rmr_create (PZ) and _create_for_ep (EP)
        "is_signal_safe": False,
        "ha_supported": False,
        "ha_loadbalancing": HaLb.NONE,
        "provider_specific_attr": dict(IB_EXTENSION_ATTRS),
    }


PROVIDER_FIELDS: Final = tuple(provider_attributes({}, ""))
"""The names of DAT_PROVIDER_ATTR's fields (dat_ia_query's provider_attr)."""
