"""Who submits what: hosts, users, virtual clusters and the jobs they submit (before scheduling)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import numpy as np

from gpuwaste.generate import params
from gpuwaste.generate.model import GeneratorSpec, Host

BATCH_NAMES = {
    "vision": ("resnet50", "vit-b16", "detr-coco", "yolo-v8", "segformer"),
    "nlp": ("bert-large", "gpt2-ft", "t5-base", "llama-lora", "tokenize-corpus"),
    "speech": ("wav2vec2", "conformer", "whisper-ft", "tacotron2"),
    "rl": ("ppo-atari", "impala", "sac-mujoco", "dreamer-v3"),
    "multimodal": ("clip-vitl", "blip2", "llava-ft"),
    "robotics": ("diffusion-policy", "rt1-ft", "act-aloha"),
}
DEBUG_NAMES = ("interactive", "bash", "jupyter")
ARRAY_NAME = "hp-sweep"


def make_hosts(spec: GeneratorSpec, rng: np.random.Generator) -> list[Host]:
    """Hosts gpu-node-001.. with deterministic UUIDs and Philly machine names m<N>."""
    n = spec.n_hosts
    width = max(3, len(str(n)))
    machine_numbers = sorted(rng.choice(4 * n + 8, size=n, replace=False).tolist())
    order = rng.permutation(n).tolist()  # machine numbers are not in host order, as in Philly
    hosts = []
    for h in range(n):
        name = f"gpu-node-{h + 1:0{width}d}"
        uuids = tuple(_uuid(spec.seed, name, g) for g in range(params.GPUS_PER_HOST))
        minors = params.SWAPPED_MINORS if h % 2 == 0 else tuple(range(params.GPUS_PER_HOST))
        hosts.append(Host(h, name, f"m{machine_numbers[order[h]]}", uuids, minors))
    return hosts


def _uuid(seed: int, host: str, gpu: int) -> str:
    d = hashlib.sha256(f"{seed}/{host}/{gpu}".encode()).hexdigest()
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def make_users(
    spec: GeneratorSpec, rng: np.random.Generator
) -> tuple[list[str], dict[str, tuple[int, str]]]:
    """VCs and users: about 10-30 users, each with a home VC; every VC has a home user."""
    n_vcs = 4 if spec.n_gpus < 64 else (5 if spec.n_gpus < 256 else 6)
    vcs = list(params.VC_NAMES[:n_vcs])
    n_users = min(30, max(10, round(8 + spec.n_gpus / 16)))
    names = [
        params.USER_NAMES[i] if i < len(params.USER_NAMES) else f"user{i + 1:03d}"
        for i in range(n_users)
    ]
    w = np.array(params.VC_WEIGHTS[:n_vcs])
    homes = [vcs[i] for i in range(n_vcs)]  # one home user per VC first
    homes += [vcs[int(i)] for i in rng.choice(n_vcs, size=n_users - n_vcs, p=w / w.sum())]
    users = {u: (params.FIRST_UID + i, homes[i]) for i, u in enumerate(names)}
    return vcs, users


def max_job_gpus(n_gpus: int) -> int:
    """Sizes are capped at half the cluster (at least one host): a job that needs the whole
    cluster would drain it for hours, which a small sample cluster cannot absorb."""
    return min(n_gpus, max(params.GPUS_PER_HOST, n_gpus // 2))


@dataclass(eq=False)
class Submission:
    """A job as submitted; the scheduler turns it into a Job when it starts (or is cancelled)."""

    seq: int  # submission order, ties broken by it
    submit: int
    vc: str
    user: str
    name: str
    partition: str
    qos: str
    is_debug: bool
    gpus: int
    raw_state: str
    exit_code: str
    duration: int  # run time if it starts
    timelimit_s: int
    retries_left: int = 0
    chain: int = -1
    chain_pos: int = 0
    array_master: int | None = None
    array_task: int | None = None
    cancel_at: int | None = None  # cancelled while pending at this time (never starts)
    typed_gres: bool = False
    raw_id: int | None = None  # JobIDRaw, given at arrival (array tasks: at start)


class Workload:
    """Draws submissions; `fresh` is one user action (a job, or a job array)."""

    def __init__(
        self,
        spec: GeneratorSpec,
        rng: np.random.Generator,
        vcs: list[str],
        users: dict[str, tuple[int, str]],
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.vcs = vcs
        self.users = users
        self.mix = params.batch_state_mix()
        self.home_users = {v: [u for u, (_, h) in users.items() if h == v] for v in vcs}
        self.all_users = list(users)

    # --- attribute draws ------------------------------------------------------------------------
    def _lognormal(self, key: str) -> int:
        median, sigma = params.RUNTIME[key]
        x = median * math.exp(sigma * float(self.rng.standard_normal()))
        return int(min(params.MAX_RUNTIME_S, max(params.MIN_RUNTIME_S, round(x))))

    def _user(self, vc: str) -> str:
        home = self.home_users[vc]
        if self.rng.random() < params.HOME_VC_SHARE or not home:
            pool = home or self.all_users
        else:
            pool = self.all_users
        return pool[int(self.rng.integers(len(pool)))]

    def _size(self, sizes: tuple[int, ...], p: tuple[float, ...]) -> int:
        s = sizes[int(self.rng.choice(len(sizes), p=np.array(p) / sum(p)))]
        return min(s, max_job_gpus(self.spec.n_gpus))

    def _limit_above(self, duration: int) -> int:
        ok = [lim for lim in params.BATCH_LIMITS_S if lim >= duration * 1.1 + 60]
        if not ok:
            return params.BATCH_LIMITS_S[-1]
        return ok[min(len(ok) - 1, int(self.rng.integers(0, 3)))]

    def _cancel_uid(self, user: str) -> int:
        return 0 if self.rng.random() < 0.15 else self.users[user][0]

    def batch_outcome(
        self, user: str, allow_pending_cancel: bool
    ) -> tuple[str, str, int, int, int, bool]:
        """-> raw_state, exit_code, duration, timelimit, retries, cancel_pending."""
        u = float(self.rng.random())
        if u < self.mix.p_pass:
            d = self._lognormal("COMPLETED")
            return "COMPLETED", "0:0", d, self._limit_above(d), 0, False
        if u < self.mix.p_pass + self.mix.p_kill:
            d = self._lognormal("CANCELLED")
            pending = allow_pending_cancel and self.rng.random() < params.PENDING_CANCEL_P
            state = f"CANCELLED by {self._cancel_uid(user)}"
            return state, "0:15", d, self._limit_above(d), 0, pending
        kind = self._fail_kind(allow_timeout=True)
        if kind == "TIMEOUT":
            lim = params.BATCH_TIMEOUT_LIMITS_S[
                int(self.rng.integers(len(params.BATCH_TIMEOUT_LIMITS_S)))
            ]
            return "TIMEOUT", "0:0", lim, lim, 0, False
        d = self._lognormal("FAILED")
        retries = 0
        if self.rng.random() < params.RETRY_P:
            retries = params.RETRY_COUNTS[
                int(self.rng.choice(len(params.RETRY_COUNTS), p=params.RETRY_COUNT_P))
            ]
        return kind, self._fail_exit(kind), d, self._limit_above(d), retries, False

    def _fail_kind(self, allow_timeout: bool) -> str:
        kinds = [k for k in params.FAIL_KIND_P if allow_timeout or k != "TIMEOUT"]
        p = np.array([params.FAIL_KIND_P[k] for k in kinds])
        return kinds[int(self.rng.choice(len(kinds), p=p / p.sum()))]

    def _fail_exit(self, kind: str) -> str:
        if kind == "OUT_OF_MEMORY":
            return "0:125"
        if kind == "NODE_FAIL":
            return "0:0"
        # 139:0 and 134:0: the script's command killed by SIGSEGV / SIGABRT (bash's 128 + N);
        # 0:9 and 0:6: the batch shell itself killed
        return ("1:0", "139:0", "134:0", "127:0", "0:9", "0:6")[int(self.rng.integers(6))]

    # --- submissions ---------------------------------------------------------------------------
    def fresh(self, t: int, vc: str, seq: int, chain: int) -> list[Submission]:
        """One user action at time t in VC vc. Sequence numbers seq, seq+1, ... are used."""
        user = self._user(vc)
        typed = bool(self.rng.random() < 0.3)
        if self.rng.random() < params.DEBUG_P:
            gpus = self._size(params.DEBUG_SIZES, params.DEBUG_SIZE_P)
            keys = list(params.DEBUG_STATE_P)
            k = keys[int(self.rng.choice(len(keys), p=list(params.DEBUG_STATE_P.values())))]
            if k == "TIMEOUT":
                state, code, dur = "TIMEOUT", "0:0", params.DEBUG_LIMIT_S
            else:
                dur = min(self._lognormal("DEBUG"), params.DEBUG_LIMIT_S - 60)
                state = "COMPLETED" if k == "COMPLETED" else f"CANCELLED by {self.users[user][0]}"
                code = "0:0" if k == "COMPLETED" else "0:15"
            name = DEBUG_NAMES[int(self.rng.integers(len(DEBUG_NAMES)))]
            return [
                Submission(seq, t, vc, user, name, "debug", "debug", True, gpus, state, code,
                           dur, params.DEBUG_LIMIT_S, chain=chain, typed_gres=typed)
            ]  # fmt: skip
        if self.rng.random() < params.ARRAY_P:
            lo, hi = params.ARRAY_TASKS
            n = int(self.rng.integers(lo, hi + 1))
            subs = []
            for task in range(1, n + 1):
                state, code, dur, lim, _, _ = self.batch_outcome(user, allow_pending_cancel=False)
                subs.append(
                    Submission(seq + task - 1, t, vc, user, ARRAY_NAME, "gpu", "normal", False,
                               1, state, code, dur, lim, chain=chain + task - 1,
                               array_task=task, typed_gres=typed)
                )  # fmt: skip
            return subs
        gpus = self._size(params.SIZES, params.SIZE_P)
        names = BATCH_NAMES[vc]
        name = names[int(self.rng.integers(len(names)))]
        state, code, dur, lim, retries, pending = self.batch_outcome(user, True)
        qos = "high" if self.rng.random() < 0.1 else "normal"
        sub = Submission(seq, t, vc, user, name, "gpu", qos, False, gpus, state, code, dur, lim,
                         retries_left=retries, chain=chain, typed_gres=typed)  # fmt: skip
        if pending:
            sub.cancel_at = t + int(self.rng.integers(5, 180))
        return [sub]

    def retry(self, prev: Submission, t: int, seq: int) -> Submission:
        """The next attempt of a failed job's retry chain: it fails again."""
        kind = self._fail_kind(allow_timeout=False)
        d = self._lognormal("FAILED")
        return replace(
            prev,
            seq=seq,
            submit=t,
            raw_state=kind,
            exit_code=self._fail_exit(kind),
            duration=d,
            timelimit_s=self._limit_above(d),
            retries_left=prev.retries_left - 1,
            chain_pos=prev.chain_pos + 1,
            cancel_at=None,
            raw_id=None,
        )

    def mean_gpu_seconds(self) -> float:
        """Expected GPU-seconds per fresh submission (retries included), from the distributions
        (lognormal means, ignoring the clamps), so that the arrival rate is not a noisy estimate."""

        def ln_mean(key: str) -> float:
            median, sigma = params.RUNTIME[key]
            return median * math.exp(sigma * sigma / 2)

        g = self.spec.n_gpus
        mix = self.mix
        p_to = params.FAIL_KIND_P["TIMEOUT"]
        to_mean = sum(params.BATCH_TIMEOUT_LIMITS_S) / len(params.BATCH_TIMEOUT_LIMITS_S)
        e_retry_count = sum(
            c * p for c, p in zip(params.RETRY_COUNTS, params.RETRY_COUNT_P, strict=True)
        )
        fail_one = p_to * to_mean + (1 - p_to) * ln_mean("FAILED")
        fail_chain = p_to * to_mean + (1 - p_to) * ln_mean("FAILED") * (
            1 + params.RETRY_P * e_retry_count
        )
        pass_kill = mix.p_pass * ln_mean("COMPLETED") + mix.p_kill * ln_mean("CANCELLED")
        batch_dur = pass_kill - mix.p_kill * params.PENDING_CANCEL_P * ln_mean("CANCELLED")
        batch_dur += mix.p_fail * fail_chain
        task_dur = pass_kill + mix.p_fail * fail_one
        e_size = sum(
            min(s, max_job_gpus(g)) * p for s, p in zip(params.SIZES, params.SIZE_P, strict=True)
        )
        e_dsize = sum(
            min(s, g) * p for s, p in zip(params.DEBUG_SIZES, params.DEBUG_SIZE_P, strict=True)
        )
        p_dto = params.DEBUG_STATE_P["TIMEOUT"]
        debug = e_dsize * (p_dto * params.DEBUG_LIMIT_S + (1 - p_dto) * ln_mean("DEBUG"))
        lo, hi = params.ARRAY_TASKS
        batch = (1 - params.ARRAY_P) * e_size * batch_dur + params.ARRAY_P * (
            lo + hi
        ) / 2 * task_dur
        return params.DEBUG_P * debug + (1 - params.DEBUG_P) * batch
