"""The one base class of errors meant for the operator: the CLI prints them as one sentence."""


class GpuwasteError(Exception):
    """An error whose message is a complete sentence naming what and where; no traceback."""
