"""`gpuwaste notify`: plan the digests of a window, print them (dry run) or deliver them.

Delivery rules (docs/act.md): each message is keyed by (recipient, channel, window, content
hash) in the `notifications` ledger; its row is written `sending` before delivery starts,
`unconfirmed` just before the server can hold the complete message, and `sent` or `failed`
after. A run sends a message whose row is absent, `sending` or `failed`; it never sends one that
is `sent`, nor one that is `unconfirmed` unless `resend_unconfirmed` (then with the same
Message-ID, so mail clients can drop a duplicate). Runs hold the warehouse's `notify` lock.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import make_msgid
from typing import IO
from urllib.parse import urlsplit

import polars as pl

from gpuwaste.act.money import shown_currency
from gpuwaste.act.notify import recipients as rcpt
from gpuwaste.act.notify.digest import (
    Digest,
    DigestContext,
    Window,
    WindowFigures,
    resolve_window,
    user_digests,
    vc_digests,
    window_figures,
)
from gpuwaste.act.notify.ledger import FAILED, SENDING, SENT, UNCONFIRMED, Entry, Ledger
from gpuwaste.act.notify.smtp import (
    DeliveryError,
    SmtpServer,
    build_email,
    parse_smtp_url,
    send_email,
)
from gpuwaste.act.notify.webhook import apprise_url, escape, fingerprint, post, redacted
from gpuwaste.analyses.freshness import NOTIFY_CONSEQUENCE, freshness, late_warnings
from gpuwaste.config import NotifyConfig, Settings
from gpuwaste.errors import GpuwasteError, UsageError
from gpuwaste.text import printable
from gpuwaste.warehouse.catalog import connect, refresh_catalog
from gpuwaste.warehouse.lock import writer_lock
from gpuwaste.warehouse.store import Warehouse

EMAIL = "email"


@dataclass(frozen=True)
class Options:
    """The command line's one-off choices (None: the `[notify]` configuration's)."""

    since: str | None = None
    until: str | None = None
    cluster: str | None = None
    smtp: str | None = None
    smtp_password_env: str | None = None
    sender: str | None = None
    address_template: str | None = None
    webhook: str | None = None
    dashboard_url: str | None = None
    send: bool = False
    resend_unconfirmed: bool = False
    count_looks_busy: bool = False  # a looks-busy job's busy time counts as lost (#44)


@dataclass(frozen=True)
class Message:
    """One digest to one recipient on one channel."""

    digest: Digest
    channel: str  # "email" or "webhook:<fingerprint>"
    recipient: str  # an address, or "user:NAME" / "vc:NAME" for a webhook
    window: Window

    def entry(self) -> Entry:
        d = self.digest
        return Entry(
            self.recipient, self.channel, self.window.start, self.window.end,
            d.content_hash, d.kind, d.about, d.job_ids,
        )  # fmt: skip


@dataclass
class Plan:
    window: Window
    messages: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # who gets nothing, and why
    late: list[str] = field(default_factory=list)  # clusters whose data end before the window


def effective_config(cfg: NotifyConfig, opts: Options) -> NotifyConfig:
    """The configuration with the command line's overrides applied."""
    update = {
        k: v
        for k, v in {
            "since": opts.since,
            "smtp": opts.smtp,
            "smtp_password_env": opts.smtp_password_env,
            "sender": opts.sender,
            "address_template": opts.address_template,
            "dashboard_url": opts.dashboard_url,
        }.items()
        if v is not None
    }
    return cfg.model_copy(update=update)


def webhook_url(cfg: NotifyConfig, opts: Options) -> str | None:
    if opts.webhook:
        return opts.webhook
    if cfg.webhook_env:
        url = os.environ.get(cfg.webhook_env)
        if not url:
            raise GpuwasteError(
                f"[notify] webhook_env names ${cfg.webhook_env}, which is not set or empty."
            )
        return url
    return None


