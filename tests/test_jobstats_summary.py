"""Jobstats' `JS1:` job summary (gpuwaste/jobstats_summary.py): real summaries decoded, the
encoder its inverse, and every kind of bad summary refused with its reason, in bounded memory."""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc

import pytest

from gpuwaste.jobstats_summary import (
    MAX_BOUND,
    GpuSummary,
    JobSummary,
    NodeSummary,
    SummaryError,
    decode_summary,
    encode_summary,
)

# Real AdminComments written by Jobstats at Princeton, from a Jobstats developer's notes:
# github.com/jdh4/jobstats README.md, commit 0f8728372eac3c536f4d4945441f77471e46987d
# (tests/fixtures/README.md). A CPU job (39861033, della) ...
REAL_CPU = (
    "JS1:H4sIACj7KWIC/1XNQQrCMBCF4bvMOkonIzNpLyOhGUVIGmnSRSm5u1FEcPt/PN4BSw5aYDogaIz+tNoZF+R3"
    "qLn6eE2a8rrDxE5wvAgLsYGtaPiJFbRCxCMP5juqj6QdHJE79zg/t37hWvt34gEN3D9487FoewEKn+eojwAAAA=="
)
# ... and a four-node GPU job (40409215) whose GPUs held 638 MB each at 0 % utilization.
REAL_GPU = (
    "JS1:H4sIAH+lZmIC/8WSywqDMBBF/yVrK5NJzMOfEalBAvGBJotW/PdGa0vFlYvicmbOzOWQTKTtKjOSfCKVca68"
    "WcprSpfad750RWOabniQnKPmWkjUAhISRlN9J5QCAnBEnmw73jaG5KgRMMWE3PsQA2jcq/tQ7M9OBHa35ze0C1gZ"
    "wRRkKmIfwltnn6W3XbsRMMfRjwQ7KSGFlFQdJKjOUnWVhDj7EJxxBkcHptPsKge+tP8dOB/+npYrHoX9EMz8AoVh"
    "1T3pAgAA"
)


def test_the_real_cpu_summary_decodes() -> None:
    s = decode_summary(REAL_CPU)
    assert s == JobSummary(
        nodes=(
            NodeSummary(
                host="della-r2c1n16",
                cpus=8,
                cpu_time_s=28338.0,
                mem_used_bytes=27127336960.0,
                mem_total_bytes=68719476736.0,
            ),
        ),
        total_time_s=3601.0,
        gpus=False,
    )


def test_the_real_gpu_summary_decodes_with_minor_numbers() -> None:
    s = decode_summary(REAL_GPU)
    assert s is not None and s.gpus is True and s.total_time_s == 29297.0
    assert sorted(n.host for n in s.nodes) == [
        "della-i14g11",
        "della-i14g13",
        "della-i14g4",
        "della-i14g6",
    ]
    for node in s.nodes:
        assert node.gpus == (GpuSummary(0, 0.0, 638058496.0, 42949672960.0),)
    # della-i14g4 has GPU figures only (the exporter's CPU series were missing for it)
    bare = next(n for n in s.nodes if n.host == "della-i14g4")
    assert bare.cpus is None and bare.mem_total_bytes is None


@pytest.mark.parametrize("text", [None, "", "JS1:Short", "JS1:None", "some site's own note"])
def test_no_summary(text: str | None) -> None:
    assert decode_summary(text) is None


def test_encode_is_the_inverse_of_decode() -> None:
    s = JobSummary(
        nodes=(
            NodeSummary(
                "gpu-a1",
                gpus=(GpuSummary(3, 87.1, 16717578240, 17071734784), GpuSummary(0, 0, 0, 17e9)),
                cpus=16,
                cpu_time_s=221.7,
            ),
            NodeSummary("gpu-a2", gpus=(GpuSummary(1, 42.5, None, None),)),
        ),
        total_time_s=3600,
        gpus=3,
    )
    text = encode_summary(s)
    assert text.startswith("JS1:H4sI") and text == encode_summary(s)  # deterministic
    back = decode_summary(text)
    assert back is not None
    assert back.total_time_s == 3600 and back.gpus == 3
    assert back.nodes[0].gpus == (
        GpuSummary(0, 0.0, 0.0, 17e9),
        GpuSummary(3, 87.1, 16717578240.0, 17071734784.0),
    )
    assert back.nodes[1].gpus == (GpuSummary(1, 42.5, None, None),)
    assert decode_summary(encode_summary(decode_summary(REAL_GPU))) == decode_summary(REAL_GPU)  # type: ignore[arg-type]


