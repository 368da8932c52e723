"""Parse `sacct --parsable2` output into `jobs` rows and refused records. Pure: text in, rows out.

What real output contains, and what this parser does with it:

- **Delimiters**: `|` (the default), or any `--delimiter`, including multi-character ones such as
  `;|;` and `^|^`; detected from the first line unless given. `-p`/`--parsable` ends every line
  with the delimiter: one trailing empty field is dropped.
- **Header**: with one (the default), columns come from it; with none (`-n`), the caller passes
  the column list (the `--format` of the command that made the file), else the file is refused.
- **Steps** (`123.batch`, `123.extern`, `123.0`, `123_4.batch`, `123+1.0`) fold into their job:
  each step line counts as accepted; a step whose job row is absent makes the job from its steps
  (earliest start, latest end, the batch step's state, else the last step's).
- **Job ids**: `job_id` is JobIDRaw when the output has it (it is what `SLURM_JOB_ID`, hence the
  DCGM `hpc_job` label, holds: unique for every array task `123_4` and het component `123+0`),
  else the printed JobID; `slurm_job_id` is the JobID as printed (`123_4`, `123+1`). Steps fold
  by the printed id. A pending array `123_[5-9]` is a pending job (skipped).
- **States**: COMPLETED -> passed; CANCELLED (and `CANCELLED by 1234`), PREEMPTED, REVOKED ->
  killed; FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE -> unsuccessful;
  RUNNING, REQUEUED, SUSPENDED, COMPLETING and the other live states -> running; PENDING jobs
  held no GPU yet and are skipped (counted as accepted). The raw state is kept. **choice**:
  PREEMPTED counts as killed (ended from outside, not by its own failure).
- **Times** without a zone are in the cluster's time zone (configuration) and become UTC;
  `Unknown`, `None` and empty are null; all digits are epoch seconds (`SLURM_TIME_FORMAT=%s`).
  In the hour repeated when clocks go back, the reading of Start/End whose difference equals
  `Elapsed` is taken (when the output has that column), else the first occurrence unless the end
  would precede the start (`resolve_times`).
- **GPUs** from `AllocTRES` (`gres/gpu=4`; `gres/gpu:a100=4` summed over types when the untyped
  total is absent), else `AllocGRES` (`gpu:4`, `gpu:tesla:2`); where nothing was allocated (a
  job cancelled before it started) from `ReqTRES`, else `ReqGRES`, when the output has them; 0
  when the columns are there and name no GPU (a CPU-only job: it gets no `job_gpus` rows), null
  when no such column exists.
- **GPU type** (`gpu_type`): a MIG GRES type (`gres/gpu:1g.10gb=1`, `gres/gpu:a100_1g.5gb=1`,
  `gpu:nvidia_a100-sxm4-80gb_3g.40gb:1`) gives the job's `mig_profile` (and the model before it,
  if any); another type (`gres/gpu:a100=4`) gives the job's `gpu_model`. A job with several
  types gets neither. Slurm's indices of MIG devices do not name the parent GPU and instance, so
  a MIG job's devices come from the DCGM job labels of the instances' series.
- **Requeues** (`sacct --duplicates`/`-D`): a requeued job's runs are printed as job records
  under one JobID, one per run (the earlier ones in states such as REQUEUED, NODE_FAIL,
  PREEMPTED), each with its own Submit (Slurm resets it at a requeue), Start, End and NodeList.
  The run with the latest Submit (the file's order breaks a tie) is the job's row, with the
  earliest Submit as its submission; every run that started becomes an attempt (`attempts`,
  numbered 0, 1, ... in that order), so the earlier ones count as failed attempts and the waits
  between them as waits. Records with the same Start are one run printed twice (overlapping
  windows concatenated): the last printed stands. Without `-D`, sacct prints the last run
  alone: one attempt. A job whose last run is pending is skipped, as any pending job, until it
  runs again.
- **Encoding**: UTF-8; a byte-order mark before the header is skipped. A line with bytes that
  are not UTF-8 (a Latin-1 `é` in a job name) is refused alone: the caller decodes with
  `surrogateescape`, and such a line holds lone surrogates; its raw text keeps the bytes as
  `\xe9`.
- **Jobstats summaries** (`jobstats_summary`): an `AdminComment` column holding Princeton
  Jobstats' `JS1:` summary gives the job's per-GPU mean utilization and memory
  (`gpu_summaries`, one row per job x host x GPU minor number). Empty, `JS1:Short`, `JS1:None`
  and text of other tools give none. A summary that does not decode (bad base64, bad gzip, a
  gzip bomb past `[files] max_gzip_ratio`, not JSON, wrong shape, a GPU key that is not a minor
  number) is refused with its reason while its job is kept: the line counts as accepted and its
  summary as quarantined. A summary's node is named as NodeList names it (`gpu1.example.org` is
  `gpu1`); a node that is not the job's is refused, its GPUs left out.
- **Refused** (to quarantine, with file:line and reason): wrong field count, an unknown state,
  an unparseable time, a time no source believes (`ingest.times`: outside the warehouse's
  days, from the future, before `[ingest] earliest_time`; not checked for pending jobs, whose
  Start is a forecast), end before start, a negative GPU count, a bad host list, no job id, bytes
  that are not UTF-8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

import polars as pl

from gpuwaste.ingest.slurm_notation import (
    KILLED,
    PENDING,
    RUNNING,
    HostListError,
    expand_hostlist,
    map_state,
)
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.jobstats_summary import JobSummary, SummaryError, decode_summary
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.schema import UTC_TS

SOURCE = "slurm"
CANDIDATE_DELIMITERS = (";|;", "^|^", "|")

NULL_TIMES = frozenset({"", "Unknown", "None", "N/A", "(null)"})
_JOBID = re.compile(r"^(?P<job>\d+(?:_(?:\d+|\[[^\]]*\]))?(?:\+\d+)?)(?:\.(?P<step>.+))?$")
_DURATION = re.compile(
    r"^(?:(?P<d>\d+)-)?(?P<a>\d+):(?P<b>\d+(?:\.\d+)?)(?::(?P<c>\d+(?:\.\d+)?))?$"
)
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes kept by errors="surrogateescape"
_HEADER_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9:/_]*$")
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::(?P<type>[^=,]+))?=(?P<n>-?\d+)")
_GRES_GPU = re.compile(
    r"(?:^|,)gpu(?::(?P<type>[A-Za-z][^:,()]*|\d+g\.\d+gb[^:,()]*))?:(?P<n>-?\d+)"
)  # a type starts with a letter, or is a MIG profile (`gpu:1g.10gb:1`)

JOB_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "slurm_job_id": pl.String(),
    "user": pl.String(),
    "vc": pl.String(),
    "name": pl.String(),
    "state": pl.String(),
    "raw_state": pl.String(),
    "submit_ts": UTC_TS,
    "start_ts": UTC_TS,
    "end_ts": UTC_TS,
    "gpus": pl.Int32(),
    "is_debug": pl.Boolean(),
    "hosts": pl.List(pl.String()),
    "source": pl.String(),
    "mig_profile": pl.String(),
    "gpu_model": pl.String(),
    "exit_code": pl.Int32(),
    "exit_signal": pl.Int32(),
}

# The runs of a job printed more than once (`sacct --duplicates`: a requeue), one row per run
# that started; the job_gpus rows of each come from its own interval and hosts.
ATTEMPT_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "attempt": pl.Int16(),
    "submit_ts": UTC_TS,
    "start_ts": UTC_TS,
    "end_ts": UTC_TS,
    "state": pl.String(),
    "raw_state": pl.String(),
    "exit_code": pl.Int32(),
    "exit_signal": pl.Int32(),
    "hosts": pl.List(pl.String()),
    "gpus": pl.Int32(),
}

# Jobstats' per-GPU figures (gpuwaste.jobstats_summary), one row per job x host x GPU minor.
SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "gpu_minor": pl.Int16(),
    "util_pct": pl.Float64(),
    "mem_used_mib": pl.Float64(),
    "mem_total_mib": pl.Float64(),
}
MIB = float(1 << 20)


class SacctFormatError(ValueError):
    """The text is not sacct parsable output at all (message: one sentence, no file name)."""


@dataclass(frozen=True)
class SacctOptions:
    """How to read one cluster's sacct output (from `SlurmSource` and `ClusterConfig`)."""

    timezone: str = "UTC"
    vc_from: str = "account"  # "partition" | "account"
    debug_partitions: tuple[str, ...] = ("debug", "interactive")
    debug_qos: tuple[str, ...] = ()
    debug_name_pattern: str = r"^(_?interactive|bash|sh|zsh|jupyter.*|sys/dashboard.*)$"
    delimiter: str | None = None  # None: detect
    columns: tuple[str, ...] | None = None  # for output without a header line
    times: TimeBounds = field(
        default_factory=TimeBounds
    )  # the times believed (the ingest's, `ingest.times`)
    max_gzip_ratio: float = 200.0  # `[files]`: how far a Jobstats summary may decompress


