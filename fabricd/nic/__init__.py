"""The simulated NIC: the daemon's pure core, a hub (``hub.Nic``) and its rooms.

It does no I/O: the asyncio shell (or the in-memory harness) hands it frames and channels, and
it acts through the injected ``Shell`` (timers, outgoing connections, the clock) and ``Channel``
objects (send a header plus payload views, close). docs/architecture.md walks through the rooms.
"""

from fabricd.nic.hub import Nic
from fabricd.nic.objects import Channel, Consumer, PeerLink, Shell, Timer

__all__ = ["Channel", "Consumer", "Nic", "PeerLink", "Shell", "Timer"]
