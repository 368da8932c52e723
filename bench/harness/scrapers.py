"""Many concurrent scrapers of an HTTP endpoint, from one event loop (no thread per client, so the
clients' own scheduling stays out of the latencies): for the exporter's load test and
bench/exporter_load.py."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Scrape:
    seconds: float
    status: int | None  # None: no answer within the timeout, or the connection failed
    body: bytes = b""
    error: str = ""


async def _scrape(host: str, port: int, path: str, timeout_s: float) -> Scrape:
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(
                    f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
                    .encode()
                )  # fmt: skip
                data = await reader.read()  # the server closes after its answer
            finally:
                writer.close()
    except (TimeoutError, OSError) as exc:
        return Scrape(time.perf_counter() - t0, None, error=type(exc).__name__)
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return Scrape(time.perf_counter() - t0, None, error=f"no status line in {head[:40]!r}")
    return Scrape(time.perf_counter() - t0, status, body)


async def _clients(
    host: str, port: int, path: str, clients: int, scrapes_each: int, timeout_s: float
) -> list[Scrape]:
    async def client() -> list[Scrape]:
        return [await _scrape(host, port, path, timeout_s) for _ in range(scrapes_each)]

    per_client = await asyncio.gather(*(client() for _ in range(clients)))
    return [s for one in per_client for s in one]


def scrape_concurrently(
    host: str,
    port: int,
    *,
    clients: int,
    scrapes_each: int,
    timeout_s: float,
    path: str = "/metrics",
) -> list[Scrape]:
    """`clients` scrapers at once, each scraping `scrapes_each` times in a row."""
    return asyncio.run(_clients(host, port, path, clients, scrapes_each, timeout_s))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