@dataclass
class SacctParse:
    """Jobs (one row per job, JOB_SCHEMA) and the records that were refused."""

    jobs: pl.DataFrame
    refused: list[Refused] = field(default_factory=list)
    accepted: int = 0  # input records (job and step lines) accepted
    pending: int = 0  # pending jobs skipped
    delimiter: str = "|"
    columns: tuple[str, ...] = ()
    gpu_summaries: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SUMMARY_SCHEMA))
    # the runs of requeued jobs (ATTEMPT_SCHEMA); empty when no job was printed twice
    attempts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ATTEMPT_SCHEMA))


@dataclass
class _Row:
    job_id: str
    job_id_raw: str | None
    user: str | None
    vc: str | None
    name: str | None
    state: str
    raw_state: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    gpus: int | None
    is_debug: bool
    hosts: list[str]
    mig_profile: str | None = None
    gpu_model: str | None = None
    summary: JobSummary | None = None
    exit_code: int | None = None
    exit_signal: int | None = None


_EXIT = re.compile(r"^(?P<code>\d+):(?P<signal>\d+)$")


def parse_exit(text: str | None) -> tuple[int | None, int | None]:
    """sacct's ExitCode `code:signal` (`1:0`, `0:9`); (None, None) when absent or not that."""
    m = _EXIT.match(text.strip()) if text else None
    if m is None:
        return None, None
    return int(m.group("code")), int(m.group("signal"))


