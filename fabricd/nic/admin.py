"""The admin surface: fault rules and their log, revoking a key, crashing, node status."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fabricd.faults import FaultEngine
from fabricd.memory import MemoryRegistry
from fabricd.nic.objects import Consumer, Shell
from fabricd.nic.wire import Wire
from proto import calls
from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInvalidParameter
from proto.faultrules import Rule
from proto.schema import Empty

log = logging.getLogger("fabricd")


class Admin:
    """Admin calls (fabricctl fault | node, client.faults)."""

    def __init__(
        self,
        faults: FaultEngine,
        wire: Wire,
        memory: MemoryRegistry,
        shell: Shell,
        status: Callable[[], dict[str, object]],
    ) -> None:
        self.faults = faults
        self.wire = wire
        self.memory = memory
        self.shell = shell
        self.status = status

    def fault_add(self, consumer: Consumer, a: calls.FaultAdd) -> calls.RuleCount:
        """Install rules (in force when the call returns), reseeding the engine first."""
        if a.seed is not None:
            self.faults.seed = a.seed
        try:
            parsed = [Rule.from_json(r) for r in a.rules]
        except (TypeError, ValueError) as err:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"bad fault rule: {err}") from None
        for rule in parsed:
            self.faults.add(rule, self.shell.now())
            log.info("fault rule %s installed: %s", rule.name, rule.to_json())
        return calls.RuleCount(len(self.faults.rules))

    def fault_remove(self, consumer: Consumer, a: calls.FaultRemove) -> calls.RuleCount:
        """Remove one rule by name."""
        if not self.faults.remove(a.name):
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"no fault rule {a.name!r}")
        return calls.RuleCount(len(self.faults.rules))

    def fault_clear(self, consumer: Consumer, a: Empty) -> calls.RuleCount:
        """Remove every rule; what delays held back goes out now."""
        self.faults.clear()
        self.wire.release_all()
        return calls.RuleCount(len(self.faults.rules))

    def fault_list(self, consumer: Consumer, a: Empty) -> calls.FaultRules:
        """The rules and the seed."""
        rules = [rule.to_json() for rule in self.faults.rules.values()]
        return calls.FaultRules(rules, self.faults.seed)

    def fault_log(self, consumer: Consumer, a: calls.FaultLog) -> calls.FaultLines:
        """The fault log (JSON lines), cleared after reading when asked."""
        lines = list(self.faults.log)
        if a.clear:
            self.faults.log.clear()
        return calls.FaultLines(lines)

    def rmr_revoke(self, consumer: Consumer, a: calls.RmrRevoke) -> Empty:
        """Revoke a remote key (of any consumer of this node): later accesses fail."""
        if not self.memory.revoke(a.rmr_context):
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"no rmr_context {a.rmr_context!r}")
        log.info("rmr_context %#x revoked", a.rmr_context)
        return Empty()

    def node_crash(self, consumer: Consumer, a: Empty) -> Empty:
        """Die at once, as a crashed node does."""
        log.warning("crash requested: the node dies now")
        self.shell.crash()
        return Empty()

    def node_status(self, consumer: Consumer, a: Empty) -> calls.Attributes:
        """Name, address, pid and counts of the node."""
        return calls.Attributes(self.status())
