"""`gpuwaste notify`: digests printed (dry run), mailed to a real SMTP server and posted to a real
HTTP server on loopback, exactly once, with real refusals; hand-computed figures.

The warehouse (tests/support/act_warehouse.py): job a of ann (GPU 0, 20 min, one idle slot of
300 s: 0.33 GPU h, 0.08 lost = 25 %), job b of "bob\\x1b[2J" (a never-used GPU: 0.33 GPU h, all
lost) and job c of ann (observed 25 % of its time: low_data, left out).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.act.notify.smtp import parse_smtp_url
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import with_low_data_job
from tests.support.http_receiver import http_receiver
from tests.support.smtp import smtp_server

REPO = Path(__file__).resolve().parent.parent
WINDOW = ["--since", "2026-11-01", "--until", "2026-11-02"]
CONFIG = """
[notify]
min_wasted_gpu_hours = 0.05
min_waste_share = 0.2
address_template = "{user}@example.org"
dashboard_url = "https://gpuwaste.example.org"
"""


@pytest.fixture
def wh(tmp_path: Path) -> Path:
    data_dir = with_low_data_job(tmp_path / "wh")
    (tmp_path / "gpuwaste.toml").write_text(CONFIG)
    return data_dir


def notify(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    config = data_dir.parent / "gpuwaste.toml"
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("GPUWASTE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuwaste", "notify", "--config", str(config),
         "--data-dir", str(data_dir), *WINDOW, *args],
        capture_output=True, text=True, env=full_env, check=False, timeout=120,
    )  # fmt: skip


def ledger(data_dir: Path) -> pl.DataFrame:
    return Warehouse(data_dir).read("notifications", "c", "ledger")


def test_dry_run_prints_each_message_and_writes_nothing(wh: Path) -> None:
    r = notify(wh)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(
        "Window: 2026-11-01 00:00 UTC to 2026-11-02 00:00 UTC. Dry run: nothing is sent"
    )
    assert "=== email to ann@example.org (user ann, cluster c) ===" in out
    assert "Subject: gpuwaste: 0.08 GPU hours lost on c, 2026-11-01 to 2026-11-02" in out
    # ann: job a only (c has too little data): 1200 s held, 300 s in an idle slot
    assert "held 0.33 GPU hours, of which 0.08 (25 %) were lost: 0.08 in idle slots and 0.00" in out
    assert "* job a (no name, VC vision, passed, 1 GPU(s)): 0.08 of 0.33 GPU hours lost" in out
    assert "* job c " not in out
    assert "1 job(s) (0.33 GPU hours in the window) were left out: they have too little data" in out
    assert "https://gpuwaste.example.org/job?job=a&cluster=c" in out
    # bob's name is no address: no email, said in one line, his name escaped
    assert "user bob\\x1b[2J (c): no email address" in out and "\x1b" not in out
    assert "1 message(s) would be sent." in out
    assert not (wh / "parquet" / "notifications").exists()


def _figures(data_dir: Path, job_id: str) -> tuple[float, float]:
    gpus = Warehouse(data_dir).read("job_gpu_usage", "c").filter(pl.col("job_id") == job_id)
    lost = (gpus["idle_slot_s"].sum() + gpus["never_used_s"].sum()) / 3600
    return float(gpus["alloc_s"].sum() / 3600), float(lost)


def test_mail_is_sent_once_with_the_warehouse_figures(wh: Path) -> None:
    with smtp_server() as smtp:
        args = ["--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org"]
        r = notify(wh, *args)
        assert r.returncode == 0, r.stderr
        (msg,) = smtp.to("ann@example.org")
        assert len(smtp.handler.received) == 1
        assert msg["To"] == "ann@example.org" and msg["From"] == "gpuwaste@example.org"
        assert msg["Subject"] == "gpuwaste: 0.08 GPU hours lost on c, 2026-11-01 to 2026-11-02"
        gpu_h, lost = _figures(wh, "a")
        body = msg.get_content()
        assert f"held {gpu_h:.2f} GPU hours, of which {lost:.2f} (25 %) were lost" in body
        assert f"* job a (no name, VC vision, passed, 1 GPU(s)): {lost:.2f} of {gpu_h:.2f}" in body
        assert "sent email to ann@example.org" in r.stdout
        rows = ledger(wh)
        assert rows.height == 1
        row = rows.row(0, named=True)
        assert (row["recipient"], row["channel"], row["status"]) == (
            "ann@example.org", "email", "sent",
        )  # fmt: skip
        assert row["message_id"] == msg["Message-ID"] and row["job_ids"] == "a"
        # the same window again: nothing is sent twice
        again = notify(wh, *args)
        assert again.returncode == 0, again.stderr
        assert len(smtp.handler.received) == 1
        assert "1 already sent" in again.stderr and again.stdout == ""
        assert ledger(wh).height == 1


def test_refused_recipient_and_a_server_down_are_failed_and_retried(
    wh: Path, tmp_path: Path
) -> None:
    with smtp_server() as smtp:
        smtp.handler.refuse.add("ann@example.org")
        args = ["--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org"]
        r = notify(wh, *args)
        assert r.returncode == 1
        assert (
            "gpuwaste: email to ann@example.org: failed: the server refused the recipient "
            "(550 5.1.1 No such user here); recorded, retried by the next run."
        ) in r.stderr.splitlines()
        assert "Traceback" not in r.stderr and smtp.handler.received == []
        assert ledger(wh)["status"].to_list() == ["failed"]
        smtp.handler.refuse.clear()
        retry = notify(wh, *args)
        assert retry.returncode == 0, retry.stderr
        assert len(smtp.to("ann@example.org")) == 1
        assert ledger(wh)["status"].to_list() == ["sent"]
        assert ledger(wh)["attempts"].to_list() == [2]
    other = tmp_path / "down"
    down = notify(other_copy(wh, other), "--send", "--smtp", smtp.url, "--sender", "g@example.org")
    assert down.returncode == 1
    line = next(x for x in down.stderr.splitlines() if "ann@example.org" in x)
    assert line.startswith("gpuwaste: email to ann@example.org: failed: cannot talk to the SMTP ")
    assert f"127.0.0.1:{smtp.port} (connection refused)" in line
    assert ledger(other)["status"].to_list() == ["failed"]


def other_copy(src: Path, dest: Path) -> Path:
    """A copy of the warehouse without its ledger (and its config next to it)."""
    import shutil

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("notifications"))
    (dest.parent / "gpuwaste.toml").write_text((src.parent / "gpuwaste.toml").read_text())
    return dest


def test_starttls_and_auth_with_the_password_from_the_environment(wh: Path, tmp_path: Path) -> None:
    secret = "s3cret-Pa55-word"
    with smtp_server(tls_dir=tmp_path, credentials=("mailer", secret)) as smtp:
        assert smtp.cert is not None
        env = {"SSL_CERT_FILE": str(smtp.cert), "GW_SMTP_PASSWORD": secret}
        url = f"smtp://mailer@127.0.0.1:{smtp.port}"
        args = ["--send", "--smtp", url, "--sender", "gpuwaste@example.org",
                "--smtp-password-env", "GW_SMTP_PASSWORD"]  # fmt: skip
        r = notify(wh, *args, env=env)
        assert r.returncode == 0, r.stderr
        assert smtp.handler.logins == [("mailer", secret)]
        assert len(smtp.to("ann@example.org")) == 1
        wrong = notify(other_copy(wh, tmp_path / "w"), *args, env={**env, "GW_SMTP_PASSWORD": "no"})
        assert wrong.returncode == 1
        assert f"ann@example.org: failed: the server 127.0.0.1:{smtp.port} refused the login" in (
            wrong.stderr
        )
        for text in (r.stdout, r.stderr, wrong.stdout, wrong.stderr):
            assert secret not in text
        for f in (wh / "parquet").rglob("*.parquet"):
            assert secret.encode() not in f.read_bytes()
        # a password in the URL is refused, not used
        bad = notify(
            wh, "--send", "--smtp", f"smtp://u:{secret}@127.0.0.1:1", "--sender", "g@e.org"
        )
        assert bad.returncode == 1 and secret not in bad.stderr
        assert "holds a password" in bad.stderr


def test_the_login_user_is_the_configs_smtp_user(wh: Path, tmp_path: Path) -> None:
    """`[notify] smtp_user` is the login when the URL names no user (a login that is an address
    needs no %40 then); a URL naming another user is refused in one sentence, before any login."""
    secret = "An0ther-s3cret"
    (wh.parent / "gpuwaste.toml").write_text(CONFIG + 'smtp_user = "mailer@example.org"\n')
    with smtp_server(tls_dir=tmp_path, credentials=("mailer@example.org", secret)) as smtp:
        assert smtp.cert is not None
        env = {"SSL_CERT_FILE": str(smtp.cert), "GW_SMTP_PASSWORD": secret}
        args = ["--send", "--sender", "gpuwaste@example.org",
                "--smtp-password-env", "GW_SMTP_PASSWORD"]  # fmt: skip
        r = notify(wh, *args, "--smtp", smtp.url, env=env)
        assert r.returncode == 0, r.stderr
        assert smtp.handler.logins == [("mailer@example.org", secret)]
        assert len(smtp.to("ann@example.org")) == 1
        ops = f"smtp://ops@127.0.0.1:{smtp.port}"
        both = notify(other_copy(wh, tmp_path / "o"), *args, "--smtp", ops, env=env)
        assert both.returncode == 1 and "Traceback" not in both.stderr
        assert (
            "[notify] smtp_user 'mailer@example.org' and the user 'ops' of the SMTP URL differ; "
            "give the login user in one of them."
        ) in both.stderr
        assert smtp.handler.logins == [("mailer@example.org", secret)]


def test_the_urls_user_is_decoded_and_agrees_with_smtp_user() -> None:
    """A login that is an address is `%40`-encoded in the URL; the same user in both places is
    one user."""
    url = "smtp://mailer%40example.org@127.0.0.1:587"
    assert parse_smtp_url(url).user == "mailer@example.org"
    assert parse_smtp_url(url, "mailer@example.org").user == "mailer@example.org"
    assert parse_smtp_url("smtp://127.0.0.1", "ops").user == "ops"
    with pytest.raises(GpuwasteError, match=r"smtp_user 'ops' and the user 'mailer@example\.org'"):
        parse_smtp_url(url, "ops")


def test_links_to_a_loopback_dashboard_are_refused_not_sent(wh: Path) -> None:
    """Without `[notify] dashboard_url`, the links point at http://127.0.0.1:8501, which a
    reader on another machine cannot open: --send refuses (the real SMTP server and HTTP
    receiver get nothing, the ledger stays empty), the dry run prints and says so, and
    --dashboard-url (or the key) makes the mail go out with that link."""
    config = wh.parent / "gpuwaste.toml"
    config.write_text(CONFIG.replace('dashboard_url = "https://gpuwaste.example.org"\n', ""))
    dry = notify(wh)
    assert dry.returncode == 0, dry.stderr
    assert "http://127.0.0.1:8501/job?job=a&cluster=c" in dry.stdout
    said = (
        "the notices link to http://127.0.0.1:8501/job?..., a loopback address that their "
        "readers cannot open: set [notify] dashboard_url in gpuwaste.toml (or give "
        "--dashboard-url) to the dashboard's address as users reach it"
    )
    assert dry.stdout.endswith(f"note: {said}; --send refuses until then.\n")
    with smtp_server() as smtp, http_receiver() as rx:
        mail = ["--smtp", smtp.url, "--sender", "gpuwaste@example.org"]
        for channel in (mail, ["--webhook", rx.url("/hooks/x")]):
            refused = notify(wh, "--send", *channel)
            assert refused.returncode == 1
            assert refused.stderr == f"gpuwaste: nothing sent: {said}.\n"
        assert smtp.handler.received == [] and rx.posts == []
        assert not (wh / "parquet" / "notifications").exists()
        for url in ("http://localhost:8501/", "http://[::1]:8501", "http://127.0.1.1"):
            assert notify(wh, "--send", *mail, "--dashboard-url", url).returncode == 1
        # what `dashboard --host 0.0.0.0` listens on is no address to open either
        for url in ("http://0.0.0.0:8501", "http://[::]:8501/"):
            unspecified = notify(wh, "--send", *mail, "--dashboard-url", url)
            assert unspecified.returncode == 1
            assert unspecified.stderr == (
                f"gpuwaste: nothing sent: the notices link to {url.rstrip('/')}/job?..., an "
                "unspecified address that their readers cannot open: set [notify] dashboard_url "
                "in gpuwaste.toml (or give --dashboard-url) to the dashboard's address as users "
                "reach it.\n"
            )
        sent = notify(wh, "--send", *mail, "--dashboard-url", "https://gw.example.org/")
        assert sent.returncode == 0, sent.stderr
        (msg,) = smtp.to("ann@example.org")
        assert "https://gw.example.org/job?job=a&cluster=c" in msg.get_content()
        assert "127.0.0.1:8501" not in msg.get_content()


def test_webhook_posts_slack_json_and_reports_http_500(wh: Path) -> None:
    with http_receiver() as rx:
        token = "/hooks/T0K3N-secret"
        r = notify(wh, "--send", "--webhook", rx.url(token))
        assert r.returncode == 0, r.stderr
        texts = {json_text(body) for path, body in rx.posts}
        assert all(path == token for path, _ in rx.posts) and len(rx.posts) == 2
        (ann,) = [t for t in texts if "Hello ann," in t]
        assert ann.startswith("*gpuwaste: 0.08 GPU hours lost on c")
        assert "0.08 of 0.33 GPU hours lost" in ann
        assert sorted(ledger(wh)["recipient"].to_list()) == ["user:ann", "user:bob\x1b[2J"]
        rx.fail_paths.add("/fail/T0K3N-other")
        fail = notify(wh, "--send", "--webhook", rx.url("/fail/T0K3N-other"))
        assert fail.returncode == 1
        lines = [x for x in fail.stderr.splitlines() if x.startswith("gpuwaste:")]
        assert len(lines) == 2
        assert f"webhook http://127.0.0.1:{rx.port}/... (#" in lines[0]
        assert "refused the post (HTTP 500); recorded, retried by the next run." in lines[0]
        assert "T0K3N" not in fail.stderr + r.stderr + r.stdout
        assert not any("T0K3N" in str(v) for v in ledger(wh).to_dicts())
        assert sorted(ledger(wh)["status"].to_list()) == ["failed", "failed", "sent", "sent"]


def json_text(body: Any) -> str:
    assert set(body) == {"text"}
    return str(body["text"])


def test_rate_limit_per_recipient(wh: Path) -> None:
    (wh.parent / "gpuwaste.toml").write_text(CONFIG + "rate_limit_messages = 1\n")
    with smtp_server() as smtp:
        args = ["--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org"]
        assert notify(wh, *args).returncode == 0
        # another window (other content) for the same recipient within 24 h: held back
        r = notify(wh, *args[:0], "--send", "--smtp", smtp.url, "--sender", "g@example.org",
                   "--since", "2026-10-31")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "email to ann@example.org: rate limit (1 per 24 h) reached" in r.stderr
        assert len(smtp.handler.received) == 1


def test_vc_owners_get_the_vc_digest(wh: Path) -> None:
    (wh.parent / "gpuwaste.toml").write_text(
        CONFIG + 'vc_owners = { vision = ["lead@example.org"], speech = ["sp@example.org"] }\n'
    )
    with smtp_server() as smtp:
        r = notify(wh, "--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org")
        assert r.returncode == 0, r.stderr
        (vision,) = smtp.to("lead@example.org")
        body = vision.get_content()
        assert vision["Subject"].startswith("gpuwaste: VC vision lost 0.08 GPU hours on c")
        assert "* ann: 0.08 of 0.33" in body and "1 job(s) (0.33 GPU hours" in body
        (speech,) = smtp.to("sp@example.org")
        assert "* bob\\x1b[2J: 0.33 of 0.33" in speech.get_content()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--smtp", "http://x:25", "--send"], "is not smtp://HOST:PORT"),
        (["--send"], "nothing to send with"),
        (["--send", "--smtp", "smtp://127.0.0.1:1"], "needs --sender"),
        (["--address-template", "{name}@x.org"], "must contain {user} once"),
        (["--since", "2026-11-03"], "must be before --until"),
        (["--since", "soon"], "is not a period"),
        (["--cluster", "nosuch"], "no analyzed jobs for cluster 'nosuch'"),
        (["--webhook", "ftp://x/y"], "--webhook must be an http:// or https:// URL."),
    ],
)
def test_mistakes_are_one_sentence(wh: Path, args: list[str], says: str) -> None:
    r = notify(wh, *args)
    # a wrong command line exits 2 (click's usage error); a value the config could give too, or
    # a cluster this warehouse does not have, 1
    usage = args[0] in ("--send", "--since", "--webhook") and "smtp://HOST" not in says
    assert r.returncode == (2 if usage else 1), r.stderr
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert not (wh / "parquet" / "notifications").exists()


def test_address_file_and_opt_out(wh: Path) -> None:
    book = wh.parent / "addresses.csv"
    book.write_text("user,address\nann,ann.smith@lab.example.org\n")
    (wh.parent / "gpuwaste.toml").write_text(
        CONFIG + f'address_file = "{book}"\nopt_out = ["bob\\u001b[2J"]\n'
    )
    out = notify(wh).stdout
    assert "=== email to ann.smith@lab.example.org (user ann, cluster c) ===" in out
    assert "user bob\\x1b[2J (c): opted out, no message." in out
    (wh.parent / "gpuwaste.toml").write_text(CONFIG + 'opt_out = ["ann@example.org"]\n')
    out = notify(wh).stdout
    assert "user ann (c): opted out, no message." in out
    assert "0 message(s) would be sent." in out
    book.write_text("user,address\nann,not an address\n")
    (wh.parent / "gpuwaste.toml").write_text(CONFIG + f'address_file = "{book}"\n')
    bad = notify(wh)
    assert bad.returncode == 1
    assert f"{book}, line 2: expected columns user,address" in bad.stderr


def test_webhook_url_from_the_environment(wh: Path) -> None:
    (wh.parent / "gpuwaste.toml").write_text(CONFIG + 'webhook_env = "GW_HOOK"\n')
    with http_receiver() as rx:
        r = notify(wh, "--send", env={"GW_HOOK": rx.url("/hooks/from-env")})
        assert r.returncode == 0, r.stderr
        assert {path for path, _ in rx.posts} == {"/hooks/from-env"} and len(rx.posts) == 2
        assert "from-env" not in r.stdout + r.stderr
    unset = notify(wh, "--send")
    assert unset.returncode == 1 and "webhook_env names $GW_HOOK, which is not set" in unset.stderr
