"""The `openmetrics` source: a saved OpenMetrics / Prometheus text file (`.om`, `.om.gz`,
`.prom`) -> gpu_samples, host_samples and (as the Prometheus source) jobs from labels or pods.

Parsed by `openmetrics_parse` and turned into rows by the same builders as the Prometheus source
(`rows.gpu_rows` / `host_rows`); the demo loads the bundled sample this way, with no server.
Re-loading a file replaces its time range.

A file of any size is read in bounded memory: the exposition format groups samples by series, and
a GPU row needs several metric families that lie far apart in the file, so the file is read once
to check its bounds and its end (`files.text_tail`: `[files]` limits, `# EOF`), then block by
block (`files.text_blocks`): each block is parsed (`TextParser`, state carried across blocks) and
its samples of the families gpuwaste reads staged on disk by UTC day (`ingest.staging`). Then a
day at a time the staged samples become rows (the counters' last sample before the day carried
over for the CPU deltas), staged too; only when the whole file is read, each day's rows replace
that day's part of the file's range. An error before that (a bound, a line that is not text, a
file cut short) leaves the warehouse as it was; rows and refused records are those of reading the
file in one piece. Refused records are staged too, and merged into the quarantine by DuckDB (a
file of garbage is millions of them). The samples of each block are one frame
(`samples_frame`) before they are staged: a check of samples applies there, block by block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import (
    ClusterConfig,
    FileLimits,
    PrometheusLabels,
    PrometheusSource,
    Settings,
)
from gpuwaste.dialects import Dialect, dialect
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import CHUNK_BYTES, text_blocks, text_tail
from gpuwaste.ingest.gpu_indices import fill_unknown_gpus
from gpuwaste.ingest.job_local_gpus import JobLocalPlacer
from gpuwaste.ingest.job_precedence import (
    OPENMETRICS_KUBE_KEY,
    OPENMETRICS_SPANS_KEY,
    OPENMETRICS_TELEMETRY_KEY,
    TELEMETRY_KEY,
    label_jobs_wanted,
)
from gpuwaste.ingest.prometheus import kube, telemetry_jobs
from gpuwaste.ingest.prometheus.dialect_choice import (
    DialectAbsent,
    LeftOut,
    choose,
    keep_preferred,
    telemetry_note,
)
from gpuwaste.ingest.prometheus.openmetrics_parse import Chunk, TextParser, samples_frame
from gpuwaste.ingest.prometheus.parse import SAMPLE_SCHEMA, SeriesSet
from gpuwaste.ingest.prometheus.rows import (
    ALL_GPU_METRICS,
    HOST_METRICS,
    NODE_CPU,
    gpu_rows,
    host_of,
    host_rows,
    labels_for,
    none_read,
)
from gpuwaste.ingest.prometheus.source import scheduler_configured
from gpuwaste.ingest.staging import (
    day_window,
    read_day,
    replace_by_day,
    stage,
    staged_days,
    staging_folder,
)
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import Refused, set_watermark, write_quarantine_staged
from gpuwaste.warehouse.store import Warehouse

OPENMETRICS = "openmetrics"
FORMAT = "OpenMetrics"
# Families staged apart: a day's GPU rows and host rows are built one after the other.
_GROUPS = (("gpu", ALL_GPU_METRICS), ("host", HOST_METRICS), ("kube", kube.KUBE_METRICS))
_EVER = (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC))
_REFUSED_SCHEMA = {"location": pl.String, "reason": pl.String, "raw": pl.String}
RAW_KEPT = 4096  # characters of a refused record's text that the quarantine keeps


@dataclass
class _Read:
    """What reading the whole file gave, besides the staged samples."""

    lines: int = 0
    first_refused: Refused | None = None
    parts: int = 0  # blocks staged
    samples: dict[int, int] = field(default_factory=dict)  # samples per global series id


class _Refusals:
    """Refused records of a run, held up to 16 MiB and then staged on disk (a file may be
    mostly garbage: 200 MB of it are 2.8 M records), `raw` cut to the 4,096 characters the
    quarantine keeps; counted by reason, and the first `FIRST` of them kept as examples."""

    FIRST = 1000
    HOLD_BYTES = 16 << 20

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.first: list[Refused] = []
        self.by_reason: dict[str, int] = {}
        self._parts: list[Path] = []
        self._held: list[tuple[str, str, str]] = []
        self._bytes = 0

    def add(self, refused: Sequence[Refused]) -> None:
        if len(self.first) < self.FIRST:
            self.first.extend(refused[: self.FIRST - len(self.first)])
        for r in refused:
            raw = r.raw[:RAW_KEPT]
            self._held.append((r.location, r.reason, raw))
            self._bytes += len(r.location) + len(r.reason) + len(raw) + 100
            key = r.reason.split(":", 1)[0]
            self.by_reason[key] = self.by_reason.get(key, 0) + 1
        if self._bytes > self.HOLD_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"part-{len(self._parts):06d}.parquet"
            pl.DataFrame(self._held, schema=_REFUSED_SCHEMA, orient="row").write_parquet(path)
            self._parts.append(path)
            self._held, self._bytes = [], 0

    def parts(self) -> list[Path]:
        """Every record, staged: the files in the order the records were added."""
        self._flush()
        return list(self._parts)


def _stage_file(
    path: Path,
    parser: TextParser,
    folder: Path,
    refusals: _Refusals,
    limits: FileLimits,
    chunk_bytes: int,
) -> _Read:
    """Parse the file block by block; stage each block's samples by group of families
    (`_GROUPS`) and day under `folder`."""
    read = _Read()
    group_of: list[int] = []  # by global series id
    for first, lines in text_blocks(path, FORMAT, limits, chunk_bytes):
        chunk = parser.feed(lines, first)
        read.lines = first + len(lines) - 1
        del lines
        if chunk.refused:
            if read.first_refused is None:
                read.first_refused = chunk.refused[0]
            refusals.add(chunk.refused)
        if not chunk.sids:
            continue
        for name in parser.series_metric[len(group_of) :]:
            group_of.append(next(i for i, g in enumerate(_GROUPS) if name in g[1]))
        samples = samples_frame(chunk)
        del chunk
        for sid, n in samples.group_by("sid").len().iter_rows():
            read.samples[sid] = read.samples.get(sid, 0) + n
        group = pl.Series(group_of, dtype=pl.UInt8).gather(samples["sid"])
        for i, (name, _) in enumerate(_GROUPS):
            stage(samples.filter(group == i), folder / name, read.parts)
        read.parts += 1
    return read


@dataclass
class _Family:
    """The series of one family read, in order of first appearance (their local ids)."""

    labels: list[dict[str, str]]
    samples: list[int]  # samples per series in the whole file


def _families(parser: TextParser, read: _Read) -> tuple[dict[str, _Family], pl.DataFrame]:
    """Each family's series, and a frame global sid -> (family index, local sid)."""
    fams: dict[str, _Family] = {}
    index: dict[str, int] = {}
    code: list[int] = []
    local: list[int] = []
    for sid, (name, labels) in enumerate(
        zip(parser.series_metric, parser.series_labels, strict=True)
    ):
        fam = fams.get(name)
        if fam is None:
            fam = fams[name] = _Family([], [])
            index[name] = len(index)
        code.append(index[name])
        local.append(len(fam.labels))
        fam.labels.append(labels)
        fam.samples.append(read.samples.get(sid, 0))
    lookup = pl.DataFrame(
        {"fam": code, "local": local}, schema={"fam": pl.UInt32, "local": pl.UInt32}
    )
    return fams, lookup


