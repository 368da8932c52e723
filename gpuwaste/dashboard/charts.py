"""Vega-Lite charts from the small frames of queries.py. Pure: frames in, specs out.

Each function returns a Vega-Lite spec (a dict) whose data sit in `spec["datasets"]` as polars
frames; `widgets.plot` hands it to `st.vega_lite_chart`, which sends each frame as Arrow.

Why Vega-Lite and not plotly: a new browser tab pays for the chart library's start-up before the
first chart shows, and plotly.js costs several times Vega-Lite's script per tab
(bench/RESULTS.md, "Dashboard on 1 M jobs", why Vega-Lite and not plotly): the 2 s budget per
page did not leave room for plotly.

Vega renders text as text, never as markup, so labels from the data (users, job names, hosts,
VCs) only need their control characters escaped (`label()`). Values from the data never go into
a Vega expression: layers select their rows with field predicates on integers we assign.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from gpuwaste.analyses.reads import DEVICE_KEY, device_of
from gpuwaste.dashboard.queries import JOB_KINDS, LOST_KINDS
from gpuwaste.render import safe_text

Spec = dict[str, Any]

PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")
IDLE_COLOR = "#E45756"
PHASE_COLOR = "#54A24B"
NEVER_USED_COLOR = "#8C8C8C"
UTIL, MEMORY = "GPU util %", "memory MiB"
IDLE, PHASE, NEVER_USED = "idle slot", "stable phase", "never used"
BUSY = "Busy (not idle)"  # busy_gpu_h: observed and neither idle slot nor never-used GPU
BY_JOB = "allocated, by job kind"  # the GPU time of debugging, failed and killed jobs
# A y axis drawn inside its plot (labels over the plot's edge): a chart of stacked rows (vconcat)
# cannot be fitted to its container in Vega-Lite, so its rows take the container's width and
# nothing may stick out at the sides.
INSIDE: dict[str, Any] = {
    "labelAlign": "left",
    "labelPadding": -4,
    "labelBaseline": "bottom",
    "ticks": False,
    "domain": False,
    "tickCount": 2,
    "labelFlush": True,
}


# Where a row's stable phases are drawn: a strip in the 8 px just above the plot, so that it
# covers neither the curves nor the axis labels drawn inside the plot (INSIDE).
PHASE_STRIP: dict[str, Any] = {"y": {"value": -9}, "y2": {"value": -2}}
# The y scales of a timeline row reach this far above the highest value (100 %, the GPU's memory),
# so that the top label, drawn above its grid line, stays under the strip.
HEADROOM = 1.2


def label(value: object) -> str:
    """Untrusted text as a chart label: control characters escaped as in the terminal output."""
    return safe_text(value)


def title_of(spec: Spec) -> str:
    """The chart's title (also its accessible name in the page)."""
    title = spec.get("title", "")
    return str(title.get("text", "") if isinstance(title, dict) else title)


def _chart(title: str, datasets: dict[str, pl.DataFrame], body: Spec, height: int = 200) -> Spec:
    """A chart spec; `height` is its plot's (title, axes and legend come on top of it)."""
    spec: Spec = {"title": {"text": title, "anchor": "start"}, "datasets": datasets}
    if not any(k in body for k in ("facet", "vconcat", "hconcat", "concat")):
        # Fitted to the container's width only: fitted in height too (Streamlit's default), a
        # plot whose legend and axes took more than its height was drawn above the chart's
        # frame, its title cut at the top.
        spec.update(
            width="container", height=height, autosize={"type": "fit-x", "contains": "padding"}
        )
    spec.update(body)
    # room above the title for its letters' ascent: with none, its top lay 3 px out of the frame
    spec["padding"] = {"top": 6, "left": 0, "right": 0, "bottom": 0}
    # SVG: a few hundred marks per chart at most, and the page's text stays text
    spec["usermeta"] = {"embedOptions": {"renderer": "svg", "actions": False}}
    spec["config"] = {
        # at most 2 entries a row under the chart: a longer row ran past a half-page chart's
        # width and lost its last entries
        "legend": {
            "orient": "bottom",
            "columns": 2,
            "labelLimit": 0,
            "symbolLimit": 0,
            "symbolOpacity": 1,
        }
    }
    return spec


def _view(
    title: str, name: str, frame: pl.DataFrame, mark: Spec, encoding: Spec, height: int = 200
) -> Spec:
    """A single-mark chart over one dataset."""
    return _chart(
        title, {name: frame}, {"data": {"name": name}, "mark": mark, "encoding": encoding}, height
    )


