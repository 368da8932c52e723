"""Prometheus API answers -> series (pure), on recorded real answers and generated ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwaste.config import PrometheusLabels
from gpuwaste.ingest.prometheus.parse import (
    ResponseError,
    _fast,
    parse_body,
    parse_payload,
    series_from_result,
)
from gpuwaste.ingest.prometheus.rows import host_of, job_of
from tests.conftest import FIXTURES

API = FIXTURES / "prometheus_api"


def _slow(body: bytes) -> pl.DataFrame:
    return parse_payload(json.loads(body)).samples


def test_reference_matrix_and_vectors() -> None:
    s = parse_body((API / "prometheus_docs_query_range_matrix.json").read_bytes())
    assert [lb["instance"] for lb in s.labels] == ["localhost:9090", "localhost:9091"]
    assert s.samples["value"].to_list() == [1, 1, 1, 0, 0, 1]
    assert s.samples["ts"][0] == datetime(2015, 7, 1, 20, 10, 30, 781000, tzinfo=UTC)
    empty = parse_body((API / "kops_query_vector_empty.json").read_bytes())
    assert empty.labels == [] and empty.n_samples == 0
    dcgm = parse_body((API / "rafay_query_vector_dcgm_pretty.json").read_bytes())
    assert dcgm.labels[0]["Hostname"] == "ip-10-200-3-41" and dcgm.n_samples == 1


def test_bare_result_list_with_jitter_and_two_intervals() -> None:
    result = json.loads((API / "redhat_up_matrix_result_list.json").read_text())
    s = series_from_result(result)
    assert len(s.labels) == 9
    assert s.n_samples == sum(len(r["values"]) for r in result)
    body = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}},
        separators=(",", ":"),
    ).encode()
    cols = ["sid", "ts", "value"]  # the fast path gives the same samples (text is not kept)
    assert parse_body(body).samples.select(cols).equals(s.samples.select(cols))
    steps = s.samples.filter(pl.col("sid") == 0)["ts"].diff().drop_nulls().dt.total_milliseconds()
    assert min(steps.to_list()) < 20_000 < max(steps.to_list())  # jitter, as recorded


def test_error_answers_are_one_sentence() -> None:
    body = b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'
    with pytest.raises(ResponseError, match="bad_data: parse error"):
        parse_body(body)
    with pytest.raises(ResponseError, match="not JSON"):
        parse_body(b"<html>502 Bad Gateway</html>")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(
                st.sampled_from(["a", "b", "Hostname", "x"]), st.text(max_size=12), max_size=3
            ),
            st.lists(
                st.tuples(
                    st.integers(1_600_000_000_000, 1_900_000_000_000),
                    st.one_of(
                        st.floats(allow_nan=False, width=64).map(repr),
                        st.sampled_from(["NaN", "+Inf", "-Inf", "0", "1e+10"]),
                    ),
                ),
                max_size=6,
            ),
        ),
        max_size=5,
    )
)
def test_fast_path_equals_plain_json(
    series: list[tuple[dict[str, str], list[tuple[int, str]]]],
) -> None:
    result = [
        {"metric": labels, "values": [[ms / 1000, v] for ms, v in points]}
        for labels, points in series
    ]
    body = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}},
        separators=(",", ":"),
    ).encode()
    fast = parse_body(body)
    if any(points for _, points in series):
        assert _fast(body) is not None  # the fast path was taken, not the fallback
    assert fast.labels == [lb for lb, _ in series]
    cols = ["sid", "ts", "value"]
    assert fast.samples.select(cols).equals(_slow(body).select(cols))


def test_label_variants() -> None:
    cfg = PrometheusLabels()
    assert host_of({"Hostname": "a", "hostname": "b"}, cfg) == "a"
    assert host_of({"hostname": "b"}, cfg) == "b"
    assert host_of({"instance": "node1:9100"}, cfg) == "node1"
    assert host_of({"instance": "[::1]:9100"}, cfg) == "[::1]"
    assert host_of({"Hostname": ""}, cfg) is None
    assert job_of({"hpc_job": "42", "pod": "p"}, cfg) == "42"
    assert job_of({"pod": "train-0", "namespace": "ml"}, cfg) == "ml/train-0"
    assert job_of({"pod_name": "old", "pod_namespace": "ns"}, cfg) == "ns/old"
    # behind a ServiceMonitor: exported_* is the workload, pod is the exporter
    served = {
        "pod": "dcgm-exporter-zxgzh",
        "namespace": "default",
        "job": "dcgm-exporter",
        "exported_pod": "train-1",
        "exported_namespace": "ml",
    }
    assert job_of(served, cfg) == "ml/train-1"
    # the real capture: only the exporter's own pod -> no workload
    upcloud = json.loads((API / "upcloud_query_vector_dcgm.json").read_text())
    labels = upcloud["data"]["result"][0]["metric"]
    assert job_of(labels, cfg) is None
    assert job_of({"pod": "", "namespace": ""}, cfg) is None


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 10**9),
    st.integers(1, 10 * 86400),
    st.integers(100, 11000),
    st.sampled_from([1.0, 10.0, 15.0, 30.0, 60.0]),
)
def test_windows_cover_without_overlap_and_respect_the_point_limit(
    start_s: int, length_s: int, max_points: int, interval: float
) -> None:
    from datetime import timedelta

    from gpuwaste.config import PrometheusSource
    from gpuwaste.ingest.prometheus.source import plan_windows, window_length

    src = PrometheusSource(
        url="http://x", max_points_per_query=max_points, scrape_interval_s=interval
    )
    start = datetime.fromtimestamp(start_s, UTC)
    end = start + timedelta(seconds=length_s)
    windows = plan_windows(start, end, window_length(src))
    assert windows[0][0] == start and windows[-1][1] == end
    assert all(a < b for a, b in windows)
    assert all(windows[i][1] == windows[i + 1][0] for i in range(len(windows) - 1))
    # samples at the scrape interval in [a - 2 intervals, b): at most max_points
    longest = max((b - a).total_seconds() for a, b in windows)
    assert longest / interval + 2 + 1 <= max_points
