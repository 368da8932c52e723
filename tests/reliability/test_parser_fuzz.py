"""Fuzzing every parser: any input ends in accepted rows, refused records, or one clear error.

Each test draws `FUZZ_EXAMPLES` inputs (2,000 in CI, 200,000 with `make fuzz`), half arbitrary
text, half structure-aware mutations of the real fixtures (tests/fixtures and tests/data),
and calls the *pure* parser on a string: no files, no warehouse, so one example costs well under
a millisecond to a few. For the line-based parsers every input line is accounted for: it is
either accepted or refused with its own line number and a reason.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from gpuwaste.config import PrometheusLabels
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.philly.parse import (
    CPU_UTIL,
    GPU_UTIL,
    MEM_UTIL,
    PhillyFormatError,
    parse_chunk,
    parse_job_log,
)
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.parse import ResponseError, SeriesSet, parse_body, parse_payload
from gpuwaste.ingest.prometheus.rows import (
    FB_FREE,
    FB_USED,
    GPU_METRICS,
    HOST_METRICS,
    Rows,
    gpu_rows,
    host_rows,
)
from gpuwaste.ingest.prometheus.rows import (
    GPU_UTIL as DCGM_UTIL,
)
from gpuwaste.ingest.slurm.parse import SacctFormatError, SacctOptions, parse_sacct
from gpuwaste.ingest.slurm.scontrol_parse import ScontrolFormatError, parse_scontrol
from gpuwaste.ingest.tabular.parse import (
    MappingError,
    load_mapping,
    map_jobs,
    map_samples,
    split_csv,
)
from gpuwaste.warehouse.bookkeeping import Refused
from tests.reliability.fuzzing import fuzz_settings
from tests.reliability.mutations import TESTS_DATA, fixtures, line_texts, mutated

LABELS = PrometheusLabels()
ZONES = ["UTC", "Europe/Berlin", "America/Los_Angeles", "Australia/Lord_Howe"]


def _line_of(r: Refused) -> int:
    return int(r.location.rsplit(":", 1)[1])


def _check_refused(refused: list[Refused]) -> None:
    for r in refused:
        assert r.location and r.reason, r
        assert isinstance(r.raw, str)


def _check_rows(rows: Rows) -> None:
    _check_refused(rows.refused)
    for col, dtype in rows.frame.schema.items():
        if col == "ts":
            assert dtype == pl.Datetime("us", "UTC")
    for col, hi in (("util", 100.0), ("mem_used_mib", None), ("cpu_util", 100.0)):
        if col in rows.frame.columns:
            v = rows.frame[col].drop_nulls()
            assert v.is_nan().sum() == 0, col
            assert v.len() == 0 or v.min() >= 0, col  # type: ignore[operator]
            assert v.len() == 0 or hi is None or v.max() <= hi, col  # type: ignore[operator]


# ------------------------------------------------------------------------------ OpenMetrics

OM_TEXTS = fixtures("exporter_text/*.prom", "kube_state_metrics/*.prom")
OM_EXTRA = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h"} 5 1700000000', "# EOF", "1e308", "-1e308")


# Well-formed sample lines of the families the row builders read, with odd values, repeated
# instants and labels missing: what reaches their checks (a value out of range, a conflicting
# duplicate), seldom reached by a broken fixture cut to its first lines.
_OM_SAMPLE = st.tuples(
    st.sampled_from(
        [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # a counter: a reading may run backwards
        ]
    ),
    st.sampled_from(
        [
            'gpu="0",Hostname="h"',
            'gpu="1",Hostname="h"',
            'gpu="0"',
            'Hostname="h"',
            'gpu="1",Hostname="h\\\\n\\"x"',  # escapes in a label value
        ]
    ),
    st.sampled_from(["5", "50", "NaN", "-1", "101", "1e400", "+Inf", "x", "0", "9e12"]),
    st.sampled_from([" 1700000000", " 1700000000", " 1700000015", ""]),
).map(lambda f: f"{f[0]}{{{f[1]}}} {f[2]}{f[3]}")
_OM_SAMPLES = st.lists(_OM_SAMPLE, min_size=1, max_size=6).map("\n".join)


@fuzz_settings
@given(
    st.one_of(
        mutated(OM_TEXTS, max_lines=20, extra_values=OM_EXTRA),
        line_texts('#{}="\\, .0123456789eE+-NaInf_:abcgpu', max_lines=10),
        _OM_SAMPLES,
    ),
    st.booleans(),
    st.booleans(),
)
def test_fuzz_openmetrics(text: str, with_default_ts: bool, openmetrics: bool) -> None:
    if openmetrics:
        text += "\n# EOF\n"
    default_ts = datetime(2026, 11, 1, tzinfo=UTC) if with_default_ts else None
    parsed = parse_text(text, location="f.om", default_ts=default_ts)
    _check_refused(parsed.refused)
    data_lines = {
        i
        for i, raw in enumerate(text.split("\n"), start=1)
        if raw.strip() and not raw.strip().startswith("#")
    }
    refused_lines = [_line_of(r) for r in parsed.refused]
    assert len(set(refused_lines)) == len(refused_lines)
    assert set(refused_lines) <= data_lines
    samples = sum(s.n_samples for s in parsed.series.values())
    assert samples + len(refused_lines) == len(data_lines)  # every sample line accounted for
    _check_rows(gpu_rows(parsed.series, LABELS, source="openmetrics"))
    _check_rows(host_rows(parsed.series, LABELS, source="openmetrics"))


# ------------------------------------------------------------------------- Prometheus JSON


def _small_api_fixtures() -> list[str]:
    """The API fixtures; the 160 kB one cut to 3 series x 8 points, written compact."""
    out = []
    for text in fixtures("prometheus_api/*.json"):
        payload = json.loads(text)
        result = payload if isinstance(payload, list) else None
        if result is not None:  # a bare result list: wrap it as an API answer
            payload = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        res = payload.get("data", {}).get("result", [])
        for item in res[:3]:
            if "values" in item:
                item["values"] = item["values"][:8]
        payload["data"]["result"] = res[:3]
        out.append(json.dumps(payload, separators=(",", ":")))  # what Prometheus writes
        out.append(json.dumps(payload, indent=2))
    return out


API_TEXTS = _small_api_fixtures()

_values = st.one_of(
    st.sampled_from(
        ["0", "1", "55.5", "NaN", "+Inf", "-Inf", "1e400", "-1", "9223372036854775794"]
    ),
    st.text(max_size=6),
    st.integers(),
    st.floats(),
    st.none(),
)
_ts = st.one_of(
    st.floats(1.7e9, 1.8e9),
    st.floats(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=5),
    st.none(),
)
_pairs = st.lists(
    st.one_of(st.tuples(_ts, _values).map(list), st.lists(_values, max_size=3)), max_size=6
)
_LABEL_NAMES = ["__name__", "Hostname", "gpu", "UUID", "hpc_job", "instance", "pod", "cpu", "mode",
                "", "namespace", "exported_pod", "exported_namespace", "job", "device"]  # fmt: skip
_metric = st.dictionaries(
    st.sampled_from(_LABEL_NAMES),
    st.one_of(
        st.sampled_from(["h1", "0", "1", "idle", "user", "h1:9100", ""])
        | st.sampled_from(["nvidia3", "nvidiaX", "train-0", "dcgm-exporter", "ns"]),
        st.text(max_size=5),
        st.integers(),
    ),
    max_size=6,
)
_item = st.fixed_dictionaries(
    {"metric": st.one_of(_metric, st.none(), st.integers())},
    optional={
        "values": st.one_of(_pairs, st.none(), st.text(max_size=3)),
        "value": st.tuples(_ts, _values).map(list),
    },
)
_payloads = st.fixed_dictionaries(
    {
        "status": st.sampled_from(["success", "error", "", None]),
        "data": st.one_of(
            st.fixed_dictionaries(
                {
                    "resultType": st.sampled_from(["matrix", "vector", "scalar", "string", None]),
                    "result": st.one_of(
                        st.lists(_item, max_size=4), st.none(), st.text(max_size=3)
                    ),
                }
            ),
            st.none(),
            st.lists(st.integers(), max_size=2),
        ),
    },
    optional={"errorType": st.text(max_size=5), "error": st.text(max_size=10)},
)


def _encode(payload: dict[str, Any], compact: bool) -> str:
    return json.dumps(payload, separators=(",", ":") if compact else (", ", ": "))


@fuzz_settings
@given(
    st.one_of(
        mutated(API_TEXTS, max_lines=80, extra_values=('"values":[[', "]]", "[1,", '"1"]')),
        st.builds(_encode, _payloads, st.booleans()),
        st.text(max_size=200),
    )
)
def test_fuzz_prometheus_json(text: str) -> None:
    body = text.encode("utf-8", errors="surrogatepass")
    try:
        parsed = parse_body(body)
    except ResponseError as exc:
        assert str(exc)
        return
    assert isinstance(parsed, SeriesSet)
    sids = parsed.samples["sid"]
    assert sids.is_empty() or sids.max() < len(parsed.labels)  # type: ignore[operator]
    # The fast path (CSV reader) and the plain `json` path read the same samples.
    try:
        slow = parse_payload(json.loads(body))
    except (ValueError, UnicodeDecodeError):
        slow = None
    if slow is not None:
        cols = ["sid", "ts", "value"]
        assert parsed.samples.select(cols).equals(slow.samples.select(cols)), text[:300]
    if parsed.samples.height == 0:
        return
    sets = {m: parsed for m in (*GPU_METRICS[:3], DCGM_UTIL, FB_USED, FB_FREE)}
    _check_rows(gpu_rows(sets, LABELS, source="prometheus"))
    _check_rows(host_rows({m: parsed for m in HOST_METRICS}, LABELS, source="prometheus"))


# ---------------------------------------------------------------------------------- sacct

SACCT_TEXTS = fixtures("sacct/*.txt")
SACCT_EXTRA = ("COMPLETED", "CANCELLED by 0", "PENDING", "123_[1-3]", "123.batch", "gres/gpu=-4")


@fuzz_settings
@given(
    st.one_of(
        mutated(SACCT_TEXTS, max_lines=12, extra_values=SACCT_EXTRA),
        line_texts("|;^JobIDStateStart:-0123456789T_.+[] ", max_lines=8),
        line_texts("|", max_lines=6).map(
            lambda s: "JobID|State|Start|End|AllocTRES|NodeList\n" + s
        ),
        # one well-formed line but for its id, state, elapsed time and host list (rare in the
        # above); or a header of one column
        st.tuples(
            st.sampled_from(["7", "", "7_[1-3]", "7.batch", "7+1"]),
            st.sampled_from(["COMPLETED", "RUNNING", "CANCELLED by 0", "BOGUS", "", "failed"]),
            st.sampled_from(["01:00:00", "1-00:00:00", "59:59.5", "", "x", "1-", "::"]),
            st.sampled_from(["n1", "n[1-2]", "n[1-", "n]1[", "n[2-1]", "n1,,n2", "n 1", "n[[1]]"]),
        ).map(
            lambda f: (
                "JobID|State|Start|End|Elapsed|AllocTRES|NodeList\n"
                f"{f[0]}|{f[1]}|2026-11-01T10:00:00|2026-11-01T11:00:00|{f[2]}|gres/gpu=1|{f[3]}"
            )
        ),
        line_texts("0123456789_.[]-", max_lines=3).map(lambda s: "JobID\n" + s),
    ),
    st.sampled_from(ZONES),
)
def test_fuzz_sacct(text: str, zone: str) -> None:
    try:
        res = parse_sacct(text, SacctOptions(timezone=zone), location="s")
    except SacctFormatError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    _check_refused(res.refused)
    lines = text.split("\n")  # sacct ends lines with \n; a \r inside a line is data
    nonblank = [i for i, ln in enumerate(lines, start=1) if ln.strip()]
    refused_lines = [_line_of(r) for r in res.refused]
    assert len(set(refused_lines)) == len(refused_lines)
    assert set(refused_lines) <= set(nonblank[1:])
    # Without given columns the first line is the header; every other line is accounted for.
    assert res.accepted + len(res.refused) == max(len(nonblank) - 1, 0)
    jobs = res.jobs
    ok = jobs.filter(pl.col("start_ts").is_not_null() & pl.col("end_ts").is_not_null())
    assert (ok["end_ts"] >= ok["start_ts"]).all()
    assert (jobs["gpus"].drop_nulls() >= 0).all()


# -------------------------------------------------------------------------------- scontrol

SCONTROL_TEXTS = fixtures("scontrol/*.txt")
SCONTROL_EXTRA = (
    "GRES=gpu:4(IDX:0-3)",
    "Nodes=gpu[01-02]",
    "IDX:N/A",
    "JobId=",
    "GRES=gpu(IDX:9999)",
)


@fuzz_settings
@given(
    st.one_of(
        mutated(SCONTROL_TEXTS, max_lines=20, extra_values=SCONTROL_EXTRA),
        line_texts("JobId=NodesGRESIDX:gpu()[]-,0123456789 \t", max_lines=8),
        line_texts("=:()[]-,0123456789 ", max_lines=4).map(
            lambda s: "JobId=7 JobName=x\n   Nodes=n[1-2] CPU_IDs=0 Mem=0 GRES=" + s
        ),
        # a node detail line whose host list or GPU indices are broken (rare in the above)
        st.tuples(
            st.sampled_from(["n[1-2]", "n[1-", "n]1[", "n[2-1]", "n[a-b]", "n1,,n2", "n[1-2"]),
            st.text(st.sampled_from("0123456789-,N/A x"), max_size=8),
        ).map(
            lambda ni: (
                f"JobId=7 JobName=x\n   Nodes={ni[0]} CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:{ni[1]})"
            )
        ),
    )
)
def test_fuzz_scontrol(text: str) -> None:
    try:
        res = parse_scontrol(text, location="sc")
    except ScontrolFormatError as exc:
        assert str(exc)
        return
    _check_refused(res.refused)
    lines = text.splitlines()
    records = sum(1 for ln in lines if ln.lstrip().startswith("JobId="))
    before = [r for r in res.refused if r.reason == "text before the first JobId= record"]
    assert res.accepted + len(res.refused) - len(before) == records
    gpus = res.gpus["gpu"]
    assert gpus.is_empty() or (gpus.min() >= 0 and gpus.max() <= 4096)  # type: ignore[operator]


# ---------------------------------------------------------------------------- Philly job log

PHILLY_LOG = [(TESTS_DATA / "philly" / "cluster_job_log").read_text()]
_job_keys = st.sampled_from(
    [
        "status",
        "vc",
        "jobid",
        "attempts",
        "submitted_time",
        "user",
        "start_time",
        "end_time",
        "detail",
        "ip",
        "gpus",
    ]
)
_job_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from(
        [
            "Pass",
            "Killed",
            "Failed",
            "None",
            "gpu0",
            "gpu99999",
            "2017-10-03 00:02:51",
            "2017-11-05 01:30:00",
        ]
    )
    | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_job_keys, c, max_size=6),
    max_leaves=10,
)


PHILLY_JOBS: list[Any] = json.loads(PHILLY_LOG[0])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and index path inside a parsed JSON value."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def _edited_jobs(draw: st.DrawFn) -> str:
    """Real jobs with a few values replaced or dropped anywhere inside them: JSON that gets past
    the log's shape to each job's and attempt's checks (random JSON seldom has a jobid and a
    known status, a broken text seldom parses)."""
    jobs = json.loads(json.dumps(draw(st.lists(st.sampled_from(PHILLY_JOBS), max_size=4))))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(jobs)[1:]
        if not paths:
            break
        *parents, last = paths[draw(st.integers(0, len(paths) - 1))]
        node = jobs
        for key in parents:
            node = node[key]
        if draw(st.booleans()):
            node[last] = draw(_job_json)
        else:
            del node[last]
    return json.dumps(jobs)


@fuzz_settings
@given(
    st.one_of(
        # the whole log (8 lines): a cut one is no JSON at all
        mutated(PHILLY_LOG, max_lines=8, extra_values=('"gpu3"', '"None"', "[]", "{}")),
        _edited_jobs(),
        st.lists(_job_json, max_size=4).map(json.dumps),
        st.text(max_size=100),
    )
)
def test_fuzz_philly_job_log(text: str) -> None:
    try:
        res = parse_job_log(text, location="log")
    except PhillyFormatError as exc:
        assert str(exc)
        return
    _check_refused(res.refused)
    assert res.accepted + len(res.refused) == len(json.loads(text))
    g = res.job_gpus
    assert (g["end_ts"] >= g["start_ts"]).all()


# ------------------------------------------------------------------------------ Philly CSVs

PHILLY_CSV = {
    k: [(TESTS_DATA / "philly" / k).read_text().split("\n", 1)[1]]
    for k in (GPU_UTIL, CPU_UTIL, MEM_UTIL)
}
PHILLY_EXTRA = ("NA", "2017-11-05 01:30:00 PST", "2017-11-05 01:30:00 XYZ", "100.0001", "m1")


# One strategy per kind, built once (a strategy built inside each draw cost more than the draw).
_PHILLY_CASES = st.one_of(
    *(
        st.tuples(
            st.just(kind),
            st.one_of(
                mutated(PHILLY_CSV[kind], max_lines=8, extra_values=PHILLY_EXTRA),
                line_texts(",.0123456789NA PDST:-m", max_lines=8),
            ),
        )
        for kind in (GPU_UTIL, CPU_UTIL, MEM_UTIL)
    )
)


@fuzz_settings
@given(_PHILLY_CASES)
def test_fuzz_philly_csv(case: tuple[str, str]) -> None:
    kind, text = case
    data = text.encode("utf-8", errors="surrogatepass")
    good, refused, records = parse_chunk(kind, data, 2, "u")
    lines = data.decode("utf-8", "replace").split("\n")
    nonblank = [i for i, ln in enumerate(lines, start=2) if ln.strip(" \t\r")]  # BLANK
    assert records == len(nonblank)
    locs = [int(x.rsplit(":", 1)[1]) for x in refused["location"].to_list()]
    assert len(set(locs)) == len(locs) and set(locs) <= set(nonblank)
    assert refused["reason"].null_count() == 0
    value = good.columns[-1]
    v = good[value]
    assert v.is_nan().sum() == 0 and v.null_count() == 0
    if v.len():
        assert v.min() >= 0 and ((kind == MEM_UTIL and v.max() <= 1) or v.max() <= 100)  # type: ignore[operator]


# ------------------------------------------------------------------------------ generic CSV

MAPPING = load_mapping((TESTS_DATA / "tabular" / "mapping.toml").read_text())
TABULAR = {
    "samples": [(TESTS_DATA / "tabular" / "samples.csv").read_text()],
    "jobs": [(TESTS_DATA / "tabular" / "jobs.csv").read_text()],
}
TAB_EXTRA = ("n1:0-3;n2:0,2", "node[", "COMPLETED", "2026-11-01T10:00:00Z", "1793527140", "true")


_TABULAR_CASES = st.one_of(
    *(
        st.tuples(st.just(kind), mutated(texts, max_lines=12, extra_values=TAB_EXTRA))
        for kind, texts in TABULAR.items()
    )
)


def _read_csv(text: str) -> tuple[pl.DataFrame, pl.Expr, list[Refused]] | None:
    """As `tabular.read_table` reads a CSV, from a string; None where it refuses the file."""
    try:
        return split_csv(text, "t.csv")
    except IngestError as exc:  # the whole file refused: one sentence naming it
        assert str(exc).startswith("t.csv is not a readable csv file") and "\n" not in str(exc)
        return None


@fuzz_settings
@given(
    st.one_of(
        _TABULAR_CASES, st.tuples(st.sampled_from(["samples", "jobs"]), st.text(max_size=150))
    )
)
def test_fuzz_generic_csv(case: tuple[str, str]) -> None:
    kind, text = case
    read = _read_csv(text)
    if read is None:
        return
    df, loc, wrong_count = read
    _check_refused(wrong_count)
    try:
        if kind == "samples":
            assert MAPPING.samples is not None
            good, refused = map_samples(df, MAPPING.samples, "t.csv", loc)
            assert good.height + len(refused) == df.height
            assert good["util"].is_nan().sum() == 0
        else:
            assert MAPPING.jobs is not None
            jobs, _job_gpus, refused = map_jobs(df, MAPPING.jobs, "t.csv", loc)
            assert jobs.height + len(refused) <= df.height
            assert len({r.location for r in refused}) == len(refused)
    except MappingError as exc:  # a column named in the mapping is missing: one sentence
        assert "no column" in str(exc)
        return
    _check_refused(refused)
