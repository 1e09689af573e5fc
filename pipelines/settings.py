"""Run settings: where the landing folder and warehouse are, and how to read and report.

Defaults suit the bundled demo; `finops run` and environment variables override them.
"""

import json
import os
import re
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from models.currencies import is_iso4217
from models.phases import TYPICAL_RANGES
from models.telemetry import UTIL_KINDS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO_ROOT / ".finops" / "demo"

BUNDLED_PRICE_CATALOG = REPO_ROOT / "models" / "data" / "price_catalog.csv"
HIDDEN_COSTS_SQL = REPO_ROOT / "sql" / "findings" / "hidden_costs.sql"


ALL_PERIODS = "*"  # a partitioned model's period list meaning every period


@cache
def finding_kinds() -> tuple[str, ...]:
    """The kinds findings.hidden_costs holds: the per-kind tables its SQL unions (each named after its kind),
    so a kind added there is known to the command line without another list to keep in step."""
    return tuple(re.findall(r"SELECT \* FROM findings\.(\w+)", HIDDEN_COSTS_SQL.read_text()))


def parse_iso_date(value: str) -> date:
    """A calendar date written YYYY-MM-DD, and only that (no 12/10/2026, no 20261210, no week dates)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        raise ValueError(f"{value!r} is not a date written YYYY-MM-DD")
    try:
        return date.fromisoformat(value.strip())
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a real date ({exc})") from None


def check_timezone(value: str) -> str:
    """An IANA time zone name zoneinfo knows (Asia/Shanghai, UTC), returned as given."""
    from zoneinfo import ZoneInfo, available_timezones

    try:
        ZoneInfo(value)
        # The host's own link (localtime) is no zone name: telemetry read elsewhere would shift.
        known = value in available_timezones() and value not in ("localtime", "posixrules")
    except (KeyError, ValueError, OSError):  # unknown names (ZoneInfoNotFoundError), paths, empty names
        known = False
    if not known:
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Paris, Asia/Shanghai)")
    return value


def check_currency(value: str) -> str:
    """An ISO 4217 currency code (models/currencies.py), upper-cased."""
    if not is_iso4217(value.strip().upper()):
        raise ValueError(f"{value!r} is not an ISO 4217 currency code (e.g. USD, EUR, CNY)")
    return value.strip().upper()


class FinopsSettings(ConfigurableResource):
    landing_dir: str = Field(description="Folder of exports and telemetry to ingest (read recursively).")
    timezone: str = Field(default="UTC", description="Time zone of sources that write local times (nvidia-smi).")
    reporting_currency: str = Field(default="USD", description="Currency every amount is also reported in.")
    phase_tag_keys: list[str] = Field(default=["phase", "ml_phase", "ml-phase"], description="Tag keys naming a charge's phase.")
    fx_rates_file: str | None = Field(default=None, description="Optional CSV of your own FX rates (a treasury's table); wins over the ECB reference rates for the pairs it covers.")
    max_rate_age_days: int = Field(default=45, description="An FX rate older than this counts as missing.")
    phase_rules_file: str | None = Field(default=None, description="YAML phase rules replacing the bundled ones.")
    charge_rules_file: str | None = Field(default=None, description="YAML charge rules replacing the bundled ones.")
    tco_params_file: str | None = Field(default=None, description="YAML purchasing parameters overriding the bundled ones.")
    price_catalog_file: str | None = Field(default=None, description="CSV of your own prices; wins over the bundled catalog.")
    host_names_files: list[str] = Field(default=[], description="Your resources' host names (CSVs of host,resource_id, or the JSON "
                                        "of `aws ec2 describe-instances` or `kubectl get nodes -o json`): telemetry naming an "
                                        "instance by its hostname meets its charges.")
    # Hidden-cost thresholds (documented in the README).
    fast_disk_gbps: float = Field(default=3.0, description="Throughput of the fast disk checkpoints could go to (GB/s).")
    signature_write_mb_s: float = Field(default=100.0, description="Disk write rate that, with idle GPUs, marks a checkpoint.")
    idle_busy_threshold: float = Field(default=0.05, description="A GPU-minute busier than this is not idle.")
    idle_min_minutes: int = Field(default=360, description="Shortest idle run reported as unused_gpu (minutes).")
    # Telemetry time-weighting (sql/core/gpu_minutes.sql; documented in the README).
    telemetry_gap_factor: float = Field(default=3.0, description="A gap longer than this many times a series' median "
                                        "sampling interval is missing telemetry, not a longer sample.")
    # Under a day: a day's GPU-minutes read only the days beside it (sql/core/gpu_minutes.sql).
    telemetry_max_gap_s: int = Field(default=900, gt=0, le=86400, description="Longest gap (seconds) one sample may stand "
                                     "for, whatever the series' interval; longer gaps are missing.")
    # The money thresholds below are stated in thresholds_currency and converted into the reporting
    # currency, so "high" means the same leak whether the report is in USD or KRW.
    thresholds_currency: str = Field(default="USD", description="Currency severity_high, severity_medium, min_finding_cost "
                                     "and anomaly_min_cost_change are stated in; converted into the reporting currency.")
    severity_high: float = Field(default=500.0, description="Avoidable cost (thresholds_currency) from which a finding is high.")
    severity_medium: float = Field(default=50.0, description="Avoidable cost (thresholds_currency) from which a finding is medium.")
    inference_target_util: float = Field(default=0.6, description="Utilization autoscaled inference should run at.")
    inference_valley_busy: float = Field(default=0.10, description="Busy GPUs under which an inference hour is a valley.")
    inference_min_ratio: float = Field(default=4.0, description="Peak/valley ratio from which inference counts as over-provisioned.")
    min_finding_cost: float = Field(default=0.10, description="Smallest wasted cost (thresholds_currency) listed in findings.hidden_costs.")

    # Anomaly detection (models/anomalies.py; documented in the README).
    planned_runs_file: str | None = Field(default=None, description="YAML calendar of planned runs whose spend is expected.")
    anomaly_min_z: float = Field(default=3.5, description="Robust z-score (MAD-scaled) from which a day can be anomalous.")
    anomaly_min_cost_change: float = Field(default=10.0, description="Smallest cost change alerted (thresholds_currency).")
    anomaly_min_gpu_hours_change: float = Field(default=8.0, description="Smallest GPU-hours change alerted.")
    anomaly_min_egress_gb_change: float = Field(default=50.0, description="Smallest egress change alerted (GB).")
    anomaly_min_day_share: float = Field(default=0.005, description="Smallest change alerted, as a share of the day's total.")
    anomaly_min_relative: float = Field(default=0.20, description="Smallest change alerted, relative to the expected value.")
    anomaly_lag_days: int = Field(default=2, description="Days between the run and the day it scores (bills arrive late).")
    anomaly_rescore_days: int = Field(default=30, description="Days re-scored each run, so restated bills are judged again.")
    # The daily report and its delivery.
    reports_dir: str | None = Field(default=None, description="Folder for <date>/report.*; default: reports/ beside the warehouse.")
    webhook_url: str | None = Field(default=None, description="Slack-compatible incoming webhook the report summary is posted to.")
    webhook_timeout_s: float = Field(default=10.0, description="Timeout of one webhook attempt (seconds).")
    webhook_retries: int = Field(default=3, description="Retries of a failed webhook delivery (connection errors, 429, 5xx).")

    def default_run_date(self) -> date:
        """The date of a run given none: the demo scenario's own "today" over a demo's landing
        folder (its dated anomaly state must not be rescored as of the real today), else today, UTC."""
        return demo_report_date(self.landing_dir) or datetime.now(UTC).date()

    def anomaly_rules(self):
        from models.anomalies import AnomalyRules

        return AnomalyRules(min_z=self.anomaly_min_z, min_day_share=self.anomaly_min_day_share,
                            min_relative=self.anomaly_min_relative,
                            floors={"cost": self.anomaly_min_cost_change, "gpu_hours": self.anomaly_min_gpu_hours_change,
                                    "egress_gb": self.anomaly_min_egress_gb_change},
                            cost_floor_currency=check_currency(self.thresholds_currency))

    def sql_params(self) -> dict[str, object]:
        return {
            "reporting_currency": self.reporting_currency.upper(),
            # The periods a partitioned model builds (pipelines/warehouse/periods.py); ['*']: all of them
            # (a list either way: Spark cannot bind an untyped NULL list).
            "billing_months": [ALL_PERIODS],
            "sample_days": [ALL_PERIODS],
            "minute_days": [ALL_PERIODS],
            "span_days": [ALL_PERIODS],
            "busy_days": [ALL_PERIODS],
            "host_hour_days": [ALL_PERIODS],
            "storage_write_days": [ALL_PERIODS],
            "phase_tag_keys": list(self.phase_tag_keys),
            "max_rate_age_days": self.max_rate_age_days,
            "util_kinds": list(UTIL_KINDS),
            "fast_disk_gbps": self.fast_disk_gbps,
            "signature_write_mb_s": self.signature_write_mb_s,
            "idle_busy_threshold": self.idle_busy_threshold,
            "idle_min_minutes": self.idle_min_minutes,
            "telemetry_gap_factor": self.telemetry_gap_factor,
            "telemetry_max_gap_s": self.telemetry_max_gap_s,
            "thresholds_currency": check_currency(self.thresholds_currency),
            "severity_high": self.severity_high,
            "severity_medium": self.severity_medium,
            "min_finding_cost": self.min_finding_cost,
            "inference_target_util": self.inference_target_util,
            "inference_valley_busy": self.inference_valley_busy,
            "inference_min_ratio": self.inference_min_ratio,
            "typical_ranges": [
                {"phase": phase, "util_low": r["util_pct"][0], "util_high": r["util_pct"][1],
                 "share_low": r["share_pct"][0], "share_high": r["share_pct"][1]}
                for phase, r in TYPICAL_RANGES.items()
            ],
        }


TELEMETRY_ENV = (("telemetry_gap_factor", "FINOPS_TELEMETRY_GAP_FACTOR", float),
                 ("telemetry_max_gap_s", "FINOPS_TELEMETRY_MAX_GAP_S", int))


def settings_from_env() -> tuple[FinopsSettings, str]:
    """Settings and warehouse path from FINOPS_* variables, defaulting to the demo's folders."""
    landing = os.environ.get("FINOPS_LANDING", str(DEMO_DIR / "landing"))
    warehouse = os.environ.get("FINOPS_WAREHOUSE", str(DEMO_DIR / "warehouse.duckdb"))
    settings = FinopsSettings(
        landing_dir=str(Path(landing).resolve()),
        timezone=os.environ.get("FINOPS_TIMEZONE", "UTC"),
        reporting_currency=os.environ.get("FINOPS_REPORTING_CURRENCY", "USD"),
        fx_rates_file=os.environ.get("FINOPS_FX_RATES") or None,
        phase_rules_file=os.environ.get("FINOPS_PHASE_RULES") or None,
        tco_params_file=os.environ.get("FINOPS_TCO_PARAMS") or None,
        charge_rules_file=os.environ.get("FINOPS_CHARGE_RULES") or None,
        price_catalog_file=os.environ.get("FINOPS_PRICE_CATALOG") or None,
        host_names_files=[p for p in os.environ.get("FINOPS_HOST_NAMES", "").split(os.pathsep) if p],
        planned_runs_file=os.environ.get("FINOPS_PLANNED_RUNS") or None,
        reports_dir=os.environ.get("FINOPS_REPORTS") or None,
        webhook_url=os.environ.get("FINOPS_WEBHOOK_URL") or None,
        **{name: cast(os.environ[var]) for name, var, cast in TELEMETRY_ENV if os.environ.get(var)},
    )
    return settings, str(Path(warehouse).resolve())


def demo_report_date(landing_dir: str | Path) -> date | None:
    """The report date `finops demo` wrote in truths.json beside its landing folder; None when the
    landing folder is not a demo's."""
    landing = Path(landing_dir)
    if landing.name != "landing":
        return None
    try:
        return date.fromisoformat(json.loads((landing.parent / "truths.json").read_text())["report_date"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_demo_deployment(settings: FinopsSettings, warehouse: str | Path) -> bool:
    """The code location serves the demo: the default demo warehouse (before or after `make demo`
    wrote it), or any landing folder a demo wrote."""
    return (Path(warehouse).resolve() == (DEMO_DIR / "warehouse.duckdb").resolve()
            or demo_report_date(settings.landing_dir) is not None)