def _day_sets(
    samples: pl.DataFrame | None,
    fams: dict[str, _Family],
    lookup: pl.DataFrame,
    names: Sequence[str],
) -> dict[str, SeriesSet]:
    """A day's staged samples of the families `names` -> series by family (every series of the
    family, the day's samples in file order)."""
    names = [n for n in fams if n in names]
    if samples is None or samples.height == 0:
        empty = pl.DataFrame(schema=SAMPLE_SCHEMA)
        return {n: SeriesSet(fams[n].labels, empty) for n in names}
    keyed = samples.with_columns(
        lookup["fam"].gather(samples["sid"]).alias("fam"),
        lookup["local"].gather(samples["sid"]).alias("sid"),
    )
    del samples
    out: dict[str, SeriesSet] = {}
    for name in names:
        fam = list(fams).index(name)
        frame = keyed.filter(pl.col("fam") == fam).select("sid", "ts", "value", "text")
        out[name] = SeriesSet(fams[name].labels, frame.cast(SAMPLE_SCHEMA))
    return out


def _with_carry(s: SeriesSet, carry: pl.DataFrame) -> tuple[SeriesSet, pl.DataFrame]:
    """The counters' samples of a day with, first, each series' last readable sample before it
    (the CPU delta of a day's first scrape is taken from it, as in one piece); and the new carry."""
    v = pl.col("value")
    good = s.samples.filter(v.is_not_null() & v.is_finite() & (v >= 0))
    both = pl.concat([carry, good])
    last = (
        both.with_row_index("_i")
        .sort(["sid", "ts", "_i"], descending=[False, True, False])
        .unique(subset=["sid"], keep="first", maintain_order=True)
        .drop("_i")
    )
    return SeriesSet(s.labels, pl.concat([carry, s.samples])), last


