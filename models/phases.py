"""The ML phases every unit of spend is attributed to."""

from __future__ import annotations

import re

WORK_PHASES = ("pretraining", "finetuning", "inference")
IDLE = "idle"  # paid GPU time on which nothing ran
UNATTRIBUTED = "unattributed"  # no evidence either way
ALL_PHASES = (*WORK_PHASES, IDLE, UNATTRIBUTED)

# Industry rules of thumb from the design's phase table: (utilization %, share of spend %).
TYPICAL_RANGES = {
    "pretraining": {"util_pct": (75, 85), "share_pct": (50, 60)},
    "finetuning": {"util_pct": (60, 70), "share_pct": (10, 15)},
    "inference": {"util_pct": (15, 25), "share_pct": (25, 35)},
}

PHASE_ALIASES = {"pretrain": "pretraining", "training": "pretraining", "finetune": "finetuning", "serving": "inference"}


def normalise_phase(value: str | None) -> str | None:
    """'Pre-Training', 'fine_tuning', 'inference' → canonical names; None if not a work phase."""
    if value is None:
        return None
    key = re.sub(r"[\s_\-]", "", value.strip().lower())
    key = PHASE_ALIASES.get(key, key)
    return key if key in WORK_PHASES else None