def _colors(names: Sequence[str], colors: Sequence[str] | None = None) -> Spec:
    """A color scale with a fixed domain, so that a series keeps its color and legend order."""
    colors = colors or [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    return {"domain": list(names), "range": list(colors)}


def numbers_first(values: Sequence[str]) -> list[str]:
    """Values that are whole numbers (GPU counts), in numeric order (1, 2, 4, 8, 16), then the
    others ("all", "other", "2-4") in their given order."""
    numbers = sorted((v for v in values if v.isdigit()), key=int)
    return numbers + [v for v in values if not v.isdigit()]


def _hbars(
    title: str,
    bars: pl.DataFrame,
    who: str,
    order: list[str],
    x_title: str,
    color: str,
    scale: Spec,
    height: int = 200,
) -> Spec:
    """Horizontal bars of `gpu_h` per `who` in the given order, stacked and colored by `color`."""
    return _view(
        title,
        "bars",
        bars,
        {"type": "bar"},
        {
            "y": {
                "field": who,
                "type": "nominal",
                "sort": order,
                "title": None,
                "axis": {"labelOverlap": False},
            },
            "x": {"field": "gpu_h", "type": "quantitative", "title": x_title},
            "color": {"field": color, "type": "nominal", "scale": scale, "title": None},
            "tooltip": [
                {"field": who},
                {"field": color},
                {"field": "gpu_h", "title": "GPU hours", "format": ",.1f"},
            ],
        },
        height=height,
    )


def breakdown(totals: pl.DataFrame, title: str = "Where the GPU hours went") -> Spec:
    """Horizontal bars: allocated, busy, each kind lost, and GPU time of job kinds."""
    row = totals.row(0, named=True) if totals.height else {}
    names = ["Allocated", BUSY, *LOST_KINDS.values(), *JOB_KINDS.values()]
    cols = ["alloc_gpu_h", "busy_gpu_h", *LOST_KINDS, *JOB_KINDS]
    groups = ["allocated", "busy", *(["lost"] * len(LOST_KINDS)), *([BY_JOB] * len(JOB_KINDS))]
    bars = pl.DataFrame(
        {"kind": names, "group": groups, "gpu_h": [float(row.get(c) or 0.0) for c in cols]},
        schema={"kind": pl.String, "group": pl.String, "gpu_h": pl.Float64},
    )
    scale = _colors(
        ["allocated", "busy", "lost", BY_JOB], [PALETTE[0], PALETTE[2], PALETTE[3], PALETTE[5]]
    )
    spec = _hbars(title, bars, "kind", names, "GPU hours", "group", scale)
    # one entry a line: the bars' labels leave the legend only the plot's width
    spec["encoding"]["color"]["legend"] = {"columns": 1}
    return spec


def trend(daily: pl.DataFrame, title: str = "GPU hours per day") -> Spec:
    """Stacked bars of lost GPU hours by kind per day, with allocated and busy as lines."""
    day = pl.col("day").cast(pl.String)
    lost = (
        daily.select(day, *LOST_KINDS)
        .unpivot(index="day", variable_name="kind", value_name="gpu_h")
        .with_columns(pl.col("kind").replace_strict(LOST_KINDS), pl.col("gpu_h").cast(pl.Float64))
    )
    lines = (
        daily.select(
            day, pl.col("alloc_gpu_h").alias("Allocated"), pl.col("busy_gpu_h").alias(BUSY)
        )
        .unpivot(index="day", variable_name="kind", value_name="gpu_h")
        .with_columns(pl.col("gpu_h").cast(pl.Float64))
    )
    kinds = [*LOST_KINDS.values(), "Allocated", BUSY]
    color = _colors(kinds, [PALETTE[3], PALETTE[4], PALETTE[5], PALETTE[0], PALETTE[2]])
    x = {"field": "day", "type": "ordinal", "title": None, "axis": {"labelAngle": 0}}
    enc = {
        "x": x,
        "y": {"field": "gpu_h", "type": "quantitative", "title": "GPU hours"},
        "color": {"field": "kind", "type": "nominal", "scale": color, "title": None},
        "tooltip": [
            {"field": "day"},
            {"field": "kind"},
            {"field": "gpu_h", "title": "GPU hours", "format": ",.1f"},
        ],
    }
    return _chart(
        title,
        {"lost": lost, "lines": lines},
        {
            "layer": [
                {"data": {"name": "lost"}, "mark": {"type": "bar"}, "encoding": enc},
                {
                    "data": {"name": "lines"},
                    "mark": {"type": "line", "point": True},
                    "encoding": enc,
                },
            ],
        },
    )


def top_bar(df: pl.DataFrame, who: str, title: str) -> Spec:
    """Horizontal stacked bars: idle-slot and never-used GPU hours per user (or job)."""
    kinds = {"idle_slot_gpu_h": "Idle slots", "never_used_gpu_h": "Never-used GPUs"}
    names = list(dict.fromkeys(label(v) for v in df[who].to_list())) if df.height else []
    bars = (
        df.select(pl.col(who).map_elements(label, return_dtype=pl.String), *kinds)
        .unpivot(index=who, variable_name="kind", value_name="gpu_h")
        .with_columns(pl.col("kind").replace_strict(kinds), pl.col("gpu_h").cast(pl.Float64))
    )
    scale = _colors(list(kinds.values()), [PALETTE[3], PALETTE[4]])
    height = max(100, 28 * len(names))
    return _hbars(title, bars, who, names, "GPU hours lost", "kind", scale, height)


def share_below(curve: pl.DataFrame, threshold: float) -> float:
    """The CDF read at `threshold` from a curve's quantiles (p against x), by interpolation."""
    if curve.height == 0:
        return float("nan")
    xs = curve["x"].to_numpy()
    ps = curve["p"].to_numpy()
    if threshold < xs[0]:
        return 0.0
    if threshold >= xs[-1]:
        return 1.0
    # the largest p whose quantile is <= threshold, interpolated on the rising part
    idx = int(np.searchsorted(xs, threshold, side="right"))
    x0, x1, p0, p1 = xs[idx - 1], xs[idx], ps[idx - 1], ps[idx]
    return float(p0 if x1 == x0 else p0 + (p1 - p0) * (threshold - x0) / (x1 - x0))


def cdf(
    curves: pl.DataFrame,
    title: str,
    x_title: str,
    threshold: float | None = None,
    side_by_side: bool = False,
    groups: Sequence[str] | None = None,
) -> Spec:
    """CDF curves from quantiles: one line per group (column `vc`), x = value, y = share of
    jobs; the legend reads each curve's share at the threshold; side by side, one panel each."""
    names = (
        list(groups) if groups is not None else curves["vc"].unique(maintain_order=True).to_list()
    )
    parts, legends = [], []
    for name in names:
        c = curves.filter(pl.col("vc") == name).sort("p")
        jobs = int(c["jobs"][0]) if c.height else 0
        legend = f"{label(name)} ({jobs:,} jobs)"
        if threshold is not None:
            legend += f": {100 * share_below(c, threshold):.1f}% ≤ {threshold:g}"
        legends.append(legend)
        parts.append(
            c.select(
                pl.lit(label(name)).alias("vc"),
                pl.lit(legend).alias("curve"),
                pl.col("x").cast(pl.Float64),
                pl.col("p").cast(pl.Float64),
            )
        )
    schema = {"vc": pl.String, "curve": pl.String, "x": pl.Float64, "p": pl.Float64}
    data = pl.concat(parts) if parts else pl.DataFrame(schema=schema)
    is_all = [n == "(all)" for n in names]
    line: Spec = {
        "mark": {"type": "line"},
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "title": x_title},
            "y": {
                "field": "p",
                "type": "quantitative",
                "title": "share of jobs",
                "scale": {"domain": [0, 1]},
                "axis": {"format": "%"},
            },
            "color": {
                "field": "curve",
                "type": "nominal",
                "title": None,
                "scale": _colors(legends),
                "sort": legends,
                # under the plot, one curve a line: a legend inside the plot covered curves
                # that rise early (many jobs near 0 %)
                "legend": {"orient": "bottom", "direction": "vertical", "columns": 1},
            },
            "strokeDash": {
                "field": "curve",
                "type": "nominal",
                "legend": None,
                "sort": legends,
                "scale": {"domain": legends, "range": [[5, 3] if a else [1, 0] for a in is_all]},
            },
            "strokeWidth": {
                "field": "curve",
                "type": "nominal",
                "legend": None,
                "sort": legends,
                "scale": {"domain": legends, "range": [3 if a else 2 for a in is_all]},
            },
            "tooltip": [
                {"field": "vc", "title": "VC"},
                {"field": "x", "title": x_title, "format": ".1f"},
                {"field": "p", "title": "share of jobs at or below", "format": ".1%"},
            ],
        },
    }
    rule: Spec = {
        "mark": {"type": "rule", "strokeDash": [4, 4], "color": "grey"},
        "encoding": {"x": {"datum": threshold}},
    }
    if not side_by_side:
        layers = [{"data": {"name": "curves"}, **line}]
        if threshold is not None:
            layers.append({"data": {"values": [{}]}, **rule})
        return _chart(title, {"curves": data}, {"layer": layers}, height=220)
    # side by side: one panel per curve, headed by its legend text, two panels across (the
    # page shows two such charts next to each other). Each panel draws its own axes, without
    # titles (the subtitle names them once): axes shared along a row or column were drawn under
    # an empty last cell, and neighbouring panels' titles ran into each other.
    line["encoding"]["color"]["legend"] = None
    line["encoding"]["x"]["title"] = None
    line["encoding"]["y"]["title"] = None
    inner: Spec = {"layer": [line]}
    if threshold is not None:  # one rule per panel: the curve's row at its first grid point
        inner["layer"].append({"transform": [{"filter": {"field": "x", "equal": 0}}], **rule})
    spec = _chart(
        title,
        {"curves": data},
        {
            "data": {"name": "curves"},
            "facet": {
                "field": "curve",
                "type": "nominal",
                "sort": legends,
                "title": None,
                "header": {"labelLimit": 0},
            },
            "columns": 2,
            "spec": {"width": 170, "height": 150, **inner},
            "resolve": {"axis": {"x": "independent", "y": "independent"}},
            "spacing": {"row": 24, "column": 28},
        },
    )
    spec["title"]["subtitle"] = f"x: {x_title}; y: share of jobs at or below x"
    return spec


