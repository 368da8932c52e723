"""Princeton Jobstats' job summary, the `JS1:` text Jobstats writes into Slurm's AdminComment at
the end of a job: decoded (bounded, every field checked) and encoded. Pure: text in, values out.

The format, read from Jobstats' own source (PrincetonUniversity/jobstats, `jobstats.py`:
`report_job_json` writes it, `__init__` reads it back; tests/fixtures/README.md cites the commit):
`JS1:` + base64(gzip(JSON)), or the sentinels `JS1:Short` (the job ran less than two sampling
periods) and `JS1:None` (Prometheus had nothing for it), which hold no summary. The JSON is
`{"gpus": <bool or count>, "total_time": <the job's wall seconds>, "nodes": {"<host>": {"cpus":
N, "total_memory": bytes, "used_memory": bytes, "total_time": <CPU seconds>, "gpu_total_memory":
{"<minor>": bytes}, "gpu_used_memory": {"<minor>": bytes}, "gpu_utilization": {"<minor>":
percent}}}}`, every figure over the job's whole life: `gpu_utilization` is the mean of NVML's
duty cycle (`avg_over_time`), `gpu_used_memory` the largest memory used (`max_over_time`). A GPU
is named by its device minor number (`/dev/nvidiaN`, the exporter's `minor_number` label), not
its NVML index.

Shared by the Slurm source (which decodes the summaries of sacct's AdminComment column) and the
generator (which writes them), so it imports no layer (docs/architecture.md).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import math
import zlib
from dataclasses import dataclass
from typing import Any

PREFIX = "JS1:"
NO_SUMMARY = frozenset({"JS1:Short", "JS1:None"})  # Jobstats' sentinels: no summary
# A summary decompresses to at most `max_gzip_ratio` ([files]) times its compressed size, at
# least MIN_BOUND (a small summary compresses well) and never past MAX_BOUND, so that a gzip
# bomb in an AdminComment costs at most that much memory. The largest real summary (a job of
# a thousand 8-GPU nodes) is about 1 MB of JSON.
MIN_BOUND = 64 << 10
MAX_BOUND = 16 << 20
MAX_MINOR = 32767  # job_gpus.gpu is a smallint


class SummaryError(ValueError):
    """An AdminComment that starts as a Jobstats summary and does not decode; the message is the
    reason, a short phrase (bad base64, bad gzip, too large, not JSON, wrong shape)."""


@dataclass(frozen=True)
class GpuSummary:
    """One GPU of a node over the job: minor number, mean utilization (0-100) and memory."""

    minor: int
    util_pct: float | None = None
    mem_used_bytes: float | None = None  # the largest used over the job
    mem_total_bytes: float | None = None


@dataclass(frozen=True)
class NodeSummary:
    """One node of the job: its GPUs and, where given, its CPU figures."""

    host: str
    gpus: tuple[GpuSummary, ...] = ()
    cpus: int | None = None
    cpu_time_s: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None


@dataclass(frozen=True)
class JobSummary:
    """A decoded summary: the job's wall seconds, its GPU flag or count, and its nodes."""

    nodes: tuple[NodeSummary, ...]
    total_time_s: float | None = None
    gpus: int | bool | None = None


def is_summary(text: str | None) -> bool:
    """Whether an AdminComment holds a summary to decode (not empty, not a sentinel, `JS1:`)."""
    if not text:
        return False
    text = text.strip()
    return text.startswith(PREFIX) and text not in NO_SUMMARY


def decompress_bound(compressed_bytes: int, max_gzip_ratio: float) -> int:
    """The most bytes a summary of `compressed_bytes` may decompress to (see MIN_BOUND)."""
    return min(MAX_BOUND, max(MIN_BOUND, int(max_gzip_ratio * compressed_bytes)))