def detect_delimiter(first_line: str) -> str | None:
    for d in CANDIDATE_DELIMITERS:
        if d in first_line:
            return d
    return None


def _fields(line: str, delim: str) -> list[str]:
    return line.split(delim)


def _is_header(fields: list[str]) -> bool:
    names = [f.strip() for f in fields if f.strip()]
    if not names or not all(_HEADER_FIELD.match(n) for n in names):
        return False
    lower = {n.lower() for n in names}
    return "jobid" in lower or "jobidraw" in lower


def parse_time(text: str, tz: ZoneInfo, fold: int = 0) -> datetime | None:
    """A sacct timestamp as UTC; None for Unknown/None/empty. Raises ValueError if unparseable.

    A local time in the hour repeated when clocks go back is read as its first occurrence
    (fold=0) or its second (fold=1).
    """
    text = text.strip()
    if text in NULL_TIMES:
        return None
    if text.isdigit():
        return datetime.fromtimestamp(int(text), UTC)
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz, fold=fold)
    return dt.astimezone(UTC)


def parse_duration(text: str) -> timedelta | None:
    """sacct's `[D-]HH:MM:SS`, `MM:SS` or `MM:SS.mmm`; None when empty or not a duration."""
    m = _DURATION.match(text.strip())
    if m is None:
        return None
    d, a, b, c = m.group("d"), m.group("a"), m.group("b"), m.group("c")
    if c is None:  # MM:SS[.fff]
        h, mi, sec = 0, int(a), float(b)
    else:
        h, mi, sec = int(a), int(b), float(c)
    return timedelta(days=int(d or 0), hours=h, minutes=mi, seconds=sec)


def _base_number(job_id: str) -> int:
    digits = re.match(r"\d+", job_id)
    return int(digits.group(0)) if digits else 0


