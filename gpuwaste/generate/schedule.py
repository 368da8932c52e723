"""A small event-driven scheduler: Poisson arrivals per VC, a FIFO queue with backfill and one
reservation (hosts drained for the job that has waited longest), placement on free GPUs (jobs of up to 8 GPUs on one host, larger jobs on whole hosts).

The cluster is empty at the window start. Jobs still queued at the window end are dropped (they
appear in no output); jobs running at the window end are RUNNING with no end.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from gpuwaste.generate import params
from gpuwaste.generate.model import GeneratorSpec, Job
from gpuwaste.generate.queue_truth import QueueLog, vc_quotas
from gpuwaste.generate.workload import Submission, Workload

RESERVE_AFTER_S = 1800  # a job queued this long gets hosts drained for it (one at a time)
_FINISH, _CANCEL, _ARRIVE = 0, 1, 2


@dataclass
class _Running:
    sub: Submission
    raw_id: int
    start: int
    alloc: list[tuple[int, int]]


class Scheduler:
    def __init__(self, spec: GeneratorSpec, workload: Workload, rng: np.random.Generator) -> None:
        self.spec = spec
        self.wl = workload
        self.rng = rng
        self.horizon = spec.duration_s
        n_hosts = spec.n_hosts
        self.free: list[list[bool]] = [[True] * params.GPUS_PER_HOST for _ in range(n_hosts)]
        self.free_count = [params.GPUS_PER_HOST] * n_hosts
        self.total_free = spec.n_gpus
        self.queue: list[Submission] = []
        self.events: list[tuple[int, int, int, int]] = []  # (time, kind, seq, key)
        self.subs: dict[int, Submission] = {}
        self.running: dict[int, _Running] = {}
        self.done: list[tuple[Submission, int, int, int | None, list[tuple[int, int]]]] = []
        self.next_id = int(rng.integers(20_000, 900_000))
        self.seq = 0
        self.chain = 0
        self.array_left: dict[int, int] = {}  # master id -> tasks not started yet
        self.host_jobs: list[dict[int, tuple[int, int]]] = [{} for _ in range(n_hosts)]
        self.reserved_for: Submission | None = None  # the one job holding a reservation
        self.reserved: set[int] = set()  # hosts being drained for it
        # with spec.vc_quotas: quotas enforced (a VC holding its quota starts nothing) and the
        # truth of each wait's causes logged (queue_truth.py); without, nothing changes
        self.log = QueueLog(vc_quotas(workload.vcs, spec.n_gpus)) if spec.vc_quotas else None
        self.vc_held: dict[str, int] = {}

    # --- helpers ----------------------------------------------------------------------------------
    def _push(self, t: int, kind: int, seq: int) -> None:
        heapq.heappush(self.events, (t, kind, seq, seq))

    def _take_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def _submit(self, subs: list[Submission]) -> None:
        master = None
        if subs[0].array_task is not None:
            master = self._take_id()
            self.array_left[master] = len(subs)
        for s in subs:
            self.subs[s.seq] = s
            if master is not None:
                s.array_master = master
            self._push(s.submit, _ARRIVE, s.seq)
            if s.cancel_at is not None:
                self._push(s.cancel_at, _CANCEL, s.seq)

    # --- arrivals -------------------------------------------------------------------------------
    def generate_arrivals(self) -> None:
        mean_gs = self.wl.mean_gpu_seconds()
        rate = params.TARGET_LOAD * self.spec.n_gpus / mean_gs  # fresh submissions per second
        w = np.array(params.VC_WEIGHTS[: len(self.wl.vcs)])
        w = w / w.sum()
        arrivals: list[tuple[int, int]] = []
        for v, share in enumerate(w):
            t = 0.0
            while True:
                t += float(self.rng.exponential(1.0 / (rate * share)))
                if t >= self.horizon:
                    break
                arrivals.append((int(t), v))
        arrivals.sort()
        batches: list[list[Submission]] = []
        for t, v in arrivals:
            subs = self.wl.fresh(t, self.wl.vcs[v], self.seq, self.chain)
            self.seq += len(subs)
            self.chain += len(subs)
            batches.append(subs)
        self._guarantee([s for b in batches for s in b])
        for subs in batches:
            self._submit(subs)

    def _guarantee(self, subs: list[Submission]) -> None:
        """Make sure the rare planted cases exist even in a small window: a few debug jobs that
        hit the 8 h limit (when the window is long enough) and a job cancelled while queued."""
        limit = params.DEBUG_LIMIT_S
        latest = self.horizon - limit - 2 * 3600  # leaves room for queueing
        if latest > 0:
            early = [s for s in subs if s.submit <= latest and s.array_task is None]
            have = sum(1 for s in early if s.is_debug and s.raw_state == "TIMEOUT")
            need = max(0, min(3, round(self.horizon / 86400 * 2)) - have)
            for s in [s for s in early if s.is_debug and s.raw_state != "TIMEOUT"][:need]:
                s.raw_state, s.exit_code, s.duration = "TIMEOUT", "0:0", limit
                need -= 1
            for s in [s for s in early if not s.is_debug and s.gpus == 1][:need]:
                s.is_debug, s.partition, s.qos, s.name = True, "debug", "debug", "interactive"
                s.raw_state, s.exit_code, s.duration, s.timelimit_s = "TIMEOUT", "0:0", limit, limit
                s.retries_left, s.cancel_at = 0, None
        if not any(s.cancel_at is not None for s in subs):
            killed = [s for s in subs if s.raw_state.startswith("CANCELLED") and not s.is_debug]
            killed = [s for s in killed if s.array_task is None]
            if killed:
                killed[0].cancel_at = killed[0].submit + 30

    # --- placement ------------------------------------------------------------------------------
    def _place(self, gpus: int, exclude: set[int]) -> list[tuple[int, int]] | None:
        if gpus > self.total_free:
            return None
        g = params.GPUS_PER_HOST
        if gpus <= g:
            fits = [h for h, c in enumerate(self.free_count) if c >= gpus and h not in exclude]
            if not fits:
                return None
            best = min(self.free_count[h] for h in fits)
            ties = [h for h in fits if self.free_count[h] == best]
            h = ties[int(self.rng.integers(len(ties)))]
            free = [i for i in range(g) if self.free[h][i]]
            pick = sorted(int(x) for x in self.rng.choice(free, size=gpus, replace=False))
            return [(h, i) for i in pick]
        need = gpus // g
        empty = [h for h, c in enumerate(self.free_count) if c == g and h not in exclude]
        if len(empty) < need:
            return None
        hosts = sorted(int(x) for x in self.rng.choice(empty, size=need, replace=False))
        return [(h, i) for h in hosts for i in range(g)]

    def _occupy(self, seq: int, end: int, alloc: list[tuple[int, int]], value: bool) -> None:
        for h, i in alloc:
            self.free[h][i] = value
            self.free_count[h] += 1 if value else -1
            if value:
                self.host_jobs[h].pop(seq, None)
            else:
                ends = self.host_jobs[h]
                ends[seq] = (end, ends.get(seq, (end, 0))[1] + 1)
        self.total_free += len(alloc) if value else -len(alloc)
        vc = self.subs[seq].vc
        self.vc_held[vc] = self.vc_held.get(vc, 0) + (-len(alloc) if value else len(alloc))

    def _over_quota(self, s: Submission) -> bool:
        return self.log is not None and self.vc_held.get(s.vc, 0) >= self.log.quotas[s.vc]

    def _cause(self, s: Submission) -> str:
        """Why a queued job cannot start now, by the rules the analysis applies to the data."""
        if self._over_quota(s):
            return "fair-share"
        if s.gpus > self.total_free:
            return "capacity"
        g = params.GPUS_PER_HOST
        if s.gpus <= g:
            placed = any(c >= s.gpus for c in self.free_count)
        else:
            placed = sum(1 for c in self.free_count if c == g) >= s.gpus // g
        return "other" if placed else "fragmentation"

    def _log_decision(self, now: int, started: list[Submission]) -> None:
        if self.log is None:
            return
        self.log.close(now)
        waiting = [s for s in self.queue if s.cancel_at is None]
        self.log.open(now, waiting, started, self._cause)

    def _start(self, s: Submission, now: int, alloc: list[tuple[int, int]]) -> None:
        if s.array_master is not None:
            left = self.array_left[s.array_master] - 1
            self.array_left[s.array_master] = left
            raw = s.array_master if left == 0 else self._take_id()
        else:
            assert s.raw_id is not None
            raw = s.raw_id
        s.raw_id = raw
        end = now + s.duration
        self._occupy(s.seq, end, alloc, False)
        self.running[s.seq] = _Running(s, raw, now, alloc)
        if end <= self.horizon:
            self._push(end, _FINISH, s.seq)

    def _reserve(self, gpus: int, now: int) -> set[int]:
        """Hosts to drain for a job that has waited too long: those that free up soonest."""
        g = params.GPUS_PER_HOST
        if gpus <= g:
            best: tuple[int, int] | None = None
            for h in range(len(self.free_count)):
                free = self.free_count[h]
                t = now
                for end, n in sorted(self.host_jobs[h].values()):
                    if free >= gpus:
                        break
                    free += n
                    t = end
                if best is None or (t, h) < best:
                    best = (t, h)
            assert best is not None
            return {best[1]}
        when = sorted(
            (max((e for e, _ in self.host_jobs[h].values()), default=now), h)
            for h in range(len(self.free_count))
        )
        return {h for _, h in when[: gpus // g]}

    def _try_schedule(self, now: int) -> None:
        started: list[Submission] = []
        self._schedule(now, started)
        self._log_decision(now, started)

    def _schedule(self, now: int, started: list[Submission]) -> None:
        if self.total_free == 0 or not self.queue:
            return
        for s in self.queue:
            if self.total_free == 0:
                break
            if s.cancel_at is not None:
                continue  # held: its user cancels it before it can start
            if self._over_quota(s):
                continue  # its VC holds its quota (only with spec.vc_quotas)
            mine = s is self.reserved_for
            alloc = self._place(s.gpus, set() if mine else self.reserved)
            if alloc is None:
                if self.reserved_for is None and now - s.submit >= RESERVE_AFTER_S:
                    self.reserved_for = s
                    self.reserved = self._reserve(s.gpus, now)
                continue
            if mine:
                self.reserved_for = None
                self.reserved = set()
            self._start(s, now, alloc)
            started.append(s)
        if started:
            ids = {id(s) for s in started}
            self.queue = [s for s in self.queue if id(s) not in ids]

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> None:
        self.generate_arrivals()
        while self.events:
            t, kind, seq, _ = heapq.heappop(self.events)
            s = self.subs[seq]
            if kind == _ARRIVE:
                if s.array_master is None:
                    s.raw_id = self._take_id()
                if s.is_debug:  # the debug partition has priority over batch work
                    n_debug = sum(1 for q in self.queue if q.is_debug)
                    self.queue.insert(n_debug, s)
                else:
                    self.queue.append(s)
            elif kind == _CANCEL:
                if s in self.queue:  # identity comparison (eq=False)
                    self.queue.remove(s)
                    assert s.raw_id is not None
                    self.done.append((s, s.raw_id, t, t, []))
            else:
                r = self.running.pop(seq)
                self._occupy(seq, t, r.alloc, True)
                self.done.append((s, r.raw_id, r.start, t, r.alloc))
                if s.retries_left > 0:
                    t_next = t + int(self.rng.integers(10, 300))
                    if t_next < self.horizon:
                        nxt = self.wl.retry(s, t_next, self.seq)
                        self.seq += 1
                        self._submit([nxt])
            # schedule once all events at this instant are processed
            if not self.events or self.events[0][0] != t:
                self._try_schedule(t)
        for r in self.running.values():
            self.done.append((r.sub, r.raw_id, r.start, None, r.alloc))

    def queue_truth(self, jobs: list[Job]) -> dict[str, object] | None:
        """The queue's planted truth (spec.vc_quotas), for the jobs that started."""
        if self.log is None:
            return None
        seqs = [s.seq for s, *_ in self._rows()]
        started = {seq: job.job_id for job, seq in zip(jobs, seqs, strict=True) if job.alloc}
        return self.log.truth(started)

    def _rows(self) -> list[tuple[Submission, int, int, int | None, list[tuple[int, int]]]]:
        """The finished, cancelled and running jobs in the order of jobs()."""
        return sorted(
            self.done,
            key=lambda d: (
                d[0].submit,
                d[0].array_master if d[0].array_master is not None else d[1],
                d[0].array_task or 0,
            ),
        )

    def jobs(self) -> list[Job]:
        """Finished, cancelled-pending and running jobs, ordered by submission."""
        rows = self._rows()
        jobs: list[Job] = []
        for s, raw, start, end, alloc in rows:
            running = end is None
            if s.array_master is not None:
                slurm_id = f"{s.array_master}_{s.array_task}"
            else:
                slurm_id = str(raw)
            jobs.append(
                Job(
                    index=len(jobs),
                    job_id=str(raw),
                    slurm_job_id=slurm_id,
                    user=s.user,
                    uid=self.wl.users[s.user][0],
                    vc=s.vc,
                    name=s.name,
                    partition=s.partition,
                    qos=s.qos,
                    is_debug=s.is_debug,
                    gpus=s.gpus,
                    submit=s.submit,
                    start=start,
                    end=end,
                    raw_state="RUNNING" if running else s.raw_state,
                    exit_code="0:0" if running else s.exit_code,
                    timelimit_s=s.timelimit_s,
                    alloc=sorted(alloc),
                    chain=s.chain,
                    chain_pos=s.chain_pos,
                    array_id=s.array_master,
                    array_task=s.array_task,
                    typed_gres=s.typed_gres,
                )
            )
        return jobs