def minute_cdf(hist: pl.DataFrame, title: str, order: Sequence[str]) -> Spec:
    """CDFs of per-minute GPU utilization from cumulated histograms (grp, bucket, cdf)."""
    present = hist["grp"].unique().to_list() if hist.height else []
    names = numbers_first(
        [g for g in order if g in present] + sorted(g for g in present if g not in order)
    )
    data = hist.select(
        pl.col("grp").map_elements(label, return_dtype=pl.String),
        pl.col("bucket").cast(pl.Float64),
        pl.col("cdf").cast(pl.Float64),
    )
    return _view(
        title,
        "hist",
        data,
        {"type": "line", "interpolate": "step-after"},
        {
            "x": {
                "field": "bucket",
                "type": "quantitative",
                "scale": {"domain": [0, 100]},
                "title": "GPU utilization in a minute (%)",
            },
            "y": {
                "field": "cdf",
                "type": "quantitative",
                "scale": {"domain": [0, 1]},
                "axis": {"format": "%"},
                "title": "share of GPU minutes",
            },
            "color": {
                "field": "grp",
                "type": "nominal",
                "title": None,
                "scale": _colors([label(n) for n in names]),
            },
            "tooltip": [
                {"field": "grp", "title": "group"},
                {"field": "bucket", "title": "util ≤"},
                {"field": "cdf", "title": "share of GPU minutes", "format": ".1%"},
            ],
        },
    )