def resolve_times(
    submit_s: str | None,
    start_s: str | None,
    end_s: str | None,
    elapsed: timedelta | None,
    tz: ZoneInfo,
    floor: datetime | None = None,
) -> tuple[datetime | None, datetime | None, datetime | None]:
    """Submit, start, end in UTC, choosing the reading of times in a repeated (fall-back) hour.

    Submit: the first reading not before `floor` (the latest submit time of the jobs submitted
    before this one). Start: the first reading not before the submit time. End: the reading whose
    difference to the start equals Elapsed when the output has it, else the first reading not
    before the start. Outside a repeated hour every time has one reading and this changes nothing.
    """

    def both(text: str | None) -> list[datetime]:
        if text is None:
            return []
        a = parse_time(text, tz, 0)
        if a is None:
            return []
        b = parse_time(text, tz, 1)
        return [a] if b is None or b == a else [a, b]

    def pick(cands: list[datetime], lower: datetime | None) -> datetime | None:
        if not cands:
            return None
        ok = [x for x in cands if lower is None or x >= lower]
        return ok[0] if ok else cands[0]

    submits, starts, ends = both(submit_s), both(start_s), both(end_s)
    submit = pick(submits, floor)
    if len(starts) > 1 and len(ends) >= 1 and elapsed is not None:
        exact = [(s, e) for s in starts for e in ends if e - s == elapsed]
        if len(exact) == 1:
            return submit, exact[0][0], exact[0][1]
    start = pick(starts, submit)
    if elapsed is not None and start is not None and len(ends) > 1:
        exact_end = [e for e in ends if e - start == elapsed]
        if exact_end:
            return submit, start, exact_end[0]
    return submit, start, pick(ends, start)


def gpu_count(tres: str, gres_style: bool = False) -> int:
    """GPUs named in an AllocTRES (`gres/gpu=4,...`) or AllocGRES (`gpu:a100:4`) value."""
    pattern = _GRES_GPU if gres_style else _TRES_GPU
    total: int | None = None
    typed = 0
    for m in pattern.finditer(tres.strip()):
        n = int(m.group("n"))
        if m.group("type") is None:
            total = n if total is None else total + n
        else:
            typed += n
    return total if total is not None else typed


_MIG_TYPE = re.compile(r"^(?:(?P<model>.+?)[_-])?(?P<profile>\d+g\.\d+gb)$", re.IGNORECASE)


def gpu_type(tres: str, gres_style: bool = False) -> tuple[str | None, str | None]:
    """(MIG profile, GPU model) named by the GPU types of an AllocTRES / AllocGRES value.

    A MIG GRES type is a profile, optionally after a model: `1g.10gb`, `a100_1g.5gb`,
    `nvidia_a100-sxm4-80gb_3g.40gb` (Slurm's AutoDetect=nvml names). Any other type is a model
    (`a100`). None where the value names no type, or several different ones."""
    pattern = _GRES_GPU if gres_style else _TRES_GPU
    types = {m.group("type") for m in pattern.finditer(tres.strip()) if m.group("type")}
    if len(types) != 1:
        return None, None
    (text,) = types
    m = _MIG_TYPE.match(text)
    if m is None:
        return None, text
    return m.group("profile").lower(), m.group("model")


class _Staged(NamedTuple):
    """A line that passed stage 1 of `parse_sacct`: its shape, job id and state are known."""

    lineno: int
    line: str
    fields: list[str]
    job_id: str  # the job id shown, before its `.step` (`123`, `123_4`, `123+1`)
    step: str | None  # the step's name (`batch`, `0`, ...), None on the job's own line
    raw_state: str  # State as sacct printed it
    state: str  # the state it maps to (`map_state`)


class _Columns:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        lower = [n.strip().lower() for n in names]

        def idx(*cands: str) -> int | None:
            for c in cands:
                if c in lower:
                    return lower.index(c)
            return None

        self.jobid = idx("jobid")
        self.jobidraw = idx("jobidraw")
        self.state = idx("state")
        self.user = idx("user")
        self.account = idx("account")
        self.partition = idx("partition")
        self.qos = idx("qos")
        self.name = idx("jobname")
        self.submit = idx("submit")
        self.start = idx("start")
        self.end = idx("end")
        self.elapsed = idx("elapsed")
        self.alloctres = idx("alloctres")
        self.allocgres = idx("allocgres")
        self.reqtres = idx("reqtres")
        self.reqgres = idx("reqgres")
        self.nodelist = idx("nodelist")
        self.admincomment = idx("admincomment")
        self.exitcode = idx("exitcode")