def unreachable_links(p: Plan, cfg: NotifyConfig) -> str | None:
    """When the planned messages link to the dashboard at an address no reader on another
    machine can open: a loopback one (the default `http://127.0.0.1:8501`) or the unspecified
    one (`0.0.0.0`, `::`: what a server listening on every interface shows, not an address to
    connect to); one sentence naming the link and how to set the address; else None."""
    base = cfg.dashboard_url.rstrip("/")
    host = urlsplit(base).hostname or ""
    try:
        ip = ipaddress.ip_address(host)
        kind = "a loopback" if ip.is_loopback else "an unspecified" if ip.is_unspecified else ""
    except ValueError:
        kind = "a loopback" if host == "localhost" else ""
    if not kind or not any(f"{base}/" in m.digest.body for m in p.messages):
        return None
    return (
        f"the notices link to {base}/job?..., {kind} address that their readers cannot "
        "open: set [notify] dashboard_url in gpuwaste.toml (or give --dashboard-url) to the "
        "dashboard's address as users reach it"
    )


def _clusters(settings: Settings, cluster: str | None) -> list[str]:
    known = Warehouse(settings.data_dir).clusters("job_usage")
    if not known:
        raise GpuwasteError(
            f"no job_usage table in {settings.data_dir}: run `gpuwaste analyze` first."
        )
    if cluster is not None and cluster not in known:
        raise GpuwasteError(
            f"no analyzed jobs for cluster '{printable(cluster)}' in {settings.data_dir} "
            f"(clusters: {', '.join(known)})."
        )
    return [cluster] if cluster else known


def _user_messages(
    d: Digest,
    chat: Digest | None,
    window: Window,
    cfg: NotifyConfig,
    book: dict[str, str],
    hook: str | None,
) -> tuple[list[Message], list[str]]:
    """The email (`d`) and the webhook post (`chat`: the same digest, names escaped for chat)
    of a user's digest, and why a user gets no email."""
    address = rcpt.address_of(d.about, book, cfg.address_template)
    who = printable(d.about)
    if rcpt.opted_out(d.about, address, cfg.opt_out):
        return [], [f"user {who} ({d.cluster}): opted out, no message."]
    out, notes = [], []
    by_email = bool(cfg.smtp) or not hook  # a dry run without channels shows the emails
    if address is not None and by_email:
        out.append(Message(d, EMAIL, address, window))
    elif by_email:
        if not (book or cfg.address_template):
            why = "no address_template or address_file"
        else:
            why = "none in the address file, and the template makes no valid address of the name"
        notes.append(f"user {who} ({d.cluster}): no email address ({why}); no email.")
    if hook and chat is not None:
        out.append(Message(chat, f"webhook:{fingerprint(hook)}", f"user:{d.about}", window))
    return out, notes


def _with_chat(
    make: Callable[[WindowFigures, DigestContext], list[Digest]],
    figures: WindowFigures,
    ctx: DigestContext,
    chat: DigestContext | None,
) -> list[tuple[Digest, Digest | None]]:
    """Each digest for mail, with its twin for the webhook when there is one (`chat`: the
    same digest with the names escaped for chat; mail stays plain text)."""
    mail = make(figures, ctx)
    twins: list[Digest | None] = [*make(figures, chat)] if chat else [None] * len(mail)
    return list(zip(mail, twins, strict=True))


