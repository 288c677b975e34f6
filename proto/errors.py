"""Exceptions: the DatError tree (one subclass per DAT_RETURN_TYPE) and the wire-protocol tree.

A DatError carries a DAT_RETURN subtype and converts to and from the numeric DAT_RETURN, so the
daemon can send ``code`` and the client can rebuild the exception with ``error_from_code``.
ProtocolError is unrelated: a malformed frame is never reported as a DAT status.
"""

from __future__ import annotations

from typing import ClassVar

from proto.constants import (
    DAT_SUBTYPE_MASK,
    DAT_TYPE_MASK,
    DatReturnSubtype,
    DatReturnType,
    dat_error,
)

__all__ = [
    "DatAbort",
    "DatCommNotSupported",
    "DatConnQualInUse",
    "DatConnQualUnavailable",
    "DatError",
    "DatExtensionBase",
    "DatInsufficientResources",
    "DatInternalError",
    "DatInterruptedCall",
    "DatInvalidAddress",
    "DatInvalidHandle",
    "DatInvalidParameter",
    "DatInvalidState",
    "DatLengthError",
    "DatModelNotSupported",
    "DatNotImplemented",
    "DatPortInUse",
    "DatPrivilegesViolation",
    "DatProtectionViolation",
    "DatProviderAlreadyRegistered",
    "DatProviderInUse",
    "DatProviderNotFound",
    "DatQueueEmpty",
    "DatQueueFull",
    "DatReservedLmr",
    "DatTimeoutExpired",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "UnexpectedFrame",
    "VersionMismatch",
    "dat_strerror",
    "error_from_code",
]

_BY_TYPE: dict[DatReturnType, type[DatError]] = {}


class DatError(Exception):
    """A failed DAT call: ``TYPE`` (fixed per subclass) plus a subtype and a free-text message."""

    TYPE: ClassVar[DatReturnType]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "TYPE" in cls.__dict__:
            if cls.TYPE in _BY_TYPE:
                raise TypeError(f"two DatError classes for {cls.TYPE.name}")
            _BY_TYPE[cls.TYPE] = cls

    def __init__(
        self, subtype: DatReturnSubtype = DatReturnSubtype.NO_SUBTYPE, message: str = ""
    ) -> None:
        if not hasattr(type(self), "TYPE"):
            raise TypeError("DatError is abstract; raise one of its subclasses")
        super().__init__(subtype, message)  # args allow pickling: cls(*args)
        self._subtype = DatReturnSubtype(subtype)
        self.message = message

    @property
    def type(self) -> DatReturnType:
        """The DAT_RETURN_TYPE of this error."""
        return self.TYPE

    @property
    def subtype(self) -> DatReturnSubtype:
        """The DAT_RETURN_SUBTYPE carried by this error."""
        return self._subtype

    @property
    def code(self) -> int:
        """The full u32 DAT_RETURN: error class | type | subtype."""
        return dat_error(self.TYPE, self._subtype)

    def __str__(self) -> str:
        text = f"DAT_{self.TYPE.name}(DAT_{self._subtype.name})"
        return f"{text}: {self.message}" if self.message else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(DatReturnSubtype.{self._subtype.name}, {self.message!r})"


class DatAbort(DatError):
    """DAT_ABORT."""

    TYPE = DatReturnType.ABORT


class DatConnQualInUse(DatError):
    """DAT_CONN_QUAL_IN_USE."""

    TYPE = DatReturnType.CONN_QUAL_IN_USE


class DatInsufficientResources(DatError):
    """DAT_INSUFFICIENT_RESOURCES."""

    TYPE = DatReturnType.INSUFFICIENT_RESOURCES


class DatInternalError(DatError):
    """DAT_INTERNAL_ERROR."""

    TYPE = DatReturnType.INTERNAL_ERROR


class DatInvalidHandle(DatError):
    """DAT_INVALID_HANDLE."""

    TYPE = DatReturnType.INVALID_HANDLE


class DatInvalidParameter(DatError):
    """DAT_INVALID_PARAMETER."""

    TYPE = DatReturnType.INVALID_PARAMETER


class DatInvalidState(DatError):
    """DAT_INVALID_STATE."""

    TYPE = DatReturnType.INVALID_STATE


class DatLengthError(DatError):
    """DAT_LENGTH_ERROR."""

    TYPE = DatReturnType.LENGTH_ERROR


class DatModelNotSupported(DatError):
    """DAT_MODEL_NOT_SUPPORTED."""

    TYPE = DatReturnType.MODEL_NOT_SUPPORTED


class DatProviderNotFound(DatError):
    """DAT_PROVIDER_NOT_FOUND."""

    TYPE = DatReturnType.PROVIDER_NOT_FOUND


class DatPrivilegesViolation(DatError):
    """DAT_PRIVILEGES_VIOLATION."""

    TYPE = DatReturnType.PRIVILEGES_VIOLATION