def _series_refused(
    fams: dict[str, _Family],
    labels: PrometheusLabels,
    counts: dict[str, list[int]],
    chosen: list[Dialect],
) -> list[Refused]:
    """The series that cannot be read (no host, no GPU index, unusable MIG labels), refused once
    for the whole file with their samples in it. The builders judge a series by its labels, and
    refuse the host series only of families that have samples: one readable sample stands for a
    family's samples (the rows it gives are not kept)."""
    one = pl.DataFrame(
        {"sid": [0], "ts": [0], "value": [0.0], "text": ["0"]},
        schema={"sid": pl.UInt32, "ts": pl.Int64, "value": pl.Float64, "text": pl.String},
    ).cast(SAMPLE_SCHEMA)
    sets = {n: SeriesSet(f.labels, one if any(f.samples) else one.clear()) for n, f in fams.items()}
    refused: list[Refused] = []
    for d in chosen:
        gpu = gpu_rows(sets, labels, source=OPENMETRICS, series_samples=counts, dialect=d)
        refused += gpu.refused
    return refused + host_rows(sets, labels, source=OPENMETRICS).refused


def ingest_openmetrics(
    settings: Settings,
    cluster: ClusterConfig,
    path: Path,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    telemetry: str | None = None,
    host: str | None = None,
) -> IngestResult:
    """Load one text file; re-loading it replaces its time range (source `openmetrics`).

    `telemetry` names the dialect (default: the cluster's, else recognised from the families);
    `host` is the host of series without a host label (default: the source's `host`)."""
    limits = settings.files
    openmetrics = text_tail(path, FORMAT, limits).endswith("# EOF")
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    prom = cluster.prometheus
    kube_on = prom is not None and prom.kubernetes.enabled
    named = telemetry or cluster.telemetry
    how = "--telemetry" if telemetry else "configured" if named else "recognised from its series"
    if host is None and cluster.openmetrics is not None:
        host = cluster.openmetrics.host
    gpu_families = dialect(named).families() if named else ALL_GPU_METRICS
    read_families = {*gpu_families, *HOST_METRICS, *(kube.KUBE_METRICS if kube_on else ())}
    parser = TextParser(
        openmetrics=openmetrics, location=str(path), default_ts=mtime, metrics=read_families
    )
    labels = prom.labels if prom else PrometheusLabels()
    times = TimeBounds.at(datetime.now(UTC), settings.ingest)  # a file's "now": this run
    wh = Warehouse(settings.data_dir)
    result = IngestResult(source=OPENMETRICS, cluster=cluster.name)
    with staging_folder(settings.data_dir, OPENMETRICS) as staged:
        refusals = _Refusals(staged / "refused")
        read = _stage_file(path, parser, staged / "samples", refusals, limits, chunk_bytes)
        if not parser.names:
            if read.first_refused is not None:
                raise IngestError(
                    f"{path} is not OpenMetrics text: none of its {read.lines} lines is a sample "
                    f"(first refused: line {read.first_refused.location.rsplit(':', 1)[-1]})."
                )
            raise IngestError(f"{path} holds no metric samples.")
        try:
            chosen = choose(named, parser.names)
        except DialectAbsent as exc:
            raise IngestError(f"{path} {exc}; nothing was written.") from None
        if not chosen and not parser.names & set(HOST_METRICS):
            held = none_read(sorted(parser.names), at_least=parser.names_capped)
            raise IngestError(f"{path} holds {held}; nothing was written.")
        _give_host(path, parser, chosen, labels, host)
        jobs_wanted = not scheduler_configured(cluster) and label_jobs_wanted(wh, cluster.name)
        placer = (
            JobLocalPlacer.from_warehouse(wh, cluster.name)
            if any(d.gpu_is_job_local for d in chosen)
            else None
        )
        built = _build_rows(
            staged, parser, read, labels, refusals, jobs_wanted, prom, times, chosen, placer
        )
        bounds = built.bounds
        if bounds is not None:
            for name in ("gpu_samples", "host_samples"):
                result.written[name] = replace_by_day(
                    wh, name, cluster.name, staged / name, bounds, OPENMETRICS
                )
        write_quarantine_staged(
            wh, cluster.name, OPENMETRICS, path.name, refusals.parts(), staged / "merge"
        )
        if jobs_wanted and built.spans is not None and built.spans.height:
            kube_sets = _kube_sets(staged / "samples" / "kube", parser) if kube_on else {}
            _openmetrics_jobs(wh, cluster, built.spans, built.newest, kube_sets)
    if bounds is not None:
        fill_unknown_gpus(wh, cluster.name, *bounds)
        set_watermark(wh, cluster.name, OPENMETRICS, bounds[1], {"file": str(path)})
    result.accepted = built.accepted
    result.refused = refusals.first
    result.refused_by_reason = refusals.by_reason
    result.note = f"{path.name}" + telemetry_note(chosen, how, built.left_out)
    if placer is not None:
        result.note += placer.note()
    return result


