"""Benchmark: peak memory of `gpuwaste ingest openmetrics` on a large export, against main's code.

    .venv/bin/python bench/openmetrics_file.py [--gpus 128] [--days 2] [--copies 10]
        [--baseline-ref 8246e43] [--work /tmp/gpuwaste-bench-om] [--skip-large]

Inputs, written once into `--work` (kept for the next run):

1. `export/metrics.om.gz`: `gpuwaste generate --gpus 128 --days 2 --gzip` (1.1 GB of text,
   33 MB gzipped; 1.47 M GPU rows, 0.18 M host rows);
2. `large.om.gz`: the same file and `--copies - 1` more copies of every family under names that
   gpuwaste does not read (`copyN_DCGM_FI_DEV_GPU_UTIL`, `copyN_node_cpu_seconds_total`, ...):
   `--copies` times the text, and exactly the same rows. This is what a larger real export with
   the same rows looks like: dcgm-exporter's default field set has about 30 families, of which
   gpuwaste reads 8, and node exporter has hundreds besides the 3 it reads.

Each run is its own child process under GNU time (`/usr/bin/time -v`: its "Maximum resident set
size"), into a fresh warehouse:

- `baseline`: main's code at `--baseline-ref` (`git archive` into `--work`), the file read whole
  (it decompresses and parses the whole text at once); on the large file it is not run (about
  `--copies` x its peak on the export: more than this machine has);
- `streaming`: this tree's code.

The digests of every table written (rows, sorted; `ingested_at` / `updated_at` left out) are
compared: streaming on the export == baseline on the export == streaming on the large file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
GNU_TIME = Path("/usr/bin/time")
_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")
_NAMES = (b"DCGM_", b"node_")


def _generate(out: Path, gpus: int, days: float) -> Path:
    path = out / "metrics.om.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        cmd = [sys.executable, "-c", "from gpuwaste.cli import main; main()", "generate"]
        cmd += ["--out", str(out), "--gpus", str(gpus), "--days", str(days), "--gzip"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, check=True, env=env, cwd=out.parent)
    return path


def _renamed(block: bytes, prefix: bytes) -> bytes:
    """Every family of a block of whole lines renamed `prefix + name`."""
    for name in _NAMES:
        block = block.replace(b"\n" + name, b"\n" + prefix + name)
    for kind in (b"# HELP ", b"# TYPE "):
        block = block.replace(kind, kind + prefix)
    return block


def _large(src: Path, dest: Path, copies: int) -> None:
    """`src`'s text, then `copies - 1` renamed copies of it, then `# EOF` (gzip level 1)."""
    if dest.exists():
        return
    import gzip

    tmp = dest.with_suffix(".tmp")
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(tmp, "wb") as out:
        for k in range(copies):
            prefix = f"copy{k}_".encode()
            with gzip.open(src, "rb") as fh:
                rest = b"\n" if k else b""  # ends the previous copy's last line
                while block := fh.read(16 << 20):
                    block = rest + block
                    cut = block.rfind(b"\n")
                    block, rest = block[:cut], block[cut:]
                    block = block.replace(b"\n# EOF", b"")
                    out.write(comp.compress(_renamed(block, prefix) if k else block))
                rest = rest.replace(b"\n# EOF", b"")
                out.write(comp.compress(_renamed(rest, prefix) if k else rest))
        out.write(comp.compress(b"\n# EOF\n"))
        out.write(comp.flush())
    tmp.rename(dest)


def _baseline_tree(work: Path, ref: str) -> Path:
    tree = work / f"base-{ref}"
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "gpuwaste"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _ingest(code: Path, path: Path, data_dir: Path) -> tuple[float, float, str]:
    """(seconds, peak RSS GiB, summary line) of one `gpuwaste ingest openmetrics` process."""
    shutil.rmtree(data_dir, ignore_errors=True)
    cmd = [sys.executable, "-c", "from gpuwaste.cli import main; main()", "ingest"]
    cmd += ["--data-dir", str(data_dir), "--quiet", "openmetrics", "--file", str(path)]
    cmd += ["--cluster", "bench"]
    if GNU_TIME.exists():
        cmd = [str(GNU_TIME), "-v", *cmd]
    t0 = time.perf_counter()
    res = subprocess.run(  # run from `data_dir`'s folder: `-c` puts the working folder first
        cmd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(code)},
        cwd=data_dir.parent,
    )
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"ingest failed ({code}): {res.stderr[-2000:]}")
    m = _RSS.search(res.stderr)
    rss = int(m.group(1)) / (1 << 20) if m else float("nan")
    summary = next((ln for ln in res.stderr.splitlines() if "/openmetrics:" in ln), "")
    return seconds, rss, summary


def digests(data_dir: Path) -> dict[str, str]:
    """Per table: rows and a digest of its rows (order-free; volatile columns left out)."""
    out = {}
    root = data_dir / "parquet"
    for table in sorted(p.name for p in root.iterdir()):
        files = sorted(f for f in (root / table).rglob("*.parquet") if ".tmp-" not in f.name)
        df = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
        df = df.drop("ingested_at", "updated_at", "detail", strict=False)
        rows = df.hash_rows(seed=1).sort().to_numpy().tobytes()
        out[table] = f"{df.height} rows, {hashlib.sha256(rows).hexdigest()[:16]}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--baseline-ref", default="8246e43")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench-om"))
    ap.add_argument("--skip-large", action="store_true")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    export = _generate(work / f"export-{args.gpus}x{args.days:g}", args.gpus, args.days)
    runs: list[tuple[str, Path, Path]] = [
        ("baseline (main, whole file)", _baseline_tree(work, args.baseline_ref), export),
        ("streaming", ROOT, export),
    ]
    if not args.skip_large:
        large = work / f"large-{args.gpus}x{args.days:g}x{args.copies}.om.gz"
        _large(export, large, args.copies)
        runs.append((f"streaming, {args.copies}x file", ROOT, large))
    print(f"GNU time: {'yes' if GNU_TIME.exists() else 'no (peak RSS not measured)'}")
    results = []
    for i, (label, code, path) in enumerate(runs):
        data_dir = work / f"wh-{i}"
        seconds, rss, summary = _ingest(code, path, data_dir)
        size = path.stat().st_size
        results.append((label, path, size, seconds, rss, digests(data_dir), summary))
    base = results[0]
    print("| run | file (gzipped) | seconds | x baseline | peak RSS GiB | x baseline |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, path, size, seconds, rss, _, _ in results:
        print(
            f"| {label} | {path.name} ({size / 1e6:,.0f} MB) | {seconds:.1f} | "
            f"{seconds / base[3]:.2f} | {rss:.2f} | {rss / base[4]:.2f} |"
        )
    for label, *_, dig, summary in results:
        print(f"{label}: {summary.strip()}")
        for table, d in dig.items():
            print(f"    {table}: {d}")
    same = all(r[5] == base[5] for r in results)
    print(f"every table identical to the baseline's: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