def bars(df: pl.DataFrame, x: str, y: str, color: str | None, title: str, y_title: str) -> Spec:
    """Grouped bars of `y` by `x`, one bar per value of `color` side by side."""
    data = df.select(
        pl.col(x).map_elements(label, return_dtype=pl.String).alias("x"),
        pl.col(y).cast(pl.Float64).alias("y"),
        (pl.col(color).map_elements(label, return_dtype=pl.String) if color else pl.lit(y)).alias(
            "group"
        ),
    )
    xs = numbers_first(data["x"].unique(maintain_order=True).to_list())
    groups = numbers_first(data["group"].unique(maintain_order=True).to_list())
    return _view(
        title,
        "bars",
        data,
        {"type": "bar"},
        {
            "x": {
                "field": "x",
                "type": "nominal",
                "sort": xs,
                "title": None,
                "axis": {"labelAngle": 0 if len(xs) <= 6 else -30, "labelLimit": 240},
            },
            "xOffset": {"field": "group", "type": "nominal", "sort": groups},
            "y": {"field": "y", "type": "quantitative", "title": y_title},
            "color": {
                "field": "group",
                "type": "nominal",
                "title": None,
                "scale": _colors(groups),
            },
            "tooltip": [
                {"field": "x", "title": x},
                {"field": "group"},
                {"field": "y", "title": y_title, "format": ",.2f"},
            ],
        },
    )


