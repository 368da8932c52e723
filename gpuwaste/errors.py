"""The one base class of errors meant for the operator: the CLI prints them as one sentence."""


class GpuwasteError(Exception):
    """An error whose message is a complete sentence naming what and where; no traceback."""


class MachineError(GpuwasteError):
    """The machine, not the data, stops a batch (a temporary folder that cannot be written): the
    batch fails as a whole, instead of its jobs being tried apart."""


class DamagedFileError(GpuwasteError):
    """A warehouse file that cannot be read (`warehouse.damaged`): a batch that meets one fails
    as a whole, instead of its jobs being tried apart (every job of those days would fail)."""


class WarehouseError(GpuwasteError):
    """A warehouse read or write failed; the message names the path and the cause."""


class DiskError(WarehouseError, MachineError):
    """A write the disk refused: full, over its quota, or read-only (`warehouse.disk`). The
    message names the disk and the folder. A batch that meets one fails as a whole, and analyze
    stops at it: every other job, batch and cluster would meet the same disk."""
