"""The project's own FOCUS 1.2 check of `core.cost_lines`: the root-column and dataset rules of
focus-validator 2.2.1 that the data can break, as SQL over the warehouse, so CI needs neither the
validator nor its Python 3.12 venv (`make focus-validate` runs the validator itself).

Every rule carries the validator's id; `check(conn)` returns the rules that fail, with the number
of violating rows and a few sample values.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from models.focus import (
    CHARGE_CATEGORIES,
    CHARGE_CLASSES,
    CHARGE_FREQUENCIES,
    COMMITMENT_DISCOUNT_CATEGORIES,
    COMMITMENT_DISCOUNT_STATUSES,
    FOCUS_12_MANDATORY_COLUMNS,
    FOCUS_12_NOT_NULL_COLUMNS,
    PRICING_CATEGORIES,
    SERVICE_CATEGORIES,
    SERVICE_SUBCATEGORIES,
    UNIT_FORMAT_REGEX,
)
from pipelines.warehouse.connection import connect

TABLE = "core.cost_lines"


@dataclass(frozen=True)
class Rule:
    id: str  # the focus-validator rule id it mirrors
    text: str
    # SQL giving one row per violation (first column: a sample value), over {t}; None for a
    # presence rule, checked against the table's columns, and for a line rule.
    sql: str | None = None
    column: str | None = None
    # A line rule: the condition a violating line meets, over the table's columns, and what such a
    # line shows as its sample. Every line rule is counted in one pass over the table.
    where: str | None = None
    sample: str = "NULL"

    @property
    def query(self) -> str | None:
        """One row per violation, over {t} (None for a presence or type rule)."""
        return f"SELECT {self.sample} FROM {{t}} WHERE {self.where}" if self.where else self.sql


def _values(values) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _dataset_ids() -> dict[str, str]:
    # CostAndUsage-D-NNN-M ids of the presence rules, in the validator's numbering.
    return {
        "BillingAccountName": "005", "BilledCost": "006", "ChargeCategory": "008", "BillingPeriodStart": "009",
        "BillingPeriodEnd": "010", "PublisherName": "021", "InvoiceIssuerName": "023", "BillingAccountId": "024",
        "ChargeDescription": "025", "ChargeClass": "026", "ChargePeriodEnd": "028", "ContractedCost": "030",
        "EffectiveCost": "031", "ListCost": "032", "BillingCurrency": "035", "PricingQuantity": "036",
        "ChargePeriodStart": "037", "ProviderName": "038", "ServiceCategory": "040", "ServiceName": "041",
        "PricingUnit": "068",
    }


# The validator's unconditional nullability rule of each column that MUST NOT be null.
NOT_NULL_RULES = {
    "BilledCost": "BilledCost-C-003-M", "BillingAccountId": "BillingAccountId-C-001-M",
    "BillingCurrency": "BillingCurrency-C-004-M", "BillingPeriodEnd": "BillingPeriodEnd-C-003-M",
    "BillingPeriodStart": "BillingPeriodStart-C-003-M", "ChargeCategory": "ChargeCategory-C-002-M",
    "ChargeFrequency": "ChargeFrequency-C-002-M", "ChargePeriodEnd": "ChargePeriodEnd-C-003-M",
    "ChargePeriodStart": "ChargePeriodStart-C-003-M", "ContractedCost": "ContractedCost-C-003-M",
    "EffectiveCost": "EffectiveCost-C-003-M", "InvoiceIssuerName": "InvoiceIssuerName-C-003-M",
    "ListCost": "ListCost-C-003-M", "ProviderName": "ProviderName-C-003-M", "PublisherName": "PublisherName-C-003-M",
    "ServiceCategory": "ServiceCategory-C-002-M", "ServiceName": "ServiceName-C-003-M",
    "ServiceSubcategory": "ServiceSubcategory-C-002-M",
}


def rules() -> list[Rule]:
    ids = _dataset_ids()
    out = [Rule(f"CostAndUsage-D-{ids[c]}-M", f"{c} MUST be present in a FOCUS dataset", column=c)
           for c in FOCUS_12_MANDATORY_COLUMNS]
    out += [Rule(NOT_NULL_RULES[c], f"{c} MUST NOT be null", where=f'"{c}" IS NULL')
            for c in FOCUS_12_NOT_NULL_COLUMNS]
    allowed = {
        "ChargeCategory": CHARGE_CATEGORIES, "ChargeClass": CHARGE_CLASSES, "ChargeFrequency": CHARGE_FREQUENCIES,
        "PricingCategory": PRICING_CATEGORIES, "ServiceCategory": SERVICE_CATEGORIES,
        "ServiceSubcategory": tuple(SERVICE_SUBCATEGORIES), "CommitmentDiscountStatus": COMMITMENT_DISCOUNT_STATUSES,
        "CommitmentDiscountCategory": COMMITMENT_DISCOUNT_CATEGORIES,
    }
    out += [Rule(f"{c} allowed values", f"{c} MUST be one of the allowed values",
                 where=f'"{c}" IS NOT NULL AND "{c}" NOT IN ({_values(v)})', sample=f'"{c}"')
            for c, v in allowed.items()]
    parents = " ".join(f"WHEN '{s}' THEN '{p}'" for s, p in SERVICE_SUBCATEGORIES.items())
    out += [
        Rule("ServiceSubcategory-C-004-M", "ServiceSubcategory MUST have its one parent ServiceCategory",
             where=f"(CASE ServiceSubcategory {parents} END) IS DISTINCT FROM ServiceCategory AND ServiceSubcategory IS NOT NULL",
             sample="ServiceSubcategory || ' under ' || ServiceCategory"),
        Rule("ServiceName-C-005-C", "each ServiceName MUST have exactly 1 ServiceCategory",
             "SELECT ServiceName FROM {t} GROUP BY ServiceName HAVING count(DISTINCT ServiceCategory) > 1"),
        Rule("ServiceName-C-008-C", "each ServiceName SHOULD have exactly 1 ServiceSubcategory",
             "SELECT ServiceName FROM {t} GROUP BY ServiceName HAVING count(DISTINCT ServiceSubcategory) > 1"),
        # Quantities' nullability. focus-validator 2.2.1 skips the first rule and passes the second
        # wherever ChargeClass is null (its "is not Correction" test reads a null as unknown), so
        # every usage line of a source without quantities passed it. Here a null ChargeClass is what
        # FOCUS means by it: not a correction.
        Rule("ConsumedQuantity-C-004-C", "ConsumedQuantity MUST be null when ChargeCategory is not Usage, or Usage of an unused commitment",
             where="ConsumedQuantity IS NOT NULL AND (ChargeCategory <> 'Usage' OR CommitmentDiscountStatus = 'Unused')",
             sample="ChargeCategory"),
        Rule("PricingQuantity-C-004-C", "PricingQuantity MUST be null when ChargeCategory is Tax",
             where="PricingQuantity IS NOT NULL AND ChargeCategory = 'Tax'", sample="ChargeCategory"),
        Rule("PricingQuantity-C-005-C", "PricingQuantity MUST NOT be null for usage and purchases that are not corrections",
             where="PricingQuantity IS NULL AND ChargeCategory IN ('Usage', 'Purchase') AND ChargeClass IS DISTINCT FROM 'Correction'",
             sample="x_SourceFile"),
        Rule("PricingUnit-C-003-O", "PricingUnit SHOULD conform to UnitFormat",
             where="PricingUnit IS NOT NULL AND NOT regexp_matches(PricingUnit, $unit_format)", sample="PricingUnit"),
        Rule("PricingUnit-C-005-C", "PricingUnit MUST be null when PricingQuantity is null",
             where="PricingQuantity IS NULL AND PricingUnit IS NOT NULL", sample="PricingUnit"),
        Rule("PricingUnit-C-006-C", "PricingUnit MUST NOT be null when PricingQuantity is not null",
             where="PricingQuantity IS NOT NULL AND PricingUnit IS NULL", sample="PricingQuantity"),
        Rule("ChargeFrequency-C-004-C", "ChargeFrequency MUST NOT be Usage-Based when ChargeCategory is Purchase",
             where="ChargeCategory = 'Purchase' AND ChargeFrequency = 'Usage-Based'", sample="ChargeFrequency"),
        Rule("BilledCost-C-005-C", "BilledCost MUST be 0 where a third party is paid (InvoiceIssuerName is not ProviderName)",
             where="InvoiceIssuerName IS DISTINCT FROM ProviderName AND BilledCost <> 0",
             sample="InvoiceIssuerName || ' / ' || ProviderName"),
        # The validator reads InvoiceId's nullability (InvoiceId-C-003-C) dataset-wide: all null or none.
        Rule("InvoiceId-C-003-C", "InvoiceId MUST be null on every line or on none",
             "SELECT NULL FROM {t} HAVING count(InvoiceId) NOT IN (0, count(*))"),
        Rule("BillingPeriodEnd after start", "BillingPeriodEnd MUST be after BillingPeriodStart",
             where="BillingPeriodEnd <= BillingPeriodStart", sample="BillingPeriodStart"),
        Rule("BillingCurrency format", "BillingCurrency MUST be a three-letter currency code",
             where="NOT regexp_full_match(BillingCurrency, '[A-Z]{3}')", sample="BillingCurrency"),
    ]
    for money in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
        out.append(Rule(f"{money} type", f"{money} MUST be of type Decimal", column=money))
    for ts in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"):
        out.append(Rule(f"{ts} type", f"{ts} MUST be of type Date/Time", column=ts))
    return out


SAMPLES = 5  # sample values shown per failing rule


def _params(sql: str) -> dict | None:
    return {"unit_format": UNIT_FORMAT_REGEX} if "$unit_format" in sql else None


def _execute(conn, sql: str):
    params = _params(sql)
    return conn.execute(sql, params) if params else conn.execute(sql)


def _line_violations(conn, table: str, line_rules: list[Rule]) -> dict[str, int] | None:
    """Each line rule's violating lines, all counted in one pass over the table (one scan instead of
    one per rule: 1.2 of a 1.2M-line run's seconds went to 30 scans). None when a column a rule
    reads is missing: then each rule is run alone, so the one that needs it fails by itself."""
    counts = ", ".join(f"count(*) FILTER (WHERE {r.where})" for r in line_rules)
    try:
        row = _execute(conn, f"SELECT {counts} FROM {table}").fetchone()
    except duckdb.BinderException:
        return None
    return {r.id: n for r, n in zip(line_rules, row)}


def _samples(conn, query: str) -> list[str]:
    """A few distinct sample values of a rule's violations; never all of them (they can be millions)."""
    rows = _execute(conn, f"SELECT * FROM ({query}) LIMIT 1000").fetchall()
    return list(dict.fromkeys(str(r[0]) for r in rows))[:SAMPLES]


