"""Plotly figures from the small frames of queries.py. Pure: frames in, figures out.

Plotly renders a subset of HTML inside text (`<b>`, `<a href>`, `<br>`), so every label that comes
from the data (users, job names, hosts, VCs) goes through `label()`: control characters escaped
as in the terminal output, then HTML-escaped, so it shows as the literal text it is.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from gpuwaste.dashboard.queries import JOB_KINDS, LOST_KINDS
from gpuwaste.render import safe_text

PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")
IDLE_COLOR = "rgba(228, 87, 86, 0.25)"
PHASE_COLOR = "rgba(84, 162, 75, 0.18)"


def label(value: object) -> str:
    """Untrusted text as a plotly label that shows literally."""
    return html.escape(safe_text(value), quote=True)


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(
        title={"text": title},
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
    )
    return fig


def breakdown(totals: pl.DataFrame, title: str = "Where the GPU hours went") -> go.Figure:
    """Horizontal bars: allocated, busy, each kind lost, and GPU time of job kinds."""
    row = totals.row(0, named=True) if totals.height else {}
    names = ["Allocated", "Busy", *LOST_KINDS.values(), *JOB_KINDS.values()]
    cols = ["alloc_gpu_h", "busy_gpu_h", *LOST_KINDS, *JOB_KINDS]
    groups = ["allocated", "used", *(["lost"] * len(LOST_KINDS)), *(["of which"] * len(JOB_KINDS))]
    colors = {
        "allocated": PALETTE[0],
        "used": PALETTE[2],
        "lost": PALETTE[3],
        "of which": PALETTE[5],
    }
    fig = go.Figure()
    for group in dict.fromkeys(groups):
        idx = [i for i, g in enumerate(groups) if g == group]
        fig.add_bar(
            y=[names[i] for i in idx],
            x=[float(row.get(cols[i]) or 0.0) for i in idx],
            orientation="h",
            name=group,
            marker_color=colors[group],
            hovertemplate="%{y}: %{x:,.1f} GPU h<extra></extra>",
        )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="GPU hours")
    return _layout(fig, title)


def trend(daily: pl.DataFrame, title: str = "GPU hours per day") -> go.Figure:
    """Stacked bars of lost GPU hours by kind per day, with allocated and busy as lines."""
    fig = go.Figure()
    days = daily["day"].to_list() if daily.height else []
    for i, (col, name) in enumerate(LOST_KINDS.items()):
        fig.add_bar(x=days, y=daily[col].to_list() if daily.height else [], name=name,
                    marker_color=PALETTE[3 + i])  # fmt: skip
    fig.add_scatter(x=days, y=daily["alloc_gpu_h"].to_list() if daily.height else [],
                    name="Allocated", mode="lines+markers", line={"color": PALETTE[0]})  # fmt: skip
    fig.add_scatter(x=days, y=daily["busy_gpu_h"].to_list() if daily.height else [],
                    name="Busy", mode="lines+markers", line={"color": PALETTE[2]})  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="GPU hours")
    return _layout(fig, title)


def top_bar(df: pl.DataFrame, who: str, title: str) -> go.Figure:
    """Horizontal stacked bars: idle-slot and never-used GPU hours per user (or job)."""
    fig = go.Figure()
    names = [label(v) for v in df[who].to_list()] if df.height else []
    for col, name, color in (
        ("idle_slot_gpu_h", "Idle slots", PALETTE[3]),
        ("never_used_gpu_h", "Never-used GPUs", PALETTE[4]),
    ):
        fig.add_bar(y=names, x=df[col].to_list() if df.height else [], name=name,
                    orientation="h", marker_color=color)  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="GPU hours lost")
    return _layout(fig, title, height=max(300, 28 * len(names) + 120))


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
) -> go.Figure:
    """CDF curves from quantiles: one trace per group (column `vc`), x = value, y = share."""
    names = (
        list(groups) if groups is not None else curves["vc"].unique(maintain_order=True).to_list()
    )
    cols = min(len(names), 3) if side_by_side and names else 1
    rows = -(-len(names) // cols) if side_by_side and names else 1
    fig = make_subplots(
        rows=rows, cols=cols, shared_yaxes=True,
        subplot_titles=[label(n) for n in names] if side_by_side else None,
    )  # fmt: skip
    for i, name in enumerate(names):
        c = curves.filter(pl.col("vc") == name).sort("p")
        jobs = int(c["jobs"][0]) if c.height else 0
        legend = f"{label(name)} ({jobs:,} jobs)"
        if threshold is not None:
            legend += f": {100 * share_below(c, threshold):.1f}% ≤ {threshold:g}"
        r, k = (i // cols + 1, i % cols + 1) if side_by_side else (1, 1)
        fig.add_scatter(
            x=c["x"].to_list(), y=c["p"].to_list(), mode="lines", name=legend,
            line={"color": PALETTE[i % len(PALETTE)], "width": 3 if name == "(all)" else 2,
                  "dash": "dot" if name == "(all)" else "solid"},
            hovertemplate=f"{label(name)}<br>%{{y:.1%}} of jobs ≤ %{{x:.1f}}<extra></extra>",
            row=r, col=k,
        )  # fmt: skip
    if threshold is not None:
        fig.add_vline(x=threshold, line_dash="dash", line_color="grey", row="all", col="all")
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    fig.update_xaxes(title_text=x_title)
    _layout(fig, title, height=400 if rows == 1 else 300 * rows + 60)
    # CDFs rise from lower left to upper right: the upper left is where the legend hides nothing.
    fig.update_layout(legend={"orientation": "v", "yanchor": "top", "y": 0.98, "xanchor": "left",
                              "x": 0.01, "bgcolor": "rgba(255,255,255,0.7)"})  # fmt: skip
    return fig


def minute_cdf(hist: pl.DataFrame, title: str, order: Sequence[str]) -> go.Figure:
    """CDFs of per-minute GPU utilization from cumulated histograms (grp, bucket, cdf)."""
    fig = go.Figure()
    present = hist["grp"].unique().to_list() if hist.height else []
    names = [g for g in order if g in present] + sorted(g for g in present if g not in order)
    for i, g in enumerate(names):
        c = hist.filter(pl.col("grp") == g).sort("bucket")
        fig.add_scatter(x=c["bucket"].to_list(), y=c["cdf"].to_list(), mode="lines",
                        line_shape="hv", name=label(g), line={"color": PALETTE[i % len(PALETTE)]})  # fmt: skip
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="share of GPU minutes")
    fig.update_xaxes(range=[0, 100], title_text="GPU utilization in a minute (%)")
    return _layout(fig, title)


def bars(
    df: pl.DataFrame, x: str, y: str, color: str | None, title: str, y_title: str
) -> go.Figure:
    """Grouped bars of `y` by `x`, one trace per value of `color`."""
    fig = go.Figure()
    groups = df[color].unique(maintain_order=True).to_list() if color and df.height else [None]
    for i, g in enumerate(groups):
        d = df if g is None else df.filter(pl.col(color) == g)  # type: ignore[arg-type]
        fig.add_bar(x=[label(v) for v in d[x].to_list()], y=d[y].to_list(),
                    name=label(g) if g is not None else y, marker_color=PALETTE[i % len(PALETTE)])  # fmt: skip
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category")
    fig.update_yaxes(title_text=y_title)
    return _layout(fig, title)


def heatmap(grid: pl.DataFrame, title: str) -> go.Figure:
    """Table III as a heatmap: t (s) across, m (GiB) down, percent of GPU time."""
    ts = sorted(set(grid["t_s"].to_list()))
    ms = sorted(set(grid["m_gib"].to_list()))
    lookup = {(r["t_s"], r["m_gib"]): r["pct"] for r in grid.iter_rows(named=True)}
    z = [[lookup.get((t, m)) for t in ts] for m in ms]
    fig = go.Figure(
        go.Heatmap(
            x=[f"{t:g} s" for t in ts], y=[f"{m:g} GiB" for m in ms], z=z,
            colorscale="Reds", colorbar={"title": {"text": "% GPU time"}},
            text=[[f"{v:.1f}%" if v is not None else "" for v in row] for row in z],
            texttemplate="%{text}",
            hovertemplate="t > %{x}, idle memory > %{y}: %{z:.1f}% of GPU time<extra></extra>",
        )
    )  # fmt: skip
    fig.update_xaxes(title_text="phase longer than t", type="category")
    fig.update_yaxes(title_text="idle GPU memory above m", type="category")
    return _layout(fig, title, height=340)


def timeline(
    samples: pl.DataFrame,
    gpus: pl.DataFrame,
    slots: pl.DataFrame,
    phases: pl.DataFrame,
    title: str,
    max_gpus: int = 16,
) -> go.Figure:
    """One row per GPU: utilization (left axis) and memory used (right axis) over time, idle
    slots shaded red, stable phases shaded green, never-used GPUs named in their row title."""
    keys = (
        gpus.group_by("host", "gpu", maintain_order=True)
        .agg(pl.col("never_used").all(), pl.col("start_ts").min(), pl.col("end_ts").max())
        .sort("host", "gpu")
        .head(max_gpus)
    )
    titles = []
    for r in keys.iter_rows(named=True):
        t = f"{label(r['host'])} GPU {r['gpu']}"
        titles.append(t + " — NEVER USED" if r["never_used"] else t)
    n = max(1, keys.height)
    fig = make_subplots(
        rows=n, cols=1, shared_xaxes=True, vertical_spacing=min(0.08, 0.3 / n),
        subplot_titles=titles or None, specs=[[{"secondary_y": True}]] * n,
    )  # fmt: skip
    for i, r in enumerate(keys.iter_rows(named=True), start=1):
        s = samples.filter((pl.col("host") == r["host"]) & (pl.col("gpu") == r["gpu"]))
        show = i == 1
        fig.add_scatter(x=s["ts"].to_list(), y=s["util"].to_list(), name="GPU util %",
                        mode="lines", line={"color": PALETTE[0], "width": 1.5},
                        legendgroup="util", showlegend=show, row=i, col=1, secondary_y=False)  # fmt: skip
        fig.add_scatter(x=s["ts"].to_list(), y=s["mem_used_mib"].to_list(), name="memory MiB",
                        mode="lines", line={"color": PALETTE[1], "width": 1.5},
                        legendgroup="mem", showlegend=show, row=i, col=1, secondary_y=True)  # fmt: skip
        for frame, color in ((slots, IDLE_COLOR), (phases, PHASE_COLOR)):
            if frame.height == 0:
                continue
            sel = frame.filter((pl.col("host") == r["host"]) & (pl.col("gpu") == r["gpu"]))
            if "stable" in sel.columns:
                sel = sel.filter(pl.col("stable"))
            for a, b in sel.select("start_ts", "end_ts").iter_rows():
                fig.add_vrect(x0=a, x1=b, fillcolor=color, line_width=0, layer="below",
                              row=i, col=1)  # fmt: skip
        if r["never_used"]:
            fig.add_vrect(x0=r["start_ts"], x1=r["end_ts"], fillcolor="rgba(120,120,120,0.15)",
                          line_width=0, row=i, col=1)  # fmt: skip
        fig.update_yaxes(range=[0, 105], row=i, col=1, secondary_y=False)
        mine = gpus.filter((pl.col("host") == r["host"]) & (pl.col("gpu") == r["gpu"]))
        mem = [
            *mine["mem_total_mib"].drop_nulls().to_list(),
            *s["mem_used_mib"].drop_nulls().to_list(),
        ]
        top = max([float(v) for v in mem] + [1.0])
        fig.update_yaxes(range=[0, 1.05 * top], row=i, col=1, secondary_y=True)
    _layout(fig, title, height=160 * n + 140)
    fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1},
                      margin={"t": 80})  # fmt: skip
    return fig