def _js1(doc: object, raw: bytes | None = None) -> str:
    data = raw if raw is not None else json.dumps(doc).encode()
    return "JS1:" + base64.b64encode(gzip.compress(data)).decode()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("JS1:not base64!", "bad base64"),
        ("JS1:" + base64.b64encode(b"plain text, not gzip").decode(), "bad gzip"),
        ("JS1:" + base64.b64encode(gzip.compress(b'{"nodes": {}}')[:-12]).decode(), "bad gzip"),
        (_js1(None, b"{nodes: 1"), "not JSON"),
        (_js1(None, b'{"nodes": {}, "total_time": NaN}'), "not JSON"),
        (_js1([1, 2]), 'wrong shape: no "nodes" object'),
        (_js1({"nodes": {"n1": 5}}), "wrong shape: nodes.n1 is not a host's object"),
        (
            _js1({"nodes": {"n1": {"gpu_utilization": {"gpu0": 5}}}}),
            "wrong shape: GPU 'gpu0' in nodes.n1.gpu_utilization is not a minor number",
        ),
        (
            _js1({"nodes": {"n1": {"gpu_utilization": {"-1": 5}}}}),
            "is not a minor number",
        ),
        (
            _js1({"nodes": {"n1": {"gpu_utilization": {"0": 140}}}}),
            "nodes.n1.gpu_utilization.0 = 140, outside 0-100",
        ),
        (
            _js1({"nodes": {"n1": {"gpu_used_memory": {"0": "12"}}}}),
            "nodes.n1.gpu_used_memory.0 is str, not a number",
        ),
        (_js1({"nodes": {"n1": {"gpu_used_memory": {"0": True}}}}), "bool, not a number"),
        (_js1({"nodes": {}, "gpus": "yes"}), '"gpus" is neither a flag nor a count'),
        (_js1({"nodes": {"n1": {"gpu_utilization": [1]}}}), "is not an object"),
    ],
)
def test_a_bad_summary_is_refused_with_its_reason(text: str, reason: str) -> None:
    with pytest.raises(SummaryError) as err:
        decode_summary(text)
    assert reason in str(err.value)


def test_a_gzip_bomb_is_refused_in_bounded_memory() -> None:
    # 256 MiB of zeros in about 250 KB: refused after inflating at most MAX_BOUND
    bomb = gzip.compress(bytes(256 << 20), compresslevel=1)
    text = "JS1:" + base64.b64encode(bomb).decode()
    tracemalloc.start()
    try:
        with pytest.raises(SummaryError, match="likely gzip bomb"):
            decode_summary(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_BOUND  # the bound, the compressed bytes, and little else


def test_sacct_admincomment_in_the_princeton_caret_format() -> None:
    """The real `^|^` sacct output of reportseff's Princeton test (AdminComment first, empty on
    every line) gives no summary; the same job's line with the real GPU summary in that column
    gives its four GPUs, and the step lines below it are read as before."""
    from gpuwaste.ingest.slurm.parse import SacctOptions, parse_sacct
    from tests.conftest import FIXTURES
    from tests.test_ingest_slurm_parse import REPORTSEFF_COLS

    text = (FIXTURES / "sacct" / "reportseff_princeton_steps_caret_delim.txt").read_text()
    opts = SacctOptions(columns=tuple(REPORTSEFF_COLS))
    plain = parse_sacct(text, opts)
    assert plain.gpu_summaries.height == 0 and plain.refused == []
    lines = text.split("\n")
    job = next(i for i, ln in enumerate(lines) if "^|^65638294^|^" in ln)
    lines[job] = REAL_GPU + lines[job]  # the AdminComment field is the first, empty
    p = parse_sacct("\n".join(lines), opts)
    assert p.accepted == plain.accepted and p.refused == []
    rows = p.gpu_summaries.sort("host").rows()
    assert rows == [
        ("65638294", host, 0, 0.0, 638058496 / 2**20, 40960.0)
        for host in ("della-i14g11", "della-i14g13", "della-i14g4", "della-i14g6")
    ]