def plan(settings: Settings, opts: Options, now: datetime) -> tuple[Plan, NotifyConfig]:
    cfg = effective_config(settings.notify, opts)
    if cfg.address_template:
        rcpt.check_template(cfg.address_template)
    book = rcpt.load_address_book(cfg.address_file) if cfg.address_file else {}
    hook = webhook_url(cfg, opts)
    if hook:
        apprise_url(hook)  # refuses a URL it cannot post to, before anything is sent
    window = resolve_window(cfg.since, opts.until, now)
    result = Plan(window)
    clusters = _clusters(settings, opts.cluster)
    con = connect(settings.data_dir)
    try:
        frames = {
            c: window_figures(con, c, window, cfg.max_jobs_listed, opts.count_looks_busy)
            for c in clusters
        }
    finally:
        con.close()
    if opts.until is None:  # the window ends today: data that stop long before it are late
        fresh = freshness(settings.data_dir).filter(pl.col("cluster").is_in(clusters))
        interval = settings.exporter.update_interval_s
        result.late = late_warnings(fresh, now, interval, NOTIFY_CONSEQUENCE, window.end)
    share = settings.thresholds.min_observed_share
    currency = shown_currency(settings.cost)
    for cluster, figures in frames.items():
        ctx = DigestContext(cfg, cluster, window, share, currency)
        chat = replace(ctx, quote=escape) if hook else None
        for d, c in _with_chat(user_digests, figures, ctx, chat):
            msgs, notes = _user_messages(d, c, window, cfg, book, hook)
            result.messages += msgs
            result.notes += notes
        for d, c in _with_chat(vc_digests, figures, ctx, chat):
            for address in rcpt.vc_owner_addresses(d.about, cfg.vc_owners):
                if cfg.smtp or not hook:
                    result.messages.append(Message(d, EMAIL, address, window))
            if hook and c is not None:
                result.messages.append(
                    Message(c, f"webhook:{fingerprint(hook)}", f"vc:{d.about}", window)
                )
    return result, cfg


def channel_name(m: Message, hook: str | None) -> str:
    return "email" if m.channel == EMAIL else f"webhook {redacted(hook or '')}"


def print_dry_run(p: Plan, hook: str | None, out: IO[str]) -> None:
    """Exactly what would be sent, recipient by recipient."""
    out.write(f"Window: {p.window.label}. Dry run: nothing is sent without --send.\n")
    for late in p.late:
        out.write(f"{late} --send refuses until then.\n")
    for m in p.messages:
        d = m.digest
        out.write(
            f"\n=== {channel_name(m, hook)} to {printable(m.recipient)} "
            f"({d.kind} {printable(d.about)}, cluster {d.cluster}) ===\n"
        )
        out.write(f"Subject: {d.subject}\n\n{d.body}")
    out.write(f"\n{len(p.messages)} message(s) would be sent.\n")
    for note in p.notes:
        out.write(f"{note}\n")


# ----------------------------------------------------------------------------- delivery
@dataclass(frozen=True)
class Senders:
    """How to deliver on each channel (built once per run)."""

    smtp: SmtpServer | None
    password: str | None
    sender: str | None
    hook: str | None


def senders(cfg: NotifyConfig, hook: str | None, messages: list[Message]) -> Senders:
    needs_email = any(m.channel == EMAIL for m in messages)
    server = parse_smtp_url(cfg.smtp, cfg.smtp_user) if cfg.smtp else None
    if needs_email and server is None and hook is None:
        raise UsageError("--send: nothing to send with; give --smtp smtp://HOST:PORT or --webhook.")
    if server is not None and not (cfg.sender and rcpt.valid_address(cfg.sender)):
        raise UsageError("--send with --smtp needs --sender ADDRESS (e.g. gpuwaste@example.org).")
    password = None
    if cfg.smtp_password_env:
        password = os.environ.get(cfg.smtp_password_env)
        if not password:
            raise GpuwasteError(
                f"--smtp-password-env names ${cfg.smtp_password_env}, which is not set or empty."
            )
    return Senders(server, password, cfg.sender, hook)


def deliver_one(m: Message, s: Senders, ledger: Ledger, message_id: str) -> None:
    """Deliver `m`, recording `sending`, `unconfirmed`, then `sent` (or `failed` and raise)."""
    entry = m.entry()
    ledger.record(entry, SENDING, message_id)

    def reached() -> None:
        ledger.record(entry, UNCONFIRMED, message_id)

    try:
        if m.channel == EMAIL:
            assert s.smtp is not None and s.sender is not None
            msg = build_email(s.sender, m.recipient, m.digest.subject, m.digest.body, message_id)
            send_email(s.smtp, s.password, msg, reached)
        else:
            assert s.hook is not None
            reached()
            post(s.hook, f"*{m.digest.subject}*\n\n{m.digest.body}")
    except DeliveryError as exc:
        ledger.record(entry, FAILED, message_id, str(exc))
        raise
    ledger.record(entry, SENT, message_id)


