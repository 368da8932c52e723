"""The planted truth of why queued jobs waited (`GeneratorSpec.vc_quotas`): VC quotas the
scheduler enforces, and, from the scheduler's own state between its decisions, each started job's
waiting seconds by cause and whether its start jumped the queue, by the rules of
docs/definitions.md#queueing-causes (the analysis judges the same from the data alone)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwaste.generate import params

CAUSES = ("fair-share", "capacity", "fragmentation", "other")
QUOTA_SHARE = 0.6  # a VC's quota: this share of its share of the GPUs (VC_WEIGHTS)


def vc_quotas(vcs: Sequence[str], n_gpus: int) -> dict[str, int]:
    """GPUs per VC: QUOTA_SHARE of its arrival share of the cluster, at least one host's GPUs (so
    that any job up to one host can start in an idle VC)."""
    weights = params.VC_WEIGHTS[: len(vcs)]
    total = sum(weights)
    return {
        vc: max(params.GPUS_PER_HOST, round(n_gpus * w / total * QUOTA_SHARE))
        for vc, w in zip(vcs, weights, strict=True)
    }


def per_host(gpus: int) -> int:
    """GPUs per host of a job as the scheduler places it (up to a host; larger on whole hosts)."""
    return min(gpus, params.GPUS_PER_HOST)


@dataclass
class QueueLog:
    """Seconds by cause per queued submission (by seq) and the start decisions that jumped it."""

    quotas: dict[str, int]
    seconds: dict[int, dict[str, int]] = field(default_factory=dict)
    cause_now: dict[int, str] = field(default_factory=dict)
    since: int = 0
    # per started seq: the earlier-submitted seqs that waited then and that it would have fitted
    jumped: dict[int, list[int]] = field(default_factory=dict)

    def close(self, now: int) -> None:
        """Add the time since the last decision to each queued job's cause then."""
        for seq, cause in self.cause_now.items():
            secs = self.seconds.setdefault(seq, dict.fromkeys(CAUSES, 0))
            secs[cause] += now - self.since
        self.since = now

    def open(
        self,
        now: int,
        queued: Sequence[Any],
        started: Sequence[Any],
        cause: Callable[[Any], str],
    ) -> None:
        """After a decision at `now`: each still-queued job's cause until the next one, and for
        each job started now, the earlier-submitted queued jobs that its GPUs would have fitted
        and that did not wait for fair-share."""
        self.since = now
        self.cause_now = {s.seq: cause(s) for s in queued}
        for b in started:
            self.jumped[b.seq] = [
                a.seq
                for a in queued
                if a.submit < b.submit
                and a.gpus <= b.gpus
                and per_host(a.gpus) <= per_host(b.gpus)
                and self.cause_now[a.seq] != "fair-share"
            ]

    def truth(self, started: dict[int, str]) -> dict[str, Any]:
        """truth.json's `queue`: the quotas, and per started job (seq -> job id) its waiting
        seconds by cause and whether its start was out of order (a jumped job counts only if it
        started too: a job that never started has no wait in the data)."""
        waits = []
        for seq, job_id in started.items():
            secs = self.seconds.get(seq, dict.fromkeys(CAUSES, 0))
            jumped = [a for a in self.jumped.get(seq, []) if a in started]
            waits.append(
                {
                    "job_id": job_id,
                    **{f"{c.replace('-', '_')}_s": secs[c] for c in CAUSES},
                    "out_of_order": bool(jumped),
                }
            )
        waits.sort(key=lambda w: str(w["job_id"]))
        return {"vc_quotas": self.quotas, "waits": waits}
