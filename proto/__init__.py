"""The formats the daemon and its drivers share: frames, the host interface, event entries."""

from proto import native

native.steer()  # before any of proto's and fabricd's native modules is imported