def deliver(
    p: Plan,
    cfg: NotifyConfig,
    s: Senders,
    opts: Options,
    data_dir_ledger: Callable[[str], Ledger],
    out: IO[str],
    err: IO[str],
    now: datetime,
) -> Counter[str]:
    """Send every planned message under the ledger's rules; one line per message."""
    counts: Counter[str] = Counter()
    ledgers: dict[str, Ledger] = {}
    for m in p.messages:
        if m.channel == EMAIL and s.smtp is None:
            counts["no channel"] += 1
            continue
        ledger = ledgers.setdefault(m.digest.cluster, data_dir_ledger(m.digest.cluster))
        old = ledger.find(m.entry())
        name = f"{channel_name(m, s.hook)} to {printable(m.recipient)}"
        status = old["status"] if old else None
        if status == SENT:
            counts["already sent"] += 1
            continue
        if status == UNCONFIRMED and not opts.resend_unconfirmed:
            counts["unconfirmed"] += 1
            err.write(
                f"gpuwaste: {name}: unconfirmed since {old['updated_at'] if old else '?'} (the "
                f"server may have accepted Message-ID {old['message_id'] if old else '?'}); not "
                "sent again (--resend-unconfirmed sends it).\n"
            )
            continue
        if (
            ledger.recent(m.recipient, m.channel, cfg.rate_limit_hours, now)
            >= cfg.rate_limit_messages
        ):
            counts["rate limited"] += 1
            err.write(
                f"gpuwaste: {name}: rate limit ({cfg.rate_limit_messages} per "
                f"{cfg.rate_limit_hours:g} h) reached; not sent now (a later run sends it).\n"
            )
            continue
        domain = (s.sender or "gpuwaste.invalid").rsplit("@", 1)[-1]
        message_id = (old["message_id"] if old and old["message_id"] else None) or make_msgid(
            domain=domain
        )
        try:
            deliver_one(m, s, ledger, message_id)
        except DeliveryError as exc:
            counts["failed"] += 1
            err.write(f"gpuwaste: {name}: failed: {exc}; recorded, retried by the next run.\n")
            continue
        counts["sent"] += 1
        out.write(f"sent {name}: {m.digest.subject}\n")
    return counts


def notify(
    settings: Settings, opts: Options, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr
) -> int:
    """Run `gpuwaste notify`; returns the exit status (1 when a message failed)."""
    now = datetime.now(UTC)
    p, cfg = plan(settings, opts, now)
    hook = webhook_url(cfg, opts)
    unreachable = unreachable_links(p, cfg)
    if not opts.send:
        print_dry_run(p, hook, out)
        if unreachable:
            out.write(f"note: {unreachable}; --send refuses until then.\n")
        return 0
    if unreachable:
        raise GpuwasteError(f"nothing sent: {unreachable}.")
    if p.late:  # a cron job's run on a stalled pipeline fails, and sends no empty digest
        raise GpuwasteError(
            f"nothing sent for the window {p.window.label} (--cluster picks a cluster whose "
            "data are recent, --until a window the data cover): "
            + " ".join(late.removeprefix("warning: ") for late in p.late)
        )
    s = senders(cfg, hook, p.messages)
    with writer_lock(settings.data_dir, "notify"):
        counts = deliver(p, cfg, s, opts, lambda c: Ledger(settings.data_dir, c), out, err, now)
    refresh_catalog(settings.data_dir)
    for note in p.notes:
        err.write(f"{note}\n")
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing to send"
    err.write(f"notify: window {p.window.label}: {summary}.\n")
    return 1 if counts["failed"] else 0


__all__ = ["Message", "Options", "Plan", "notify", "plan", "print_dry_run"]
