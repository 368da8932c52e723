"""MIG profiles: what a `GPU_I_PROFILE` / Slurm GRES type such as `1g.10gb` means (pure).

A MIG profile `<n>g.<m>gb` is a GPU instance with n compute slices and m GB of memory. A GPU
model splits into 7 compute slices (A100, H100, H200, B200), or 4 (A30). The **slice weight** of
an instance is n / (the model's compute slices): a `1g.10gb` is 1/7 of a GPU, so a GPU split
into instances that use all its compute slices holds the same GPU time as the whole GPU
(docs/analyses.md#mig-instances). Suffixes (`+me`, `+gfx`, `-me`, `+me.all`) name the same
compute slices.

Shared by ingest (to refuse an unknown profile) and analyses (to weigh GPU time), so it lives in
the warehouse layer that both import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROFILE = re.compile(r"^(\d)g\.(\d+)gb(?:[+-](?:me|gfx)(?:\.all)?)?$")

# Profiles of the 4-slice model (A30); every other known profile is of a 7-slice model.
_FOUR_SLICE = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})

# The slice weight in SQL, for the queries that weigh an allocation by its MIG profile (no
# profile, or no `<n>g.` at its start: a whole GPU, 1.0): a DuckDB macro made on each connection
# that runs them (analyses/sqlfiles.define_macros), from the table above.
SLICE_WEIGHT_MACRO = (
    "create or replace temp macro mig_slice_weight(profile) as coalesce("
    r"try_cast(regexp_extract(lower(profile), '^(\d+)g\.', 1) as double) / case when "
    r"regexp_extract(lower(profile), '^(\d+g\.\d+gb)', 1) in ("
    + ", ".join(f"'{p}'" for p in sorted(_FOUR_SLICE))
    + ") then 4.0 else 7.0 end, 1.0)"
)

# Model-name fragment (case-insensitive, as in DCGM's modelName) -> the base profiles it offers.
# From NVIDIA's MIG User Guide, "Supported MIG Profiles". A model not matched here accepts any
# well-formed profile.
MODEL_PROFILES: dict[str, frozenset[str]] = {
    "a100-sxm4-40gb": frozenset({"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}),
    "a100-pcie-40gb": frozenset({"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}),
    "a100-sxm4-80gb": frozenset({"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    "a100 80gb pcie": frozenset({"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    "a30": _FOUR_SLICE,
    "h100 80gb": frozenset({"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}),
    "h100 nvl": frozenset({"1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}),
    "h200": frozenset({"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}),
}

MAX_INSTANCE_ID = 62  # DCGM GPU instance ids are small (0-14 on A100); analyses key by id + 1


@dataclass(frozen=True)
class Profile:
    name: str  # as written, e.g. "1g.10gb+me"
    base: str  # without suffix, e.g. "1g.10gb"
    compute_slices: int
    memory_gb: int

    @property
    def gpu_slices(self) -> int:
        """Compute slices of the whole GPU this profile belongs to."""
        return 4 if self.base in _FOUR_SLICE else 7

    @property
    def weight(self) -> float:
        """The share of one GPU's time an instance of this profile holds."""
        return self.compute_slices / self.gpu_slices

    @property
    def memory_mib(self) -> float:
        return float(self.memory_gb * 1024)


def parse_profile(text: str) -> Profile | None:
    """`1g.10gb` (optionally suffixed) -> Profile; None when it is not a MIG profile."""
    m = _PROFILE.match(text.strip().lower())
    if m is None or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        return None
    base = f"{m.group(1)}g.{m.group(2)}gb"
    return Profile(text.strip(), base, int(m.group(1)), int(m.group(2)))


def profiles_of_model(model: str | None) -> frozenset[str] | None:
    """The base profiles `model` offers, or None when the model is unknown to this table."""
    if not model:
        return None
    lowered = model.lower()
    for fragment, profiles in MODEL_PROFILES.items():
        if fragment in lowered:
            return profiles
    return None


def profile_problem(text: str | None, model: str | None) -> str | None:
    """Why `text` is not a usable MIG profile on `model` (one phrase), or None when it is."""
    if not text:
        return "a MIG instance without its profile"
    profile = parse_profile(text)
    if profile is None:
        return f"'{text}' is not a MIG profile (<n>g.<m>gb)"
    offered = profiles_of_model(model)
    if offered is not None and profile.base not in offered:
        return f"MIG profile '{text}' does not exist on {model}"
    return None


def smallest_profile(model: str | None) -> Profile | None:
    """The smallest MIG profile of `model` (fewest slices, then least memory), if known."""
    offered = profiles_of_model(model)
    if not offered:
        return None
    parsed = [p for p in (parse_profile(n) for n in offered) if p is not None]
    return min(parsed, key=lambda p: (p.compute_slices, p.memory_gb))