def _give_host(
    path: Path,
    parser: TextParser,
    chosen: list[Dialect],
    labels: PrometheusLabels,
    host: str | None,
) -> None:
    """Series without a host label take `host` (a single host's scrape saved to a file: its
    series have no `instance`, which Prometheus adds when it scrapes). Without `host`, a file
    whose GPU series all lack one is refused in one sentence, before anything is written."""
    names = [labels, *(labels_for(d, labels) for d in chosen)]

    def hostless(lb: dict[str, str]) -> bool:
        return all(host_of(lb, n) is None for n in names)

    markers = {m for d in chosen for m in d.markers()}
    if host is None:
        gpu = [
            lb
            for m, lb in zip(parser.series_metric, parser.series_labels, strict=True)
            if m in markers
        ]
        if gpu and all(hostless(lb) for lb in gpu):
            tried = sorted({*(h for n in names for h in n.host), "nodename", "instance"})
            what = " and ".join(d.name for d in chosen)
            raise IngestError(
                f"{path} holds {what} GPU series without a host label ({', '.join(tried)}): "
                "a single host's scrape is read with --host NAME; nothing was written."
            )
        return
    for i, lb in enumerate(parser.series_labels):
        if hostless(lb):
            parser.series_labels[i] = {**lb, "nodename": host}


@dataclass
class _Built:
    """Rows of the whole file, staged by day (`<staged>/gpu_samples`, `.../host_samples`)."""

    bounds: tuple[datetime, datetime] | None
    accepted: int
    spans: pl.DataFrame | None
    newest: datetime | None
    left_out: LeftOut


def _build_rows(
    staged: Path,
    parser: TextParser,
    read: _Read,
    labels: PrometheusLabels,
    refusals: _Refusals,
    jobs_wanted: bool,
    prom: PrometheusSource | None,
    times: TimeBounds,
    chosen: list[Dialect],
    placer: JobLocalPlacer | None = None,
) -> _Built:
    """Day by day: staged samples -> gpu and host rows (times `times` does not believe refused),
    staged; their bounds, count and spans. `placer` gives job-local GPU indices their devices."""
    fams, lookup = _families(parser, read)
    counts = {name: f.samples for name, f in fams.items()}
    interval = prom.scrape_interval_s if prom else 15.0
    carry = pl.DataFrame(schema=SAMPLE_SCHEMA)
    lo: datetime | None = None
    hi: datetime | None = None
    accepted = 0
    spans: pl.DataFrame | None = None
    newest: datetime | None = None  # of the GPU rows: running jobs are judged by it
    samples = staged / "samples"
    gpu_dir, host_dir = samples / "gpu", samples / "host"
    staged_on: list[str] = sorted({*staged_days(gpu_dir), *staged_days(host_dir)})
    days: list[str | None] = [*staged_on] or [None]
    # a series that cannot be read is refused once, not once a day
    refusals.add(_series_refused(fams, labels, counts, chosen))
    left_out = LeftOut()
    for i, day in enumerate(days):
        day_samples = _read(gpu_dir, day)
        frames: list[tuple[Dialect, pl.DataFrame]] = []
        for d in chosen:
            sets = _day_sets(day_samples, fams, lookup, d.families())
            gpu = gpu_rows(
                sets, labels, source=OPENMETRICS, dialect=d, refuse_series=False, times=times
            )
            del sets
            refusals.add(gpu.refused)
            placed = placer.place(gpu.frame) if placer and d.gpu_is_job_local else gpu.frame
            frames.append((d, placed))
            del gpu
        del day_samples
        gpu_frame = keep_preferred(frames, left_out) if frames else None
        del frames
        if jobs_wanted and gpu_frame is not None and gpu_frame.height:
            b = gpu_frame["ts"].max()
            assert isinstance(b, datetime)
            newest = b if newest is None else max(newest, b)
            new = telemetry_jobs.spans_from_samples(gpu_frame, interval)
            spans = new if spans is None else telemetry_jobs.merge_spans(spans, new)
        stats = []
        if gpu_frame is not None:
            stats.append(_stage_rows(gpu_frame, staged / "gpu_samples", i))
        del gpu_frame
        sets = _day_sets(_read(host_dir, day), fams, lookup, HOST_METRICS)
        if NODE_CPU in sets:
            sets[NODE_CPU], carry = _with_carry(sets[NODE_CPU], carry)
        # the carried samples are before the day: no row of theirs is the day's
        window = day_window(day, *_EVER) if day is not None else None
        host = host_rows(
            sets, labels, source=OPENMETRICS, window=window, refuse_series=False, times=times
        )
        del sets
        refusals.add(host.refused)
        stats.append(_stage_rows(host.frame, staged / "host_samples", i))
        del host
        for n, a, b in stats:
            if n:
                assert a is not None and b is not None
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
                accepted += n
    bounds = None if lo is None or hi is None else (lo, hi + timedelta(microseconds=1))
    return _Built(bounds, accepted, spans, newest, left_out)


