"""What a run shows while it works: a progress display on stderr, none with `--quiet`.

Every source shows one: the Prometheus source a bar of its windows (`window_progress`, left in
the log when it ends), the others a spinner per cluster and source with the time elapsed
(`source_progress`, shown by `ingest.run` on a terminal only, and gone when the source is done:
its summary line follows). stdout is left to the summary lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


def _stderr_console() -> Console:
    return Console(stderr=True)


def window_progress(quiet: bool) -> Progress:
    """A bar of windows done, with the samples fetched per second (field `rate`)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("windows  {task.fields[rate]}"),
        TimeElapsedColumn(),
        disable=quiet,
        transient=False,
        console=None if quiet else _stderr_console(),
    )


@contextmanager
def source_progress(description: str, quiet: bool) -> Iterator[None]:
    """`description` with a spinner and the time elapsed while the block runs, on a terminal;
    nothing is left behind (a log gets only the summary line that follows)."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TimeElapsedColumn(),
        disable=quiet,
        transient=True,
        console=None if quiet else _stderr_console(),
    )
    with progress:
        progress.add_task(description, total=None)
        yield
