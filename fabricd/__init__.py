import proto  # noqa: F401  # first: proto.native decides how the native modules load
