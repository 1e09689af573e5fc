"""Loading the ordered phase rules (YAML) into rows the workloads SQL can apply."""

from pathlib import Path

import pyarrow as pa
import yaml

from models.phases import WORK_PHASES

DEFAULT_RULES = Path(__file__).resolve().parent / "data" / "phase_rules.yaml"
DEFAULT_CHARGE_RULES = Path(__file__).resolve().parent / "data" / "charge_phase_rules.yaml"
FIELDS = ("name", "account", "partition", "namespace")  # workload rules
CHARGE_FIELDS = ("sku", "sub_account", "resource", "service")  # charge rules
RULE_CONDITIONS = pa.schema([
    ("rule_order", pa.int32()), ("rule_name", pa.string()), ("phase", pa.string()),
    ("field", pa.string()), ("label_key", pa.string()), ("pattern", pa.string()),
])


class PhaseRuleError(ValueError):
    pass


def load_rules(path: Path | None = None, fields: tuple[str, ...] = FIELDS, default: Path = DEFAULT_RULES) -> pa.Table:
    """One row per condition of each rule; a rule matches when all its conditions do."""
    path = path or default
    document = yaml.safe_load(Path(path).read_text()) or {}
    rows = []
    for order, rule in enumerate(document.get("rules", []), start=1):
        name = rule.get("name") or f"rule {order}"
        if rule.get("phase") not in WORK_PHASES:
            raise PhaseRuleError(f"{path}: rule {name!r} has phase {rule.get('phase')!r}, not one of {', '.join(WORK_PHASES)}")
        match = rule.get("match") or {}
        if not match:
            raise PhaseRuleError(f"{path}: rule {name!r} has no match conditions")
        for field, pattern in match.items():
            if field == "labels" and fields is FIELDS:
                for key, label_pattern in pattern.items():
                    rows.append((order, name, rule["phase"], "label", str(key), "(?i)" + str(label_pattern)))
            elif field in fields:
                rows.append((order, name, rule["phase"], field, None, "(?i)" + str(pattern)))
            else:
                raise PhaseRuleError(f"{path}: rule {name!r} matches on unknown field {field!r}")
    columns = list(zip(*rows)) if rows else [[] for _ in RULE_CONDITIONS]
    return pa.table(columns, schema=RULE_CONDITIONS)


def load_charge_rules(path: Path | None = None) -> pa.Table:
    """Rules for charges no tag or workload explains: regular expressions on SKU, sub-account,
    resource and service."""
    return load_rules(path, CHARGE_FIELDS, DEFAULT_CHARGE_RULES)
