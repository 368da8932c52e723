"""Which telemetry dialects a source is read in, and which one a GPU's rows come from (pure).

The dialect is named (`telemetry = NAME` on the cluster, `--telemetry NAME`, the flag first) or
recognised from the metric families the source holds (`dialects.present`: each dialect's marker
series). A named dialect that the source does not hold is an error, one sentence naming the
dialect, the series looked for and the families present, before anything is written.

A source may hold several dialects (a host running both the DCGM exporter and nvidia-smi's):
each is read, and where two give the same GPU, the first in `dialects.DIALECTS` (the richer:
dcgm, jobstats, amd, slurm-job-exporter, nvidia-smi) is kept and the other's samples of that GPU
are left out and counted. The same GPU: the same host and GPU index, or the same uuid; a dialect
whose index is the job's own (slurm-job-exporter) cannot be matched by index, so any GPU of a
host that a preferred dialect gives leaves out its rows of that host.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import polars as pl

from gpuwaste.dialects import DEFAULT, Dialect, dialect, present


class DialectAbsent(ValueError):
    """A named dialect is not among the source's series (the message is the sentence's end)."""


def _shown(names: Collection[str], limit: int = 8) -> str:
    shown = sorted(names)
    more = len(shown) - limit
    return ", ".join(shown[:limit]) + (f" and {more} more" if more > 0 else "")


def choose(named: str | None, families: Collection[str]) -> list[Dialect]:
    """The dialects to read, in order of preference: the named one (DialectAbsent when none of
    its marker series is present), else every one recognised (possibly none)."""
    names = set(families)
    if named is None:
        return present(names)
    d = dialect(named)
    if not any(m in names for m in d.markers()):
        held = f"holds {_shown(names)}" if names else "holds no metric family"
        raise DialectAbsent(
            f"holds no {d.name} telemetry ({d.title}): looked for {', '.join(d.markers())}, "
            f"and it {held}"
        )
    return [d]


@dataclass
class LeftOut:
    """What a less preferred dialect gave for GPUs a preferred one gives, over a run."""

    devices: dict[str, set[tuple[str, int | None, str | None]]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, dropped: pl.DataFrame) -> None:
        if dropped.height == 0:
            return
        found = self.devices.setdefault(name, set())
        found.update(dropped.select("host", "gpu", "uuid").unique().iter_rows())
        self.samples[name] = self.samples.get(name, 0) + dropped.height

    def note(self, kept: Sequence[Dialect]) -> str:
        """The summary's words for it ("" when nothing was left out)."""
        if not self.samples:
            return ""
        first = kept[0].name if kept else "the preferred dialect"
        parts = [
            f"{name}'s {n:,} sample(s) of {len(self.devices[name])} GPU(s) that {first} also "
            "gives were left out"
            for name, n in self.samples.items()
        ]
        return "; ".join(parts)


def keep_preferred(
    frames: Sequence[tuple[Dialect, pl.DataFrame]], left_out: LeftOut
) -> pl.DataFrame:
    """`gpu_samples` rows of each dialect (in order of preference) -> one frame, each GPU's rows
    from the first dialect that gives it (see the module docstring); the others counted."""
    if len(frames) == 1:
        return frames[0][1]
    kept: list[pl.DataFrame] = []
    by_index: set[tuple[str, int]] = set()
    by_uuid: set[str] = set()
    hosts: set[str] = set()
    for d, frame in frames:
        if frame.height == 0:
            continue
        if kept:
            same = pl.col("uuid").is_in(list(by_uuid)).fill_null(False)
            if d.gpu_is_job_local:
                same = same | pl.col("host").is_in(list(hosts))
            else:
                pairs = pl.DataFrame(
                    list(by_index), schema={"host": pl.String, "gpu": pl.Int16}, orient="row"
                ).with_columns(pl.lit(True).alias("_seen"))
                frame = frame.join(pairs, on=["host", "gpu"], how="left", maintain_order="left")
                same = same | pl.col("_seen").fill_null(False)
            left_out.add(d.name, frame.filter(same))
            frame = frame.filter(~same)
            if "_seen" in frame.columns:
                frame = frame.drop("_seen")
        kept.append(frame)
        by_index.update(frame.select("host", "gpu").unique().iter_rows())
        by_uuid.update(u for u in frame["uuid"].unique().to_list() if u is not None)
        hosts.update(frame["host"].unique().to_list())
    if not kept:
        return frames[0][1]
    return pl.concat(kept) if len(kept) > 1 else kept[0]


def telemetry_note(chosen: Sequence[Dialect], how: str, left_out: LeftOut) -> str:
    """The summary line's words on the dialects read: nothing for DCGM alone (the default, as
    before dialects), else "; telemetry NAME (how)" and what was left out."""
    if list(chosen) in ([], [DEFAULT]) and not left_out.samples:
        return ""
    note = f"; telemetry {' and '.join(d.name for d in chosen)} ({how})"
    extra = left_out.note(chosen)
    return f"{note}; {extra}" if extra else note