def _job_gpus(fields: list[str], c: _Columns) -> int | None:
    """GPUs allocated (AllocTRES, else AllocGRES); where nothing was allocated (a job cancelled
    before it started), the request (ReqTRES, else ReqGRES); 0 when the columns name no GPU (a
    CPU-only job), None when the output has none of these columns."""
    gpus: int | None = None
    allocated: int | None = None
    if c.alloctres is not None:
        gpus, allocated = gpu_count(fields[c.alloctres]), c.alloctres
    elif c.allocgres is not None:
        gpus, allocated = gpu_count(fields[c.allocgres], gres_style=True), c.allocgres
    if gpus is None or not _get(fields, allocated):
        if c.reqtres is not None:
            return gpu_count(fields[c.reqtres])
        if c.reqgres is not None:
            return gpu_count(fields[c.reqgres], gres_style=True)
    return gpus


def _job_gpu_type(fields: list[str], c: _Columns) -> tuple[str | None, str | None]:
    """(MIG profile, model) from the GPU type in AllocTRES, else AllocGRES."""
    for i, gres_style in ((c.alloctres, False), (c.allocgres, True)):
        text = _get(fields, i)
        if text is not None:
            return gpu_type(text, gres_style)
    return None, None


def _get(fields: list[str], i: int | None) -> str | None:
    if i is None:
        return None
    v = fields[i].strip()
    return v if v else None


def _read_by_another_command(first: str) -> str:
    """A pointer to the command that reads what `first` (a file's first line) looks like, or ''."""
    line = first.lstrip()
    if line.startswith(("# HELP ", "# TYPE ")):
        return "; this looks like OpenMetrics text, which `gpuwaste ingest openmetrics` reads"
    if line.startswith(("{", "[")):
        return (
            "; this looks like JSON: the Philly trace's job log is read by `gpuwaste ingest philly`"
        )
    if line.startswith("JobId="):
        return "; this looks like `scontrol show job` output, read by `ingest slurm --scontrol`"
    if line.startswith("time,machineId,") or line.startswith("time,machine_id,"):
        return "; this looks like a Philly utilization file, which `gpuwaste ingest philly` reads"
    return ""


def _resolve_columns(
    lines: list[tuple[int, str]], opts: SacctOptions
) -> tuple[str, tuple[str, ...], bool]:
    """(delimiter, columns, first line is a header) or SacctFormatError."""
    first = lines[0][1]
    delim = opts.delimiter or detect_delimiter(first)
    if delim is None:
        if _is_header([first]) or (opts.columns is not None and len(opts.columns) == 1):
            delim = "|"
        else:
            raise SacctFormatError(
                "not sacct parsable output: no '|' (or ';|;', '^|^') delimiter in the first line "
                f"(expected `sacct --parsable2` output{_read_by_another_command(first)})"
            )
    fields = _fields(first, delim)
    if _is_header(fields):
        cols = tuple(f.strip() for f in fields)
        if cols and cols[-1] == "":
            cols = cols[:-1]
        header = True
    elif opts.columns is not None:
        cols, header = tuple(opts.columns), False
    else:
        raise SacctFormatError(
            "sacct output without a header line: give its columns (the --format list of the "
            "sacct command that wrote it)"
        )
    lower = {c.lower() for c in cols}
    if not ({"jobid", "jobidraw"} & lower) or "state" not in lower:
        raise SacctFormatError(
            f"sacct output must have a JobID (or JobIDRaw) and a State column; got {', '.join(cols)}"
        )
    return delim, cols, header


def _split_id(job: str) -> tuple[str, str | None] | None:
    m = _JOBID.match(job)
    if m is None:
        return None
    return m.group("job"), m.group("step")


