"""Plain advice for each diagnosis of `job_usage.diagnoses` [ICSE24 Table 1]: what a user can try.

The diagnoses themselves are computed by `gpuwaste analyze` (docs/definitions.md#diagnoses); this
module only words them for people. The API is two functions and one mapping, kept small and
stable because the job report, the digests and the policy replay all use it:

- `ADVICE`: diagnosis name -> (short title, advice sentence);
- `diagnoses_of(text)`: the names in a `job_usage.diagnoses` value, in order;
- `advise(text)`: (name, title, advice) for each of them (unknown names get a generic line).
"""

from __future__ import annotations

ADVICE: dict[str, tuple[str, str]] = {
    "improper_batch_size": (
        "batch too small for the GPU",
        "Raise the batch size (or train several models per GPU): peak GPU memory stayed at or "
        "under half of the card, so the GPU waits on each small step.",
    ),
    "insufficient_gpu_memory": (
        "GPU memory nearly full, utilization low",
        "Use mixed precision, gradient checkpointing or a GPU with more memory: memory is "
        "nearly full while the GPU computes little, a sign of a batch cut down to fit.",
    ),
    "gpu_oversubscription": (
        "GPUs requested but never used",
        "Request fewer GPUs, or make the code use all of them (e.g. DistributedDataParallel): "
        "some GPUs of this job were never used.",
    ),
    "unreleased_job": (
        "allocation held after the work ended",
        "Release the allocation when done: end the script (or the notebook's kernel) when the "
        "work finishes; the GPUs sat idle until the job ended.",
    ),
    "slow_start": (
        "long idle start",
        "Prepare the environment and data before requesting GPUs (install packages, download "
        "and stage datasets in a CPU job): the GPUs were idle for the first minutes.",
    ),
    "non_dl_job": (
        "CPU work holding GPUs",
        "Run CPU-only work in a job without GPUs: no GPU was used while the CPUs were busy.",
    ),
    "interactive_job": (
        "interactive / debugging session",
        "Keep interactive sessions short and release them when you step away (or use a "
        "debugging partition with a time limit): idle think time holds the GPUs.",
    ),
    "synchronous_checkpointing": (
        "GPU stalls while checkpoints are written",
        "Use asynchronous checkpointing (write checkpoints from a background thread or "
        "process), or checkpoint less often: utilization drops to 0 at each checkpoint.",
    ),
    "looks_busy": (
        "GPU looks busy but does no work",
        "Stop the process that keeps the GPU busy and release the allocation: GPU_UTIL read high "
        "while the GPU's SM and tensor activity stayed near zero or its power near idle (a busy "
        "loop, not training).",
    ),
}

GENERIC = (
    "other low utilization",
    "Profile the job (e.g. the PyTorch profiler) to see where the GPU waits.",
)


def diagnoses_of(text: str | None) -> list[str]:
    """The diagnosis names in a `job_usage.diagnoses` value (comma-separated; empty: none),
    without the evidence a diagnosis may carry in parentheses (`looks_busy (GPU_UTIL ...)`)."""
    if not text:
        return []
    return [name.split("(")[0].strip() for name in text.split(",") if name.strip()]


def advise(text: str | None) -> list[tuple[str, str, str]]:
    """(name, title, advice) for each diagnosis in `text`, in its order."""
    return [(name, *ADVICE.get(name, GENERIC)) for name in diagnoses_of(text)]


__all__ = ["ADVICE", "GENERIC", "advise", "diagnoses_of"]
