"""Configuration: defaults, and one-sentence errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwaste.config import ConfigError, Thresholds, load_settings, parse_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpuwaste.toml"
    p.write_text(text)
    return p


def test_defaults_are_the_studies_choices() -> None:
    t = Thresholds()
    assert t.idle_slot_min_s == 60
    assert t.phase_tolerance_mib == 512
    assert t.stable_phase_lengths_s == [60, 120, 240, 480, 960]
    assert t.stable_phase_idle_gib == [1, 2, 4, 8]
    assert t.fluctuation_window_s == 120 and t.fluctuation_range_pct == 90
    assert t.fluctuation_job_share == 0.75
    assert t.missing_gap_intervals == 3
    assert t.debug_max_duration_h == 8
    assert t.unreleased_min_s == 600 and t.slow_start_min_s == 600


def test_full_file_loads(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
data_dir = "wh"
[thresholds]
idle_slot_min_s = 120
[[clusters]]
name = "a100"
timezone = "Europe/Paris"
[clusters.prometheus]
url = "https://prom.example:9090/"
token_env = "PROM_TOKEN"
label_filter = '{cluster="a"}'
[clusters.slurm]
file = "sacct.txt"
vc_from = "partition"
""",
    )
    s = load_settings(p)
    assert s.data_dir == tmp_path / "wh"  # relative to the file
    assert s.thresholds.idle_slot_min_s == 120
    c = s.cluster("a100")
    assert c.prometheus is not None and c.prometheus.url == "https://prom.example:9090"
    assert c.slurm is not None and c.slurm.vc_from == "partition"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[thresholds]\nidle_slot_min_s = -5\n", "thresholds.idle_slot_min_s"),
        ("[thresholds]\nidle_slot_minutes = 5\n", "unknown key 'thresholds.idle_slot_minutes'"),
        ("[thresholds]\nfluctuation_job_share = 1.5\n", "thresholds.fluctuation_job_share"),
        ("[[clusters]]\nname = 'a'\ntimezone = 'Mars/Olympus'\n", "clusters.0.timezone"),
        (
            "[[clusters]]\nname = 'a'\n[clusters.prometheus]\nurl = 'prom:9090'\n",
            "clusters.0.prometheus.url",
        ),
        ("[[clusters]]\nname = 'a b'\n", "clusters.0.name"),
        ("[[clusters]]\ntimezone = 'UTC'\n", "missing required key 'clusters.0.name'"),
        ("[[clusters]]\nname='a'\n[[clusters]]\nname='a'\n", "cluster name 'a' appears twice"),
        ("colour = 'blue'\n", "unknown key 'colour'"),
        (
            "[[clusters]]\nname = 'a'\n[clusters.slurm]\nvc_from = 'qos'\n",
            "key 'clusters.0.slurm.vc_from': input should be 'partition' or 'account', got 'qos'",
        ),
        (
            "[[clusters]]\nname = 'a'\n[clusters.philly]\ndir = 'p'\ntimezone = 'Mars/Olympus'\n",
            "key 'clusters.0.philly.timezone': expected an IANA time zone",
        ),
        (
            "[[clusters]]\nname = '../etc'\n",
            "key 'clusters.0.name': expected letters, digits, '_', '.' or '-', starting with",
        ),
    ],
)
def test_bad_key_or_value_names_key_and_file(tmp_path: Path, text: str, expected: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(p)
    msg = str(err.value)
    assert expected in msg
    assert str(p) in msg
    assert "\n" not in msg and msg.endswith(".")


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    p = write(tmp_path, "data_dir = [unclosed\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_env_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, "data_dir = '/x'\n")
    monkeypatch.setenv("GPUWASTE_CONFIG", str(p))
    assert load_settings().data_dir == Path("/x")
    assert load_settings(data_dir=tmp_path / "d").data_dir == tmp_path / "d"


def test_unknown_cluster_is_one_sentence() -> None:
    s = parse_settings({"clusters": [{"name": "a"}]}, "g.toml")
    with pytest.raises(ConfigError, match=r"no cluster named 'b' in g.toml \(configured: a\)"):
        s.cluster("b")
