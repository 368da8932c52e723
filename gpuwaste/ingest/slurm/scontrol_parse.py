"""Parse `scontrol show job -d` output into per-node GPU indices. Pure: text in, rows out.

A record starts at a `JobId=` line and runs to the next one (records are usually separated by a
blank line). With `-d`, each allocated node gets a detail line:

    Nodes=gpu[01-02] CPU_IDs=0-5 Mem=0 GRES=gpu:4(IDX:0-3)
    Nodes=dgx1 CPU_IDs=0-63 Mem=0 GRES=gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:5)

which gives (host, gpu index) pairs. `IDX:N/A` and records without detail lines give no pairs.
Lines that are not `key=value` (such as a documentation's `   . . .`) are skipped. The job id is
the display form: `ArrayJobId_ArrayTaskId` for an array task, `HetJobId+HetJobOffset` for a het
component, else `JobId`; `job_id_raw` is `JobId`.

Refused (per record, with file:line): a detail line whose host list or GRES index list does not
parse; text before the first `JobId=` line.

`scontrol --json show job` (`parse_scontrol_json`) gives the same per node: each job's
`gres_detail` list holds one `gpu:4(IDX:0-3)` string per node of its `nodes` host list, in that
order (Slurm fills `gres_detail_str[i]` for the job's i-th node: src/api/job_info.c, dumped as
is by src/plugins/data_parser/*/parsers.c `JOB_INFO_GRES_DETAIL`). Ids are numbers, or
`{"set": true, "number": N}` since data_parser v0.0.39. Refused (per job, `file:job N`): a host
list or index list that does not parse, more `gres_detail` entries than nodes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import polars as pl

from gpuwaste.ingest.slurm_notation import HostListError, expand_hostlist, expand_indices
from gpuwaste.warehouse.bookkeeping import Refused

_KV = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_/:]*)=(\S*)")
_NODE_LINE = re.compile(r"^\s*Nodes=(?P<nodes>\S+)\s.*?\bGRES=(?P<gres>\S*)")
_GPU_IDX = re.compile(r"\bgpu[^(,=]*\(IDX:(?P<idx>[^)]*)\)")

SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "job_id_raw": pl.String(),
    "host": pl.String(),
    "gpu": pl.Int16(),
}


class ScontrolFormatError(ValueError):
    """The text is not `scontrol show job` output at all."""


@dataclass
class ScontrolParse:
    gpus: pl.DataFrame  # job_id, job_id_raw, host, gpu
    refused: list[Refused] = field(default_factory=list)
    accepted: int = 0  # job records


def _display_id(kv: dict[str, str]) -> str:
    job = kv.get("JobId", "")
    array, task = kv.get("ArrayJobId"), kv.get("ArrayTaskId")
    if array and task and task != "N/A":
        return f"{array}_{task}"
    het, offset = kv.get("HetJobId"), kv.get("HetJobOffset")
    if het and offset is not None and offset != "N/A":
        return f"{het}+{offset}"
    return job


def _number(value: object) -> int | None:
    """A JSON id: a number, or data_parser's {"set": bool, "number": N} (None when not set)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_scontrol_json(text: str, location: str = "scontrol") -> ScontrolParse:
    """Per-node GPU indices of every job of `scontrol --json show job` output."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScontrolFormatError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ScontrolFormatError('not `scontrol --json show job` output: no "jobs" list')
    rows: list[tuple[str, str, str, int]] = []
    refused: list[Refused] = []
    accepted = 0
    for n, job in enumerate(jobs):
        if not isinstance(job, dict) or _number(job.get("job_id")) is None:
            refused.append(Refused(f"{location}:job {n}", "no job_id", json.dumps(job)[:4096]))
            continue
        kv = {"JobId": str(_number(job["job_id"]))}
        for key, name in (
            ("array_job_id", "ArrayJobId"),
            ("array_task_id", "ArrayTaskId"),
            ("het_job_id", "HetJobId"),
            ("het_job_offset", "HetJobOffset"),
        ):
            value = _number(job.get(key))
            if value is not None and (value != 0 or key == "het_job_offset"):
                kv[name] = str(value)
        if "HetJobId" not in kv:
            kv.pop("HetJobOffset", None)
        details = job.get("gres_detail") or []
        try:
            hosts = expand_hostlist(str(job.get("nodes") or ""))
            if len(details) > len(hosts):
                raise ValueError(f"{len(details)} gres_detail entries for {len(hosts)} nodes")
            pairs = [
                (host, i)
                for host, detail in zip(hosts, details, strict=False)
                for m in _GPU_IDX.finditer(str(detail))
                for i in expand_indices(m.group("idx"))
            ]
        except (HostListError, ValueError) as exc:
            refused.append(
                Refused(f"{location}:job {n}", f"bad node detail: {exc}", json.dumps(job)[:4096])
            )
            continue
        job_id = _display_id(kv)
        for h, i in dict.fromkeys(pairs):
            rows.append((job_id, kv["JobId"], h, i))
        accepted += 1
    return ScontrolParse(gpus=_frame(rows), refused=refused, accepted=accepted)


def _frame(rows: list[tuple[str, str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "job_id": [r[0] for r in rows],
            "job_id_raw": [r[1] for r in rows],
            "host": [r[2] for r in rows],
            "gpu": [r[3] for r in rows],
        },
        schema=SCHEMA,
    )


def parse_any(text: str, location: str = "scontrol") -> ScontrolParse:
    """`scontrol show job -d` text or `scontrol --json show job` output, told apart by the
    first character."""
    if text.lstrip().startswith("{"):
        return parse_scontrol_json(text, location)
    return parse_scontrol(text, location)


def parse_scontrol(text: str, location: str = "scontrol") -> ScontrolParse:
    """Per-node GPU indices of every job record in `scontrol show job -d` output."""
    lines = text.splitlines()
    if not any(ln.lstrip().startswith("JobId=") for ln in lines):
        if not text.strip():
            return ScontrolParse(gpus=pl.DataFrame(schema=SCHEMA))
        raise ScontrolFormatError("not `scontrol show job -d` output: no line starts with JobId=")
    rows: list[tuple[str, str, str, int]] = []
    refused: list[Refused] = []
    accepted = 0
    record: list[tuple[int, str]] = []

    def flush() -> None:
        nonlocal accepted
        if not record:
            return
        first_no = record[0][0]
        kv: dict[str, str] = {}
        pairs: list[tuple[str, int]] = []
        problem: str | None = None
        for _, ln in record:
            node = _NODE_LINE.match(ln)
            if node is not None:
                try:
                    hosts = expand_hostlist(node.group("nodes"))
                    idx: list[int] = []
                    for m in _GPU_IDX.finditer(node.group("gres")):
                        idx.extend(expand_indices(m.group("idx")))
                except (HostListError, ValueError) as exc:
                    problem = f"bad node detail line: {exc}"
                    break
                pairs.extend((h, i) for h in hosts for i in idx)
                continue
            for m in _KV.finditer(ln):
                kv.setdefault(m.group(1), m.group(2))
        raw = "\n".join(ln for _, ln in record)
        if problem is not None:
            refused.append(Refused(f"{location}:{first_no}", problem, raw))
            return
        job_id = _display_id(kv)
        raw_id = kv.get("JobId", job_id)
        seen: set[tuple[str, int]] = set()
        for h, i in pairs:
            if (h, i) not in seen:
                seen.add((h, i))
                rows.append((job_id, raw_id, h, i))
        accepted += 1

    for no, ln in enumerate(lines, start=1):
        if ln.lstrip().startswith("JobId="):
            flush()
            record = [(no, ln)]
        elif record:
            if ln.strip():
                record.append((no, ln))
        elif ln.strip():
            refused.append(Refused(f"{location}:{no}", "text before the first JobId= record", ln))
    flush()
    return ScontrolParse(gpus=_frame(rows), refused=refused, accepted=accepted)