def decode_summary(text: str | None, max_gzip_ratio: float = 200.0) -> JobSummary | None:
    """The summary in an AdminComment; None when it holds none (empty, `JS1:Short`,
    `JS1:None`, or text of another tool, which does not start with `JS1:`). Raises
    SummaryError with the reason when it starts with `JS1:` and does not decode."""
    if not is_summary(text):
        return None
    assert text is not None
    payload = text.strip()[len(PREFIX) :]
    try:
        packed = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise SummaryError("bad base64") from None
    bound = decompress_bound(len(packed), max_gzip_ratio)
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
    try:
        raw = inflater.decompress(packed, bound + 1)
    except zlib.error as exc:
        raise SummaryError(f"bad gzip ({exc})") from None
    if len(raw) > bound:
        raise SummaryError(
            f"decompresses to more than {bound:,} bytes ({len(packed):,} compressed): "
            "refused as a likely gzip bomb"
        )
    if not inflater.eof:
        raise SummaryError("bad gzip (truncated)")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SummaryError(f"not JSON ({str(exc)[:80]})") from None
    return _summary(doc)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _number(value: object, where: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SummaryError(f"wrong shape: {where} is {type(value).__name__}, not a number")
    if not lo <= value <= hi:
        bounds = f"{lo:g}-{hi:g}" if hi < math.inf else f">= {lo:g}"
        raise SummaryError(f"wrong shape: {where} = {value!r}, outside {bounds}")
    return float(value)


def _optional(node: dict[str, Any], key: str, where: str) -> float | None:
    return _number(node[key], f"{where}.{key}") if key in node else None


def _per_gpu(node: dict[str, Any], key: str, where: str, hi: float) -> dict[int, float]:
    table = node.get(key, {})
    if not isinstance(table, dict):
        raise SummaryError(f"wrong shape: {where}.{key} is not an object")
    out: dict[int, float] = {}
    for minor, value in table.items():
        if not (minor.isascii() and minor.isdigit()) or int(minor) > MAX_MINOR:
            raise SummaryError(
                f"wrong shape: GPU {minor[:20]!r} in {where}.{key} is not a minor number"
            )
        out[int(minor)] = _number(value, f"{where}.{key}.{minor}", 0.0, hi)
    return out


def _summary(doc: object) -> JobSummary:
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), dict):
        raise SummaryError('wrong shape: no "nodes" object')
    gpus = doc.get("gpus")
    if gpus is not None and not isinstance(gpus, bool | int):
        raise SummaryError('wrong shape: "gpus" is neither a flag nor a count')
    total = _number(doc["total_time"], "total_time") if "total_time" in doc else None
    nodes = []
    for host, node in doc["nodes"].items():
        where = f"nodes.{host[:40]}"
        if not host.strip() or not isinstance(node, dict):
            raise SummaryError(f"wrong shape: {where} is not a host's object")
        util = _per_gpu(node, "gpu_utilization", where, 100.0)
        used = _per_gpu(node, "gpu_used_memory", where, math.inf)
        held = _per_gpu(node, "gpu_total_memory", where, math.inf)
        cpus = _optional(node, "cpus", where)
        nodes.append(
            NodeSummary(
                host=host,
                gpus=tuple(
                    GpuSummary(m, util.get(m), used.get(m), held.get(m))
                    for m in sorted(util.keys() | used.keys() | held.keys())
                ),
                cpus=int(cpus) if cpus is not None else None,
                cpu_time_s=_optional(node, "total_time", where),
                mem_used_bytes=_optional(node, "used_memory", where),
                mem_total_bytes=_optional(node, "total_memory", where),
            )
        )
    return JobSummary(nodes=tuple(nodes), total_time_s=total, gpus=gpus)


def _figure(value: float) -> int | float:
    """A figure as Jobstats writes it: an integer when whole, else rounded to 0.1."""
    return int(value) if float(value).is_integer() else round(value, 1)


def encode_summary(summary: JobSummary) -> str:
    """The AdminComment Jobstats would write for `summary` (the inverse of `decode_summary`):
    compact JSON, gzip with a zero timestamp (the same summary gives the same text), base64."""
    nodes: dict[str, dict[str, Any]] = {}
    for node in summary.nodes:
        out: dict[str, Any] = {}
        for key, value in (
            ("cpus", node.cpus),
            ("total_memory", node.mem_total_bytes),
            ("used_memory", node.mem_used_bytes),
            ("total_time", node.cpu_time_s),
        ):
            if value is not None:
                out[key] = _figure(value)
        for key, attr in (
            ("gpu_total_memory", "mem_total_bytes"),
            ("gpu_used_memory", "mem_used_bytes"),
            ("gpu_utilization", "util_pct"),
        ):
            table = {
                str(g.minor): _figure(getattr(g, attr))
                for g in node.gpus
                if getattr(g, attr) is not None
            }
            if table:
                out[key] = table
        nodes[node.host] = out
    doc: dict[str, Any] = {"nodes": nodes}
    if summary.total_time_s is not None:
        doc["total_time"] = _figure(summary.total_time_s)
    if summary.gpus is not None:
        doc["gpus"] = summary.gpus
    packed = gzip.compress(json.dumps(doc, separators=(",", ":")).encode("ascii"), mtime=0)
    return PREFIX + base64.b64encode(packed).decode("ascii")


__all__ = [
    "NO_SUMMARY",
    "PREFIX",
    "GpuSummary",
    "JobSummary",
    "NodeSummary",
    "SummaryError",
    "decode_summary",
    "encode_summary",
    "is_summary",
]