def heatmap(grid: pl.DataFrame, title: str) -> Spec:
    """Table III as a heatmap: t (s) across, m (GiB) down, percent of GPU time."""
    ts = sorted(set(grid["t_s"].to_list()))
    ms = sorted(set(grid["m_gib"].to_list()))
    cells = grid.select(
        pl.col("t_s").map_elements(lambda v: f"> {v:g} s", return_dtype=pl.String).alias("t"),
        pl.col("m_gib").map_elements(lambda v: f"> {v:g} GiB", return_dtype=pl.String).alias("m"),
        pl.col("pct").cast(pl.Float64),
    ).with_columns(text=pl.format("{}%", pl.col("pct").round(1)).fill_null(""))
    top, low = cells["pct"].max(), cells["pct"].min()
    top = float(top) if isinstance(top, int | float) else 1.0
    low = float(low) if isinstance(low, int | float) else 0.0
    low = min(low, top - 1.0)  # a scale of one value would color nothing
    # "reds" over the cells' own range (on 0-100, cells of 84-100 % were all one red): from 70 %
    # of the way, white text reads better than black (WCAG contrast of the scheme's colors)
    dark = low + 0.7 * (top - low)
    x = {
        "field": "t",
        "type": "ordinal",
        "sort": [f"> {t:g} s" for t in ts],
        "title": "phase longer than t",
        "axis": {"labelAngle": 0},
    }
    y = {
        "field": "m",
        "type": "ordinal",
        "sort": [f"> {m:g} GiB" for m in ms],
        "title": "idle GPU memory above m",
    }
    return _chart(
        title,
        {"cells": cells},
        {
            "data": {"name": "cells"},
            "encoding": {"x": x, "y": y},
            "layer": [
                {
                    "mark": {"type": "rect"},
                    "encoding": {
                        "color": {
                            "field": "pct",
                            "type": "quantitative",
                            "title": "% GPU time",
                            "scale": {"scheme": "reds", "domain": [low, top]},
                            "legend": {"orient": "right"},
                        },
                        "tooltip": [
                            {"field": "t"},
                            {"field": "m"},
                            {"field": "pct", "title": "% of GPU time", "format": ".1f"},
                        ],
                    },
                },
                {
                    "mark": {"type": "text"},
                    "encoding": {
                        "text": {"field": "text"},
                        # white on the dark cells, black on the others
                        "color": {
                            "condition": {"test": {"field": "pct", "gt": dark}, "value": "white"},
                            "value": "black",
                        },
                    },
                },
            ],
        },
        height=max(100, 32 * len(ms)),
    )


def time_axis(start: object, end: object) -> Spec:
    """A UTC time x axis with one label format throughout (Vega's default mixes "Nov 01",
    "03 PM" and ":30" on one axis): hours and minutes when `start` and `end` (datetimes) fall on
    one UTC day, else the date too."""
    days = {t.astimezone(UTC).date() for t in (start, end) if isinstance(t, datetime)}
    return {
        "type": "temporal",
        "scale": {"type": "utc"},
        "title": "time (UTC)",
        # the utc scale makes the format UTC ("formatType": "utc" here makes Vega ignore it)
        "axis": {"format": "%H:%M" if len(days) <= 1 else "%b %d %H:%M"},
    }