def parse_sacct(text: str, opts: SacctOptions | None = None, location: str = "sacct") -> SacctParse:
    """Parse sacct parsable output; `location` names the input in refused records (file:line)."""
    opts = opts or SacctOptions()
    text = text.removeprefix("\ufeff")  # a byte-order mark (files saved on Windows)
    tz = ZoneInfo(opts.timezone)
    debug_name = re.compile(opts.debug_name_pattern) if opts.debug_name_pattern else None
    # Lines as the file counts them (`\n`), so that quarantine locations are exact.
    lines = [(i + 1, ln.rstrip("\r")) for i, ln in enumerate(text.split("\n")) if ln.strip()]
    if not lines:
        if opts.columns is None:  # sacct prints its header even when no job matched
            raise SacctFormatError(
                "empty: no header line and no records (expected `sacct --parsable2` output; "
                "for headerless `sacct -n` output, give its columns)"
            )
        return SacctParse(jobs=pl.DataFrame(schema=JOB_SCHEMA))
    delim, cols, header = _resolve_columns(lines, opts)
    if header:
        lines = lines[1:]
    c = _Columns(cols)
    ncol = len(cols)
    refused: list[Refused] = []
    jobs: dict[str, _Row] = {}
    runs: dict[str, list[_Row]] = {}  # a job's records, one per run (several: a requeue)
    steps: dict[str, list[_Row]] = {}
    accepted = 0
    pending_ids: set[str] = set()
    # Stage 1: shape, id and state of every line.
    staged: list[_Staged] = []
    for lineno, line in lines:
        where = f"{location}:{lineno}"
        if _UNDECODABLE.search(line):
            raw = line.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            refused.append(Refused(where, "not UTF-8 text: a byte of another encoding", raw))
            continue
        fields = _fields(line, delim)
        if len(fields) == ncol + 1 and fields[-1] == "":
            fields = fields[:-1]  # --parsable trailing delimiter
        if len(fields) != ncol:
            refused.append(
                Refused(where, f"wrong field count: expected {ncol}, got {len(fields)}", line)
            )
            continue
        if header and _is_header(fields):  # a repeated header (concatenated outputs)
            refused.append(Refused(where, "repeated header line", line))
            continue
        shown = _get(fields, c.jobid) or _get(fields, c.jobidraw)
        if shown is None:
            refused.append(Refused(where, "no job id", line))
            continue
        parts = _split_id(shown)
        if parts is None:
            refused.append(Refused(where, f"bad job id: {shown!r}", line))
            continue
        raw_state = _get(fields, c.state) or ""
        state = map_state(raw_state)
        if state is None:
            refused.append(Refused(where, f"unknown state: {raw_state!r}", line))
            continue
        staged.append(_Staged(lineno, line, fields, parts[0], parts[1], raw_state, state))

    # Stage 2, in order of submission (the job id before `_`/`+`): times, then the rest. The
    # running latest submit time reads a repeated fall-back hour the way the order implies.
    staged.sort(key=lambda r: (_base_number(r.job_id), r.lineno))
    latest_submit: datetime | None = None
    for lineno, line, fields, job_id, step, raw_state, state in staged:
        where = f"{location}:{lineno}"

        def refuse(reason: str, where: str = where, line: str = line) -> None:
            refused.append(Refused(where, reason, line))

        try:
            submit, start, end = resolve_times(
                fields[c.submit] if c.submit is not None else None,
                fields[c.start] if c.start is not None else None,
                fields[c.end] if c.end is not None else None,
                parse_duration(fields[c.elapsed]) if c.elapsed is not None else None,
                tz,
                latest_submit,
            )
        except (ValueError, OverflowError, OSError):
            refuse("unparseable time")
            continue
        if state != PENDING:  # a pending job's Start is when Slurm expects it to start
            why = next((w for t in (submit, start, end) if (w := opts.times.problem(t))), None)
            if why is not None:
                refuse(why)
                continue
        if submit is not None and step is None:
            latest_submit = submit if latest_submit is None else max(latest_submit, submit)
        if start is not None and end is not None and end < start:
            refuse(f"end before start: {end.isoformat()} < {start.isoformat()}")
            continue
        gpus = _job_gpus(fields, c)
        profile, model = _job_gpu_type(fields, c)
        if gpus is not None and gpus < 0:
            refuse(f"negative GPU count: {gpus}")
            continue
        try:
            hosts = expand_hostlist(fields[c.nodelist]) if c.nodelist is not None else []
        except HostListError as exc:
            refuse(f"bad host list: {exc}")
            continue
        raw_id = _get(fields, c.jobidraw)
        if raw_id is not None:
            raw_parts = _split_id(raw_id)
            raw_id = raw_parts[0] if raw_parts else raw_id
        partition = _get(fields, c.partition)
        account = _get(fields, c.account)
        qos = _get(fields, c.qos)
        name = _get(fields, c.name)
        is_debug = (
            (partition is not None and partition in opts.debug_partitions)
            or (qos is not None and qos in opts.debug_qos)
            or (name is not None and debug_name is not None and bool(debug_name.match(name)))
        )
        row = _Row(
            job_id=job_id,
            job_id_raw=raw_id,
            user=_get(fields, c.user),
            vc=partition if opts.vc_from == "partition" else account,
            name=name,
            state=state,
            raw_state=raw_state,
            submit=submit,
            start=start,
            end=end,
            gpus=gpus,
            is_debug=is_debug,
            hosts=hosts,
            mig_profile=profile,
            gpu_model=model,
        )
        row.exit_code, row.exit_signal = parse_exit(_get(fields, c.exitcode))
        accepted += 1
        if step is None and c.admincomment is not None:
            try:
                summary = decode_summary(fields[c.admincomment], opts.max_gzip_ratio)
            except SummaryError as exc:  # the job is kept; its summary is quarantined
                refuse(f"Jobstats summary in AdminComment not decoded: {exc}")
            else:
                row.summary, strangers = _on_job_hosts(summary, hosts)
                if strangers:
                    refuse(
                        f"Jobstats summary in AdminComment names hosts not in the job's NodeList: "
                        f"{', '.join(strangers)} (their GPUs left out)"
                    )
        if step is None:
            runs.setdefault(job_id, []).append(row)
        else:
            steps.setdefault(job_id, []).append(row)

    refused.sort(key=lambda r: int(r.location.rsplit(":", 1)[1]))
    attempts: list[tuple[_Row, int, bool]] = []
    for job_id, job_runs in runs.items():
        jobs[job_id], started = _last_run(job_runs)
        if len(started) > 1 and jobs[job_id].state != PENDING:
            attempts.extend((r, i, i == len(started) - 1) for i, r in enumerate(started))
    for job_id, rows in steps.items():
        if job_id not in jobs:
            jobs[job_id] = _job_from_steps(rows)
    out = []
    for job_id, r in jobs.items():
        if r.state == PENDING:
            pending_ids.add(job_id)
            continue
        out.append(r)
    frame = pl.DataFrame(
        {
            "job_id": [r.job_id_raw or r.job_id for r in out],
            "slurm_job_id": [r.job_id for r in out],
            "user": [r.user for r in out],
            "vc": [r.vc for r in out],
            "name": [r.name for r in out],
            "state": [r.state for r in out],
            "raw_state": [r.raw_state for r in out],
            "submit_ts": [r.submit for r in out],
            "start_ts": [r.start for r in out],
            "end_ts": [r.end for r in out],
            "gpus": [r.gpus for r in out],
            "is_debug": [r.is_debug for r in out],
            "hosts": [r.hosts for r in out],
            "source": [SOURCE] * len(out),
            "mig_profile": [r.mig_profile for r in out],
            "gpu_model": [r.gpu_model for r in out],
            "exit_code": [r.exit_code for r in out],
            "exit_signal": [r.exit_signal for r in out],
        },
        schema=JOB_SCHEMA,
    )
    return SacctParse(
        attempts=_attempt_rows(attempts),
        jobs=frame,
        refused=refused,
        accepted=accepted,
        pending=len(pending_ids),
        delimiter=delim,
        columns=cols,
        gpu_summaries=_summary_rows(out),
    )


