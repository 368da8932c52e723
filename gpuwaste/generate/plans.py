"""What each job's GPUs do: the planted behaviour, as run-length segment plans, and data gaps.

A plan is drawn from its own generator (seed, job index), so plans do not depend on one another
or on how the series are later cut into windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwaste.generate import busy_loops, params
from gpuwaste.generate.model import BUSY, FLUCT, IDLE, STALL, Gap, GeneratorSpec, Job, JobPlan
from gpuwaste.generate.policy_cases import policy_kind, policy_timeline


@dataclass(frozen=True)
class Lengths:
    """Sample counts that keep planted runs clear of the 60 s idle-slot threshold by at least
    one sampling interval, whichever way an analysis measures a run."""

    dt: int

    def ns(self, seconds: float) -> int:
        return max(1, math.ceil(seconds / self.dt))

    @property
    def idle_min(self) -> int:
        # middle/start runs last k*dt >= 90 s; end runs last more than (k-1)*dt >= 75 s
        return max(2, self.ns(90), self.ns(75) + 1)

    @property
    def short_max(self) -> int:
        return 45 // self.dt  # k*dt <= 45 s; 0 means no short runs at this interval

    @property
    def long_edge(self) -> int:
        # >= 10 min of idleness at a job's start or end, with one interval to spare
        return self.ns(630) + 1


def sample_range(spec: GeneratorSpec, job: Job) -> tuple[int, int]:
    """First sample index and number of samples t with start <= t < end (or the window end)."""
    dt = spec.interval_s
    i0 = -(-job.start // dt)
    end = spec.duration_s if job.end is None else job.end
    i1 = min(spec.n_samples, -(-end // dt))
    return i0, max(0, i1 - i0)


Timeline = list[tuple[int, int]]  # (mode, length)


def _distribute(rng: np.random.Generator, free: int, parts: int, minimum: int) -> list[int]:
    extra = free - minimum * parts
    cuts = sorted(int(x) for x in rng.integers(0, extra + 1, size=parts - 1))
    bounds = [0, *cuts, extra]
    return [minimum + bounds[i + 1] - bounds[i] for i in range(parts)]


def _idle_edge(
    rng: np.random.Generator,
    n: int,
    lens: Lengths,
    p: float,
    long_p: float,
    tag: str,
    tags: set[str],
) -> Timeline:
    """An idle stretch at one edge of a batch job of `n` samples (`tag`: a slow start, or GPUs
    not released at the end), drawn with probability `p`; a long one (`<tag>_long`, from
    `lens.long_edge` samples) with probability `long_p`. `tags` gets the tags drawn."""
    im = lens.idle_min
    if not (n >= 4 * im and rng.random() < p):
        return []
    if rng.random() < long_p and n >= 3 * lens.long_edge:
        k = int(rng.integers(lens.long_edge, max(lens.long_edge + 1, min(n // 3, lens.ns(1800)))))
        tags.add(f"{tag}_long")
    else:
        k = int(rng.integers(im, max(im + 1, min(n // 4, lens.ns(480)))))
    tags.add(tag)
    return [(IDLE, k)]


def _batch_timeline(rng: np.random.Generator, n: int, lens: Lengths, tags: set[str]) -> Timeline:
    im = lens.idle_min
    head = _idle_edge(
        rng, n, lens, params.SLOW_START_P, params.SLOW_START_LONG_P, "slow_start", tags
    )
    tail = _idle_edge(
        rng, n, lens, params.UNRELEASED_P, params.UNRELEASED_LONG_P, "unreleased", tags
    )
    m = n - sum(k for _, k in head) - sum(k for _, k in tail)
    if m <= 0:  # cannot happen given the bounds above, but keep the plan well formed
        return [(BUSY, n)] if n > 0 else []
    sep = 3  # busy samples between two insertions, so zero runs never merge
    body: Timeline
    if m * lens.dt >= 6000 and rng.random() < params.CHECKPOINT_P:
        period = lens.ns(float(rng.uniform(600, 1200)))
        dip = lens.ns(float(rng.uniform(60, 180)))
        body = []
        pos = 0
        while pos + period + dip + sep <= m:
            body += [(BUSY, period), (STALL, dip)]
            pos += period + dip
        body.append((BUSY, m - pos))
        tags.add("checkpointing")
        return head + body + tail
    inserts: Timeline = []
    if rng.random() < params.MID_IDLE_P:
        for _ in range(int(rng.integers(1, 4))):
            longest = max(1200.0, 0.08 * m * lens.dt)
            inserts.append((IDLE, lens.ns(float(rng.uniform(im * lens.dt, longest)))))
    if lens.short_max >= 1 and rng.random() < params.SHORT_ZERO_P:
        lo = min(2, lens.short_max)
        for _ in range(int(rng.integers(1, 4))):
            inserts.append((IDLE, int(rng.integers(lo, lens.short_max + 1))))
    if rng.random() < params.STALL_P:
        for _ in range(int(rng.integers(1, 4))):
            inserts.append((STALL, lens.ns(float(rng.uniform(60, max(900.0, 0.15 * m * lens.dt))))))
    order = rng.permutation(len(inserts)).tolist()
    inserts = [inserts[i] for i in order]
    while inserts and (
        sum(k for _, k in inserts) > 0.6 * m
        or m - sum(k for _, k in inserts) < sep * (len(inserts) + 1)
    ):
        inserts.pop()
    if not inserts:
        return [*head, (BUSY, m), *tail]
    chunks = _distribute(rng, m - sum(k for _, k in inserts), len(inserts) + 1, sep)
    body = [(BUSY, chunks[0])]
    for ins, c in zip(inserts, chunks[1:], strict=True):
        body += [ins, (BUSY, c)]
        if ins[0] == IDLE:
            tags.add("mid_idle" if ins[1] >= im else "short_zero")
        else:
            tags.add("stall")
    return head + body + tail


def _debug_timeline(rng: np.random.Generator, n: int, lens: Lengths) -> Timeline:
    """Mostly idle with a few bursts; sometimes memory is held while idle (a live kernel)."""
    out: Timeline = []
    pos = 0
    idle_next = bool(rng.random() < 0.7) and n >= 2 * lens.idle_min
    while pos < n:
        if idle_next:
            seg = (IDLE, lens.ns(float(rng.uniform(300, 3600))))
        else:
            seg = (BUSY, lens.ns(float(rng.uniform(60, 600))))
        k = min(seg[1], n - pos)
        if seg[0] == IDLE and k < lens.idle_min:
            # too short to be clearly an idle slot: extend what came before instead
            mode, prev = out[-1]
            out[-1] = (mode, prev + k)
        else:
            out.append((seg[0], k))
        pos += k
        if not idle_next and pos < n and rng.random() < 0.3:
            stall_len = min(lens.ns(float(rng.uniform(300, 1800))), n - pos)
            out.append((STALL, stall_len))
            pos += stall_len
        idle_next = not idle_next
    return out


def _level(rng: np.random.Generator, cap: int, prev: int | None, high: bool = False) -> int:
    top = cap - params.GPU_OFFSET_MIB - params.MEM_NOISE_MIB - 1024
    for _ in range(100):
        if high:
            x = int(rng.integers(int(0.9 * cap), top + 1))
        else:
            x = params.MIN_LEVEL_MIB + int(float(rng.beta(1.3, 2.5)) * (top - params.MIN_LEVEL_MIB))
        if prev is None or abs(x - prev) >= params.MIN_LEVEL_JUMP_MIB:
            return x
    return params.MIN_LEVEL_MIB if prev is not None and prev > cap // 2 else top


def _util_mean(rng: np.random.Generator) -> float:
    a, b = params.UTIL_BETA
    return 100.0 * float(rng.beta(a, b))


def _segments(
    rng: np.random.Generator,
    timeline: Timeline,
    cap: int,
    dt: int,
    flags: tuple[bool, bool, bool],
) -> list[tuple[int, int, int, float]]:
    """Give the non-idle stretches memory levels (phases) and utilization means."""
    debug, oom, fluct = flags
    segs: list[tuple[int, int, int, float]] = []
    active = sum(k for m, k in timeline if m != IDLE)
    if debug:
        level: int | None = None
        for mode, k in timeline:
            if mode == IDLE:
                segs.append((IDLE, k, 0, 0.0))
                continue
            if mode == BUSY or level is None:
                level = _level(rng, cap, level)
            segs.append((mode, k, level, _util_mean(rng)))
        return segs
    n_phases = 1 + int(rng.poisson(active * dt / params.PHASE_MEAN_S)) if active else 1
    n_phases = min(n_phases, 1 + active // 40)
    cuts: set[int] = set()
    if n_phases > 1:
        for c in rng.integers(8, max(9, active - 8), size=n_phases - 1).tolist():
            if all(abs(c - x) >= 8 for x in cuts):
                cuts.add(int(c))
    levels: list[int] = []
    prev: int | None = None
    for p in range(len(cuts) + 1):
        last = p == len(cuts)
        prev = _level(rng, cap, prev, high=oom and last)
        levels.append(prev)
    mus = [_util_mean(rng) for _ in levels]
    bounds = sorted(cuts)
    a = 0  # position among active samples
    for mode, k in timeline:
        if mode == IDLE:
            segs.append((IDLE, k, 0, 0.0))
            continue
        done = 0
        while done < k:
            ph = sum(1 for c in bounds if c <= a + done)
            nxt = next((c for c in bounds if c > a + done), None)
            take = k - done if nxt is None else min(k - done, nxt - (a + done))
            m = FLUCT if (mode == BUSY and fluct) else mode
            segs.append((m, take, levels[ph], mus[ph]))
            done += take
        a += k
    return segs


def build_plan(spec: GeneratorSpec, job: Job, busy_loop: bool = False) -> JobPlan | None:
    """The plan of one job that ran, or None for a job cancelled before it started; `busy_loop`:
    the job is a planted busy loop (generate/busy_loops.py), memory held on every GPU throughout
    (its utilization is set by series.alloc_series)."""
    if not job.alloc:
        return None
    rng = np.random.default_rng([spec.seed, 1, job.index])
    lens = Lengths(spec.interval_s)
    i0, n = sample_range(spec, job)
    tags: set[str] = set()
    slots = len(job.alloc)
    cpu_per_gpu = float(rng.uniform(2.0, 9.0))
    hostmem = float(rng.uniform(0.01, 0.08))
    never: set[int] = set()
    kind = policy_kind(spec, job)
    if busy_loop:
        tags.add(busy_loops.TAG)
        segs = _segments(rng, [(BUSY, n)], spec.gpu_mem_mib, spec.interval_s, (False, False, False))
    elif kind is not None:  # --policy-cases: busy then idle, or idle then busy, on every GPU
        tags.add(kind)
        timeline = policy_timeline(rng, n, kind)
        segs = _segments(rng, timeline, spec.gpu_mem_mib, spec.interval_s, (False, False, False))
    else:
        if not job.is_debug and rng.random() < params.NON_DL_P:
            never = set(range(slots))
            cpu_per_gpu = float(rng.uniform(9.0, 12.0))
            tags.add("non_dl")
        elif slots > 1 and rng.random() < (0.3 if job.is_debug else params.OVERSUB_P):
            k = int(rng.integers(1, slots // 2 + 1))
            never = {int(x) for x in rng.choice(slots, size=k, replace=False)}
            tags.add("oversubscription")
        running = job.end is None
        if job.is_debug:
            timeline = _debug_timeline(rng, n, lens)
            tags.add("debug")
        else:
            timeline = _batch_timeline(rng, n, lens, tags)
            if running:  # no unreleased tail on a job that has not ended
                timeline = _drop_tail(timeline, tags)
        fluct = not job.is_debug and rng.random() < params.FLUCTUATING_P
        if fluct:
            tags.add("fluctuating")
        oom = job.raw_state == "OUT_OF_MEMORY"
        segs = _segments(
            rng, timeline, spec.gpu_mem_mib, spec.interval_s, (job.is_debug, oom, fluct)
        )
    offsets = rng.integers(-params.GPU_OFFSET_MIB, params.GPU_OFFSET_MIB + 1, size=slots)
    if never:
        tags.add("never_used")
    return JobPlan(
        i0=i0,
        n=n,
        seg_len=np.array([s[1] for s in segs], dtype=np.int32),
        seg_mode=np.array([s[0] for s in segs], dtype=np.int8),
        seg_level=np.array([s[2] for s in segs], dtype=np.int32),
        seg_mu=np.array([s[3] for s in segs], dtype=np.float32),
        never_used=frozenset(never),
        gpu_offset=offsets.astype(np.int32),
        cpu_per_gpu=cpu_per_gpu,
        hostmem_per_gpu=hostmem,
        tags=frozenset(tags),
    )


def _drop_tail(timeline: Timeline, tags: set[str]) -> Timeline:
    if "unreleased" in tags and len(timeline) > 1 and timeline[-1][0] == IDLE:
        mode, k = timeline[-2]
        tags.discard("unreleased")
        tags.discard("unreleased_long")
        return [*timeline[:-2], (mode, k + timeline[-1][1])]
    return timeline


def slot_levels(plan: JobPlan, slot: int) -> np.ndarray:
    """Per-segment planted memory level of one GPU slot (0 where idle)."""
    if slot in plan.never_used:
        return np.zeros(len(plan.seg_len), dtype=np.int32)
    lv = plan.seg_level + plan.gpu_offset[slot]
    return np.where(plan.seg_level > 0, lv, 0).astype(np.int32)


def place_gaps(spec: GeneratorSpec, jobs: list[Job]) -> list[Gap]:
    """A few 10-minute stretches with no GPU-exporter samples: half inside a steady memory phase
    of a job (two or more samples clear of its edges), half in unallocated time (two or more
    samples clear of any allocation)."""
    rng = np.random.default_rng([spec.seed, 4])
    lens = Lengths(spec.interval_s)
    length = lens.ns(600)
    margin = 2
    want = max(2, round(spec.n_gpus * spec.days / 16))
    gaps: list[Gap] = []
    taken: dict[int, list[tuple[int, int]]] = {}

    def free_of_gaps(g: int, a: int, b: int) -> bool:
        return all(b + margin <= x or a >= y + margin for x, y in taken.get(g, []))

    def add(g: int, a: int) -> None:
        gaps.append(Gap(g, a, a + length))
        taken.setdefault(g, []).append((a, a + length))

    # inside phases
    candidates: list[tuple[int, int, int]] = []  # (gpu, first, last) sample ranges of phases
    for job in jobs:
        plan = job.plan
        if plan is None:
            continue
        for slot, (h, i) in enumerate(job.alloc):
            if slot in plan.never_used:
                continue
            lv = slot_levels(plan, slot)
            pos = plan.i0
            for k, level in zip(plan.seg_len.tolist(), lv.tolist(), strict=True):
                if level > 0 and k >= length + 2 * margin + 2:
                    candidates.append((h * params.GPUS_PER_HOST + i, pos, pos + k))
                pos += k
    # segments split a phase into several (busy/stall pieces); any one piece suffices
    for _ in range(want // 2 + want % 2):
        if not candidates:
            break
        g, a, b = candidates[int(rng.integers(len(candidates)))]
        s = int(rng.integers(a + margin, b - margin - length + 1))
        if free_of_gaps(g, s, s + length):
            add(g, s)
    # unallocated stretches
    busy: dict[int, list[tuple[int, int]]] = {}
    for job in jobs:
        if job.plan is not None and job.plan.n > 0:
            for h, i in job.alloc:
                busy.setdefault(h * params.GPUS_PER_HOST + i, []).append(
                    (job.plan.i0, job.plan.i0 + job.plan.n)
                )
    free_runs: list[tuple[int, int, int]] = []
    for g in range(spec.n_gpus):
        pos = 0
        for a, b in [*sorted(busy.get(g, [])), (spec.n_samples, spec.n_samples)]:
            lo, hi = (pos + margin if pos > 0 else 0), a - margin
            if hi - lo >= length:
                free_runs.append((g, lo, hi))
            pos = max(pos, b)
    for _ in range(want // 2):
        if not free_runs:
            break
        g, a, b = free_runs[int(rng.integers(len(free_runs)))]
        s = int(rng.integers(a, b - length + 1))
        if free_of_gaps(g, s, s + length):
            add(g, s)
    return sorted(gaps, key=lambda x: (x.gpu, x.k0))