def check(conn, table: str = TABLE) -> list[dict]:
    """The rules `table` breaks: [{rule, text, violations, sample}], empty when it conforms."""
    schema, name = table.split(".")
    types = dict(conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_catalog = current_database() AND table_schema = ? AND table_name = ?",
        [schema, name]).fetchall())
    all_rules = rules()
    counted = _line_violations(conn, table, [r for r in all_rules if r.where])
    failures = []
    for rule in all_rules:
        if rule.query is None:
            kind = types.get(rule.column)
            if kind is None:
                failures.append({"rule": rule.id, "text": rule.text, "violations": 1, "sample": []})
            elif rule.id.endswith(" type") and not (
                    kind.startswith("DECIMAL") if "Cost" in rule.column else kind.startswith("TIMESTAMP")):
                failures.append({"rule": rule.id, "text": rule.text, "violations": 1, "sample": [kind]})
            continue
        query = rule.query.replace("{t}", table)
        try:
            if rule.where and counted is not None:
                violations = counted[rule.id]
            else:
                violations = _execute(conn, f"SELECT count(*) FROM ({query})").fetchone()[0]
        except duckdb.BinderException as missing:  # a column the rule reads is absent: its presence rule fails too
            failures.append({"rule": rule.id, "text": rule.text, "violations": 1, "sample": [str(missing).splitlines()[0]]})
            continue
        if violations:
            failures.append({"rule": rule.id, "text": rule.text, "violations": violations, "sample": _samples(conn, query)})
    return failures


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.warehouse.focus_conformance WAREHOUSE.duckdb [...]`: the own check, as make focus-check runs it."""
    import sys

    paths = sys.argv[1:] if argv is None else argv
    status = 0
    for path in paths:
        conn = connect(path, read_only=True)
        try:
            failures = check(conn)
        finally:
            conn.close()
        print(f"{path}: {len(rules())} FOCUS 1.2 rules, {len(failures)} failing")
        for f in failures:
            print(f"    {f['rule']}: {f['text']} ({f['violations']} violations, e.g. {f['sample']})")
        status |= bool(failures)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