def _last_run(rows: list[_Row]) -> tuple[_Row, list[_Row]]:
    """A job's row from its records (one per run; several after a requeue, with `-D`): the run
    queued last (Slurm resets Submit at a requeue; the file's order breaks a tie) with the
    earliest Submit, the job's submission; and its runs that started, in that order. Records of
    one run printed twice (concatenated outputs of overlapping windows; a run seen running, then
    ended) share their Start: the last one printed stands for the run."""
    if len(rows) == 1:  # nearly every job
        return rows[0], [rows[0]] if rows[0].start is not None else []
    one: dict[object, _Row] = {}
    for r in rows:
        one[r.start if r.start is not None else ("not started", r.submit)] = r
    rows = list(one.values())
    if len(rows) == 1:
        return rows[0], [rows[0]] if rows[0].start is not None else []
    floor = datetime.min.replace(tzinfo=UTC)
    ordered = sorted(rows, key=lambda r: r.submit or r.start or floor)  # stable: file order
    submits = [r.submit for r in rows if r.submit is not None]
    last = replace(ordered[-1], submit=min(submits) if submits else None)
    return last, [r for r in ordered if r.start is not None and r.state != PENDING]


def _attempt_rows(attempts: list[tuple[_Row, int, bool]]) -> pl.DataFrame:
    """ATTEMPT_SCHEMA rows of the runs of requeued jobs (run, its number, whether it is the
    last). An earlier run in a live state (REQUEUED, REQUEUE_HOLD, REQUEUE_FED) ended when it
    was requeued, from outside: killed."""
    return pl.DataFrame(
        [
            (
                r.job_id_raw or r.job_id,
                i,
                r.submit,
                r.start,
                r.end,
                KILLED if r.state == RUNNING and not last else r.state,
                r.raw_state,
                r.exit_code,
                r.exit_signal,
                r.hosts,
                r.gpus,
            )
            for r, i, last in attempts
        ],
        schema=ATTEMPT_SCHEMA,
        orient="row",
    )