def with_device(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the device key's `gpu_instance` (null: a whole GPU) and `mig_profile`,
    added as nulls when it has none (frames of whole GPUs built without them)."""
    missing = {"gpu_instance": pl.Int16, "mig_profile": pl.String}
    return frame.with_columns(
        pl.lit(None, dtype).alias(c) for c, dtype in missing.items() if c not in frame.columns
    )


def by_device(frame: pl.DataFrame, keys: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """`frame`'s rows with `columns` of their device's row of `keys` (`gpu_keys`), matched on
    host, GPU and MIG instance (a null instance, a whole GPU, matches a null)."""
    return with_device(frame).join(
        keys.select(*columns, *DEVICE_KEY), on=list(DEVICE_KEY), nulls_equal=True
    )


def gpu_keys(gpus: pl.DataFrame, max_gpus: int | None = None) -> pl.DataFrame:
    """One row per device of a job, a GPU or a MIG instance (host, gpu, gpu_instance,
    mig_profile, never_used over its attempts, first start, last end, memory capacity),
    numbered 0.. by host, GPU and instance in `row`."""
    keys = (
        with_device(gpus)
        .group_by(*DEVICE_KEY, maintain_order=True)
        .agg(
            pl.col("mig_profile").first(),
            pl.col("never_used").all(),
            pl.col("start_ts").min(),
            pl.col("end_ts").max(),
            pl.col("mem_total_mib").max(),
        )
        .sort(*DEVICE_KEY, nulls_last=False)
    )
    if max_gpus is not None:
        keys = keys.head(max_gpus)
    return keys.with_row_index("row").with_columns(pl.col("row").cast(pl.Int32))


# A GPU's stable phases are drawn only when they leave more than this share of its time
# uncovered: a strip over the whole job tells nothing.
PHASES_COVER_ALL = 0.95


def distinguishing(phases: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """The phases (with `row`) of the rows of `keys` whose phases cover less than
    PHASES_COVER_ALL of that GPU's time (`start_ts`-`end_ts` of its row)."""
    span = keys.select("row", (pl.col("end_ts") - pl.col("start_ts")).dt.total_seconds().alias("d"))
    covered = (
        phases.group_by("row")
        .agg((pl.col("end_ts") - pl.col("start_ts")).dt.total_seconds().sum().alias("c"))
        .join(span, on="row")
        .filter(pl.col("c") >= PHASES_COVER_ALL * pl.col("d"))
    )
    return phases.filter(~pl.col("row").is_in(covered["row"].implode()))


def timeline(
    samples: pl.DataFrame,
    gpus: pl.DataFrame,
    slots: pl.DataFrame,
    phases: pl.DataFrame,
    title: str,
    max_gpus: int = 16,
) -> Spec:
    """One row per GPU: utilization (left axis) and memory used (right axis) over time, idle
    slots shaded red, stable phases as a green strip along the top (where they do not cover the
    GPU's whole time: `distinguishing`), never-used GPUs shaded grey
    and named so in their row title. Rows are numbered 0.. here; each layer selects its row by
    that number."""
    keys = gpu_keys(gpus, max_gpus)
    ms = pl.col("ts").dt.epoch("ms").cast(pl.Float64)
    lines = by_device(samples, keys, "row").select(
        "row",
        ms.alias("ts"),
        pl.col("util").cast(pl.Float64),
        pl.col("mem_used_mib").cast(pl.Float64),
    )
    spans = [
        keys.filter(pl.col("never_used")).select(
            "row", "start_ts", "end_ts", kind=pl.lit(NEVER_USED)
        ),
        by_device(slots, keys, "row").select("row", "start_ts", "end_ts", kind=pl.lit(IDLE)),
    ]
    if phases.height:
        stable = phases.filter(pl.col("stable")) if "stable" in phases.columns else phases
        spans.append(distinguishing(by_device(stable, keys, "row"), keys).select(
            "row", "start_ts", "end_ts", kind=pl.lit(PHASE)))  # fmt: skip
    shaded = pl.concat(
        [s for s in spans if s.height]
        or [
            pl.DataFrame(
                schema={
                    "row": pl.Int32,
                    "start_ts": pl.Datetime("us", "UTC"),
                    "end_ts": pl.Datetime("us", "UTC"),
                    "kind": pl.String,
                }
            )
        ]
    ).select(
        "row",
        pl.col("start_ts").dt.epoch("ms").cast(pl.Float64).alias("start"),
        pl.col("end_ts").dt.epoch("ms").cast(pl.Float64).alias("end"),
        "kind",
    )
    color = {
        "type": "nominal",
        "title": None,
        "scale": _colors(
            [UTIL, MEMORY, IDLE, PHASE, NEVER_USED],
            [PALETTE[0], PALETTE[1], IDLE_COLOR, PHASE_COLOR, NEVER_USED_COLOR],
        ),
    }
    x = time_axis(keys["start_ts"].min(), keys["end_ts"].max())

    def line(pick: list[Spec], xr: Spec, field: str, name: str, y: Spec) -> Spec:
        return {
            "data": {"name": "samples"},
            "transform": pick,
            "mark": {"type": "line", "strokeWidth": 1.5, "clip": True},
            "encoding": {
                "x": {"field": "ts", **xr},
                "y": {"field": field, "type": "quantitative", "title": None, **y},
                "color": {"datum": name, **color},
            },
        }

    rows = []
    for r in keys.iter_rows(named=True):
        name = gpu_name(r)
        mine = lines.filter(pl.col("row") == r["row"])["mem_used_mib"].drop_nulls().to_list()
        top = max([float(v) for v in mine] + [float(r["mem_total_mib"] or 0.0), 1.0])
        pick = [{"filter": {"field": "row", "equal": r["row"]}}]
        last = r["row"] == keys.height - 1
        xr = x if last else {**x, "axis": None}  # one time axis, under the last row
        band: Spec = {
            "data": {"name": "spans"},
            "mark": {"type": "rect", "opacity": 0.25},
            "encoding": {
                "x": {"field": "start", **xr},
                "x2": {"field": "end"},
                "color": {"field": "kind", **color},
            },
        }
        rows.append(
            {
                "title": {"text": name, "fontSize": 13, "anchor": "start", "offset": 12},
                "width": "container",
                "height": 100,
                "layer": [
                    # idle slots and never-used time over the whole height, stable phases as a strip
                    # just above the plot (a phase often lies inside an idle slot), clear of the
                    # axis labels drawn inside the plot
                    {
                        **band,
                        "transform": [
                            *pick,
                            {"filter": {"field": "kind", "oneOf": [IDLE, NEVER_USED]}},
                        ],
                    },
                    {
                        **band,
                        "transform": [*pick, {"filter": {"field": "kind", "equal": PHASE}}],
                        "mark": {"type": "rect", "opacity": 0.6},
                        "encoding": {**band["encoding"], **PHASE_STRIP},
                    },
                    line(
                        pick,
                        xr,
                        "util",
                        UTIL,
                        {
                            "scale": {"domain": [0, 100 * HEADROOM]},
                            "axis": {**INSIDE, "format": "d", "values": [0, 50, 100]},
                        },
                    ),
                    line(
                        pick,
                        xr,
                        "mem_used_mib",
                        MEMORY,
                        {
                            "scale": {"domain": [0, round(HEADROOM * top)]},
                            "axis": {
                                **INSIDE,
                                "orient": "right",
                                "grid": False,
                                "labelAlign": "right",
                                # MiB as the tables write it (50,000), not SI-prefixed (50k)
                                "format": ",d",
                            },
                        },
                    ),
                ],
                "resolve": {"scale": {"y": "independent"}},
            }
        )
    return _chart(
        title,
        {"samples": lines, "spans": shaded},
        {
            "vconcat": rows or [{"mark": "text", "data": {"values": [{}]}}],
            "spacing": 12,
            "resolve": {"scale": {"x": "shared", "color": "shared"}},
        },
    )


def power(samples: pl.DataFrame, gpus: pl.DataFrame, title: str, max_gpus: int = 16) -> Spec:
    """Power draw (W) over time, one line per GPU of `gpus` (its rows of job_gpu_usage), from
    the job's samples (reads.job_timeline); the same GPUs as `timeline` shows. A MIG instance's
    line is its parent GPU's power, as the exporter repeats it."""
    keys = gpu_keys(gpus, max_gpus)
    named = [gpu_name(r) for r in keys.iter_rows(named=True)]
    lines = (
        by_device(samples.filter(pl.col("power_w").is_not_null()), keys, "row")
        .with_columns(
            pl.col("row").replace_strict(list(range(len(named))), named).alias("gpu"),
            pl.col("ts").dt.epoch("ms").cast(pl.Float64).alias("ts"),
        )
        .select("gpu", "ts", pl.col("power_w").cast(pl.Float64))
    )
    x = time_axis(keys["start_ts"].min(), keys["end_ts"].max())
    return _chart(
        title,
        {"power": lines},
        {
            "data": {"name": "power"},
            "width": "container",
            "mark": {"type": "line", "strokeWidth": 1.5, "clip": True},
            "encoding": {
                "x": {"field": "ts", **x},
                "y": {"field": "power_w", "type": "quantitative", "title": "W"},
                "color": {
                    "field": "gpu",
                    "type": "nominal",
                    "title": None,
                    "scale": _colors(named),
                },
            },
        },
        height=220,
    )


HEATMAP_COLUMNS = 240  # time cells per GPU in the compact view
HEATMAP_ROW_PX = 16


def _utc_text(column: str) -> pl.Expr:
    """Epoch milliseconds as "Nov 01 20:15" (UTC), for tooltips: the column "from"."""
    ts = pl.from_epoch(pl.col(column).cast(pl.Int64), time_unit="ms")
    return ts.dt.strftime("%b %d %H:%M").alias("from")


def gpu_name(key: dict[str, Any]) -> str:
    """A device's row label in the Job page's charts, from its `gpu_keys` row: its name
    (`analyses.reads.device_of`: `host:gpu`, `host:gpu/gi3 (1g.10gb)` for a MIG instance)."""
    return label(device_of(key)) + (" — NEVER USED" if key["never_used"] else "")


def gpu_heatmap(
    samples: pl.DataFrame,
    gpus: pl.DataFrame,
    slots: pl.DataFrame,
    title: str,
    columns: int = HEATMAP_COLUMNS,
) -> Spec:
    """The compact view of a job with many GPUs: one row per GPU, time across, each cell
    colored by the GPU's mean utilization in it; idle slots drawn red and never-used GPUs grey
    over their cells; a cell with no sample stays blank (no data)."""
    keys = gpu_keys(gpus)
    keys = keys.with_columns(
        name=pl.Series([gpu_name(r) for r in keys.iter_rows(named=True)], dtype=pl.String)
    )
    names = keys["name"].to_list()
    lo = keys["start_ts"].min()
    hi = keys["end_ts"].max()
    span_ms = (
        max((hi - lo).total_seconds() * 1000.0, 1000.0)
        if isinstance(lo, datetime) and isinstance(hi, datetime)
        else 1000.0
    )
    step = span_ms / max(columns, 1)
    lo_ms = float(lo.timestamp() * 1000.0) if isinstance(lo, datetime) else 0.0
    k = ((pl.col("ts").dt.epoch("ms").cast(pl.Float64) - lo_ms) / step).floor()
    cells = (
        by_device(samples, keys, "name")
        .group_by("name", k.alias("k"))
        .agg(pl.col("util").cast(pl.Float64).mean())
        .select(
            "name",
            (lo_ms + pl.col("k") * step).alias("start"),
            (lo_ms + (pl.col("k") + 1) * step).alias("end"),
            pl.col("util").round(1),
        )
        .sort("name", "start")
        .with_columns(_utc_text("start"))
    )
    ms = {c: pl.col(c).dt.epoch("ms").cast(pl.Float64) for c in ("start_ts", "end_ts")}
    marked = pl.concat(
        [
            keys.filter(pl.col("never_used")).select(
                "name", ms["start_ts"].alias("start"), ms["end_ts"].alias("end"),
                kind=pl.lit(NEVER_USED),
            ),
            by_device(slots, keys, "name").select(
                "name", ms["start_ts"].alias("start"), ms["end_ts"].alias("end"),
                kind=pl.lit(IDLE),
            ),
        ]
    )  # fmt: skip
    marked = marked.with_columns(_utc_text("start"))
    x = time_axis(lo, hi)
    y = {
        "field": "name",
        "type": "nominal",
        "sort": names,
        "title": None,
        "axis": {"labelLimit": 260, "labelOverlap": False, "labelFlush": False},
    }
    tip_time = {"field": "from", "title": "from (UTC)"}
    where = {"x": {"field": "start", **x}, "x2": {"field": "end"}, "y": y}  # a cell, a span
    return _chart(
        title,
        {"cells": cells, "marked": marked},
        {
            "height": {"step": HEATMAP_ROW_PX},
            "layer": [
                {
                    "data": {"name": "cells"},
                    "mark": {"type": "rect"},
                    "encoding": {
                        **where,
                        "color": {
                            "field": "util",
                            "type": "quantitative",
                            "title": UTIL,
                            "scale": {"scheme": "blues", "domain": [0, 100]},
                            "legend": {"orient": "right"},
                        },
                        "tooltip": [
                            {"field": "name", "title": "GPU"},
                            tip_time,
                            {"field": "util", "title": UTIL, "format": ".1f"},
                        ],
                    },
                },
                {
                    "data": {"name": "marked"},
                    "mark": {"type": "rect", "opacity": 0.85},
                    "encoding": {
                        **where,
                        "color": {
                            "field": "kind",
                            "type": "nominal",
                            "title": None,
                            "scale": _colors([IDLE, NEVER_USED], [IDLE_COLOR, NEVER_USED_COLOR]),
                            "legend": {"orient": "bottom"},
                        },
                        "tooltip": [{"field": "name", "title": "GPU"}, {"field": "kind"}, tip_time],
                    },
                },
            ],
            "resolve": {"scale": {"color": "independent"}},
        },
    )


RECLAIMED, WORK_LOST = "Reclaimed", "Work lost (wrongful hits)"


def policy_sweep(
    sweep: pl.DataFrame, title: str = "What the cancel rule reclaims and breaks"
) -> Spec:
    """Per idle threshold (x, hours): GPU hours reclaimed and GPU hours of work lost by wrongful
    hits, as two lines with points; jobs hit and wrongful hits in the tooltip. `sweep` has one row
    per threshold (the replay's rows of one VC or of '(all)')."""
    cols = {"reclaimed_gpu_h": RECLAIMED, "work_lost_gpu_h": WORK_LOST}
    points = (
        sweep.select("idle_hours", "jobs_hit", "wrongful_hits", *cols)
        .unpivot(
            index=["idle_hours", "jobs_hit", "wrongful_hits"],
            variable_name="series",
            value_name="gpu_h",
        )
        .with_columns(
            pl.col("series").replace_strict(cols),
            pl.col("idle_hours").cast(pl.Float64),
            pl.col("gpu_h").cast(pl.Float64),
        )
    )
    return _view(
        title,
        "sweep",
        points,
        {"type": "line", "point": True},
        {
            "x": {"field": "idle_hours", "type": "quantitative", "title": "Idle for (hours)"},
            "y": {"field": "gpu_h", "type": "quantitative", "title": "GPU hours"},
            "color": {
                "field": "series",
                "type": "nominal",
                "title": None,
                "scale": _colors(list(cols.values()), [PALETTE[2], PALETTE[3]]),
            },
            "tooltip": [
                {"field": "idle_hours", "title": "Idle for (hours)"},
                {"field": "series"},
                {"field": "gpu_h", "title": "GPU hours", "format": ",.1f"},
                {"field": "jobs_hit", "title": "Jobs hit", "format": ","},
                {"field": "wrongful_hits", "title": "Wrongful hits", "format": ","},
            ],
        },
    )