def _read(folder: Path, day: str | None) -> pl.DataFrame | None:
    return read_day(folder, day) if day is not None else None


def _stage_rows(
    frame: pl.DataFrame, folder: Path, part: int
) -> tuple[int, datetime | None, datetime | None]:
    """Stage a day's rows; (rows, first ts, last ts)."""
    if frame.height == 0:
        return 0, None, None
    a, b = frame["ts"].min(), frame["ts"].max()
    assert isinstance(a, datetime) and isinstance(b, datetime)
    stage(frame, folder, part)
    return frame.height, a, b


def _kube_sets(folder: Path, parser: TextParser) -> dict[str, SeriesSet]:
    """The kube-state-metrics series of the whole file (pods are few beside the samples)."""
    days = staged_days(folder)
    frames = [f for d in days if (f := read_day(folder, d)) is not None]
    samples = pl.concat(frames) if frames else samples_frame(Chunk([], [], [], []))
    kube_sids = [i for i, m in enumerate(parser.series_metric) if m in kube.KUBE_METRICS]
    samples = samples.filter(pl.col("sid").is_in(kube_sids))
    return {k: v for k, v in parser.series_sets(samples).items() if k in kube.KUBE_METRICS}


def _openmetrics_jobs(
    wh: Warehouse,
    cluster: ClusterConfig,
    spans: pl.DataFrame,
    newest: datetime | None,
    kube_sets: dict[str, SeriesSet],
) -> None:
    """Jobs from the file's labels (or its kube-state-metrics series), written while no
    scheduler source is configured or stored for the cluster (the caller checks:
    job_precedence); `spans` of the whole file, `newest` its newest GPU row."""
    prom = cluster.prometheus
    interval = prom.scrape_interval_s if prom else 15.0
    wh.replace_file("job_gpus", cluster.name, OPENMETRICS_SPANS_KEY, spans)
    assert newest is not None
    slack = timedelta(seconds=3 * interval)
    if prom is not None and prom.kubernetes.enabled:
        jobs = kube.pods_to_jobs(kube_sets, prom.kubernetes, newest=newest, running_slack=slack)
        wh.replace_file("jobs", cluster.name, OPENMETRICS_KUBE_KEY, jobs)
    else:
        jobs = telemetry_jobs.jobs_from_spans(
            spans, newest=newest, running_slack=slack, source=TELEMETRY_KEY
        )
        wh.replace_file("jobs", cluster.name, OPENMETRICS_TELEMETRY_KEY, jobs)


def run_openmetrics(
    settings: Settings, cluster: ClusterConfig, options: RunOptions
) -> IngestResult:
    """The configured file of `cluster` (its runner in `ingest.sources`)."""
    assert cluster.openmetrics is not None
    return ingest_openmetrics(
        settings, cluster, cluster.openmetrics.file, telemetry=options.telemetry
    )
