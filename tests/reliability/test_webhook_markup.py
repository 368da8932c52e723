"""Names typed by users (`sbatch -J`, user and VC names) reach a chat webhook as text, never as
Slack/Mattermost markup, and reach mail unchanged as text/plain.

A real `gpuwaste notify --send` process posts to a real HTTP receiver on loopback and mails a
real SMTP server, for a warehouse whose job a (of ann) is named `<!channel> urgent
<https://evil.example/reset>` and whose user b is `<!here> bob` with an escape sequence: Slack
reads `<!channel>` as an @channel ping and `<url|text>` as a link, Mattermost likewise.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import with_low_data_job
from tests.support.http_receiver import http_receiver
from tests.support.smtp import smtp_server
from tests.test_notify import CONFIG, json_text, notify

JOB_NAME = (
    "<!channel> urgent <https://evil.example/reset> @channel [sign in](https://evil.example/)"
)
USER = "<!here> bob\x1b[2J"
OWNER = "owner@example.org"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """tests/test_notify.py's warehouse, with job a named JOB_NAME and user b renamed USER,
    analyzed again; the VC of job a (vision) has an owner, so a VC digest lists the job too."""
    data_dir = with_low_data_job(tmp_path / "wh")
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs", "c").drop("cluster", strict=False)
    jobs = jobs.with_columns(
        name=pl.when(pl.col("job_id") == "a").then(pl.lit(JOB_NAME)).otherwise(pl.col("name")),
        user=pl.when(pl.col("job_id") == "b").then(pl.lit(USER)).otherwise(pl.col("user")),
    )
    wh.upsert("jobs", "c", "t", jobs)
    analyze(Settings(data_dir=data_dir), quiet=True)
    (tmp_path / "gpuwaste.toml").write_text(CONFIG + f'vc_owners = {{ vision = ["{OWNER}"] }}\n')
    return data_dir


def test_webhook_escapes_names_and_mail_keeps_them_as_plain_text(hostile: Path) -> None:
    with http_receiver() as rx, smtp_server() as smtp:
        r = notify(hostile, "--send", "--webhook", rx.url("/hooks/x"), "--smtp", smtp.url,
                   "--sender", "gpuwaste@example.org")  # fmt: skip
        assert r.returncode == 0, r.stderr
        texts = [json_text(body) for _, body in rx.posts]
        mails = {address: smtp.to(address) for address in ("ann@example.org", OWNER)}

    # user ann, user b, VC vision: three posts; the job's name in ann's and in the VC's
    assert len(texts) == 3, texts
    posted = "\n".join(texts)
    for raw in ("<!channel>", "<!here>", "<https://evil", "<", ">", "@channel", "]("):
        assert raw not in posted, raw
    shown = (
        "&lt;!channel&gt; urgent &lt;https://evil.example/reset&gt; @\u2060channel "
        "[sign in]\u2060(https://evil.example/)"
    )
    assert sum(shown in t for t in texts) == 2
    assert "Hello &lt;!here&gt; bob\\x1b[2J," in posted and "\x1b" not in posted
    # gpuwaste's own formatting and links are left as they are: the subject in bold, the link
    assert all(t.startswith("*gpuwaste: ") for t in texts)
    assert "https://gpuwaste.example.org/job?job=a&cluster=c" in posted

    # mail: text/plain, the name as typed (nothing to escape there)
    for address, got in mails.items():
        (mail,) = got
        assert mail.get_content_type() == "text/plain", address
        assert not mail.is_multipart()
        body = mail.get_content()
        assert JOB_NAME in body and "&lt;" not in body, address
