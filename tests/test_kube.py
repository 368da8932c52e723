"""kube-state-metrics pods -> jobs, on two real scrapes (Kubernetes 1.24 and 1.35).

The captured clusters have no GPUs, so these tests treat `cpu` as the resource that makes a pod
a job: the joins, phases, times and the 1.24 quirks (no `uid` on most families, a completion-time
family with no samples) are exercised on real output.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from gpuwaste.config import KubernetesJobs
from gpuwaste.ingest.prometheus.kube import merge_jobs, pods_to_jobs
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from tests.conftest import FIXTURES

KSM = FIXTURES / "kube_state_metrics"
SCRAPED = datetime(2026, 11, 1, tzinfo=UTC)


def _jobs(name: str, **cfg: object) -> pl.DataFrame:
    parsed = parse_text((KSM / name).read_text(), default_ts=SCRAPED)
    assert parsed.refused == []
    return pods_to_jobs(
        parsed.series,
        KubernetesJobs.model_validate({"enabled": True, "gpu_resource": "cpu", **cfg}),
        newest=SCRAPED,
        running_slack=timedelta(seconds=45),
    )


def test_k8s_1_35_pods_become_jobs() -> None:
    jobs = _jobs("nri_kubernetes_k8s_1_35_pod_families.prom", debug_namespaces=["scraper"])
    ids = jobs["job_id"].to_list()
    assert "scraper/e2e-cronjob-29707813-dhlr2" in ids and "kube-system/etcd-datagen-1-35" in ids
    # terminated pods that no longer report requests (the Failed e2e-failjob pods) are not jobs
    # from one scrape; over a window, their earlier request samples make them jobs
    assert not [i for i in ids if "failjob" in i]
    assert jobs["job_id"].n_unique() == jobs.height
    by_id = {r["job_id"]: r for r in jobs.iter_rows(named=True)}
    done = by_id["scraper/e2e-cronjob-29707813-dhlr2"]
    assert (done["state"], done["raw_state"]) == ("passed", "Succeeded")
    assert done["start_ts"] == datetime.fromtimestamp(1.78246878e09, UTC)
    assert done["end_ts"] == datetime.fromtimestamp(1.782468873e09, UTC)
    assert done["name"] == "e2e-cronjob-29707813" and done["vc"] == "scraper"
    assert done["is_debug"] is True
    running = by_id["kube-system/etcd-datagen-1-35"]
    assert (running["state"], running["end_ts"], running["is_debug"]) == ("running", None, False)
    assert running["gpus"] == 0  # a fraction of a core, rounded


def test_k8s_1_24_joins_on_namespace_and_pod() -> None:
    jobs = _jobs("nri_kubernetes_k8s_1_24_pod_families.prom")
    assert jobs.height > 0
    assert jobs["start_ts"].null_count() < jobs.height  # start times joined without uid
    assert jobs["end_ts"].null_count() == jobs.height  # completion family has no samples
    assert set(jobs["state"].drop_nulls()) <= {"running", "passed", "unsuccessful"}


def test_no_gpu_requests_no_jobs_and_merge_keeps_earliest_start() -> None:
    assert (
        _jobs("nri_kubernetes_k8s_1_35_pod_families.prom", gpu_resource="nvidia_com_gpu").height
        == 0
    )
    jobs = _jobs("nri_kubernetes_k8s_1_35_pod_families.prom")
    earlier = jobs.with_columns(pl.col("start_ts") - timedelta(hours=1))
    merged = merge_jobs(earlier, jobs)
    assert merged["start_ts"].drop_nulls().to_list() == earlier["start_ts"].drop_nulls().to_list()