def _on_job_hosts(
    summary: JobSummary | None, hosts: list[str]
) -> tuple[JobSummary | None, list[str]]:
    """The summary with its nodes named as the job's NodeList names them (Jobstats names a node
    as Prometheus' `instance` label does, which may carry the domain: `gpu1.example.org` is
    NodeList's `gpu1`), and the names of its nodes that are not the job's. Without a NodeList,
    as it is."""
    if summary is None or not hosts:
        return summary, []
    known = set(hosts)
    kept, strangers = [], []
    for node in summary.nodes:
        name = node.host if node.host in known else node.host.split(".", 1)[0]
        if name in known:
            kept.append(replace(node, host=name))
        else:
            strangers.append(node.host)
    return replace(summary, nodes=tuple(kept)), strangers


def _summary_rows(rows: list[_Row]) -> pl.DataFrame:
    """One row per job x host x GPU minor number of the jobs' Jobstats summaries (MiB)."""

    def mib(b: float | None) -> float | None:
        return None if b is None else b / MIB

    out = [
        (
            r.job_id_raw or r.job_id,
            node.host,
            g.minor,
            g.util_pct,
            mib(g.mem_used_bytes),
            mib(g.mem_total_bytes),
        )
        for r in rows
        if r.summary is not None
        for node in r.summary.nodes
        for g in node.gpus
    ]
    return pl.DataFrame(out, schema=SUMMARY_SCHEMA, orient="row")


def _job_from_steps(rows: list[_Row]) -> _Row:
    """A job whose allocation row is missing, rebuilt from its steps."""
    batch = [r for r in rows if r.name == "batch"] or rows[-1:]
    lead = batch[0]
    starts = [r.start for r in rows if r.start is not None]
    ends = [r.end for r in rows if r.end is not None]
    hosts: list[str] = []
    for r in rows:
        hosts.extend(h for h in r.hosts if h not in hosts)
    gpus = [r.gpus for r in rows if r.gpus is not None]
    return _Row(
        job_id=lead.job_id,
        job_id_raw=lead.job_id_raw,
        user=next((r.user for r in rows if r.user), None),
        vc=next((r.vc for r in rows if r.vc), None),
        name=lead.name,
        state=lead.state,
        raw_state=lead.raw_state,
        submit=min((r.submit for r in rows if r.submit is not None), default=None),
        start=min(starts) if starts else None,
        end=max(ends) if ends and lead.state not in (RUNNING, PENDING) else None,
        gpus=max(gpus) if gpus else None,
        is_debug=any(r.is_debug for r in rows),
        hosts=hosts,
        mig_profile=next((r.mig_profile for r in rows if r.mig_profile), None),
        gpu_model=next((r.gpu_model for r in rows if r.gpu_model), None),
        exit_code=lead.exit_code,
        exit_signal=lead.exit_signal,
    )


def columns_from_command(command: list[str]) -> tuple[str, ...] | None:
    """The `--format`/`-o` column list of a sacct command line, if it has one."""
    for i, arg in enumerate(command):
        value: str | None = None
        if arg in ("--format", "-o") and i + 1 < len(command):
            value = command[i + 1]
        elif arg.startswith("--format="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-o") and len(arg) > 2:
            value = arg[2:]
        if value:
            return tuple(v.split("%", 1)[0].strip() for v in value.split(",") if v.strip())
    return None