class DatProtectionViolation(DatError):
    """DAT_PROTECTION_VIOLATION."""

    TYPE = DatReturnType.PROTECTION_VIOLATION


class DatQueueEmpty(DatError):
    """DAT_QUEUE_EMPTY."""

    TYPE = DatReturnType.QUEUE_EMPTY


class DatQueueFull(DatError):
    """DAT_QUEUE_FULL."""

    TYPE = DatReturnType.QUEUE_FULL


class DatTimeoutExpired(DatError):
    """DAT_TIMEOUT_EXPIRED; from dat_evd_wait it still reports ``nmore``."""

    TYPE = DatReturnType.TIMEOUT_EXPIRED
    nmore: int = 0


class DatProviderAlreadyRegistered(DatError):
    """DAT_PROVIDER_ALREADY_REGISTERED."""

    TYPE = DatReturnType.PROVIDER_ALREADY_REGISTERED


class DatProviderInUse(DatError):
    """DAT_PROVIDER_IN_USE."""

    TYPE = DatReturnType.PROVIDER_IN_USE


class DatInvalidAddress(DatError):
    """DAT_INVALID_ADDRESS."""

    TYPE = DatReturnType.INVALID_ADDRESS


class DatInterruptedCall(DatError):
    """DAT_INTERRUPTED_CALL."""

    TYPE = DatReturnType.INTERRUPTED_CALL


class DatConnQualUnavailable(DatError):
    """DAT_CONN_QUAL_UNAVAILABLE."""

    TYPE = DatReturnType.CONN_QUAL_UNAVAILABLE


class DatReservedLmr(DatError):
    """DAT_RESERVED_LMR (kDAPL only; here for completeness)."""

    TYPE = DatReturnType.RESERVED_LMR


class DatPortInUse(DatError):
    """DAT_PORT_IN_USE."""

    TYPE = DatReturnType.PORT_IN_USE


class DatCommNotSupported(DatError):
    """DAT_COMM_NOT_SUPPORTED."""

    TYPE = DatReturnType.COMM_NOT_SUPPORTED


class DatExtensionBase(DatError):
    """DAT_EXTENSION_BASE: the first type of the extension range (e.g. DAT_IB_ERR)."""

    TYPE = DatReturnType.EXTENSION_BASE


class DatNotImplemented(DatError):
    """DAT_NOT_IMPLEMENTED."""

    TYPE = DatReturnType.NOT_IMPLEMENTED


def error_from_code(code: int, message: str = "") -> DatError:
    """Rebuild the exception for a failed DAT_RETURN.

    Only the type bits choose the class (dapl sometimes omits the error class bit). An unknown
    subtype becomes NO_SUBTYPE; an unknown type becomes DatInternalError. A success code raises
    ValueError, since it is not an error.
    """
    code &= 0xFFFFFFFF
    type_bits = code & DAT_TYPE_MASK
    subtype_bits = code & DAT_SUBTYPE_MASK
    if type_bits == DatReturnType.SUCCESS:
        raise ValueError(f"0x{code:08X} is DAT_SUCCESS, not an error")
    try:
        subtype = DatReturnSubtype(subtype_bits)
    except ValueError:
        subtype = DatReturnSubtype.NO_SUBTYPE
        message = message or f"unknown subtype in DAT_RETURN 0x{code:08X}"
    try:
        cls = _BY_TYPE[DatReturnType(type_bits)]
    except (ValueError, KeyError):
        return DatInternalError(subtype, message or f"unknown DAT_RETURN 0x{code:08X}")
    return cls(subtype, message)


def dat_strerror(code: int) -> tuple[str, str]:
    """The (major, minor) strings of a DAT_RETURN, as dat_strerror returns them.

    Raises DatInvalidParameter (subtype INVALID_ARG1, the code) when the type or subtype is not
    one the header defines.
    """
    code &= 0xFFFFFFFF
    try:
        major = DatReturnType(code & DAT_TYPE_MASK)
        minor = DatReturnSubtype(code & DAT_SUBTYPE_MASK)
    except ValueError:
        raise DatInvalidParameter(
            DatReturnSubtype.INVALID_ARG1, f"unknown DAT_RETURN 0x{code:08X}"
        ) from None
    return f"DAT_{major.name}", f"DAT_{minor.name}"


class ProtocolError(Exception):
    """A wire-protocol failure; never a DAT status."""


class FrameTooLarge(ProtocolError):
    """A frame header announced more bytes than the size limit allows."""


class MalformedFrame(ProtocolError):
    """A frame could not be decoded or lacks required fields."""


class VersionMismatch(ProtocolError):
    """The peer's HELLO announced a protocol version we do not speak."""


class UnexpectedFrame(ProtocolError):
    """A well-formed frame arrived where the protocol state does not allow it."""


class ResourceRefused(ProtocolError):
    """A new connection past one of the daemon's limits (proto.limits)."""


class PeerRefused(ProtocolError):
    """A peer daemon did not prove the cluster key (or proved it wrongly)."""
