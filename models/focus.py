"""The FOCUS cost-and-usage columns the warehouse speaks, in one place.

`core.cost_lines` keeps every FOCUS 1.2 column under the spec's own name, the 1.3 additions as
nullable columns, and gpu-finops extensions prefixed `x_`. Connectors produce this shape; SQL reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Value kinds. Money is exact (DECIMAL(38,10), as the design fixes); unit prices and quantities
# carry more scale because real exports price requests at fractions of a micro-unit.
MONEY = "money"
PRICE = "price"
QUANTITY = "quantity"
TEXT = "text"
TIMESTAMP = "timestamp"
JSON = "json"


@dataclass(frozen=True)
class FocusColumn:
    name: str
    kind: str
    version: str  # FOCUS version that introduced the column
    required: bool = False  # a row without it is quarantined


FOCUS_COLUMNS: tuple[FocusColumn, ...] = (
    FocusColumn("AvailabilityZone", TEXT, "1.0"),
    FocusColumn("BilledCost", MONEY, "1.0", required=True),
    FocusColumn("BillingAccountId", TEXT, "1.0"),
    FocusColumn("BillingAccountName", TEXT, "1.0"),
    FocusColumn("BillingAccountType", TEXT, "1.2"),
    FocusColumn("BillingCurrency", TEXT, "1.0", required=True),
    FocusColumn("BillingPeriodEnd", TIMESTAMP, "1.0"),
    FocusColumn("BillingPeriodStart", TIMESTAMP, "1.0"),
    FocusColumn("CapacityReservationId", TEXT, "1.1"),
    FocusColumn("CapacityReservationStatus", TEXT, "1.1"),
    FocusColumn("ChargeCategory", TEXT, "1.0", required=True),
    FocusColumn("ChargeClass", TEXT, "1.0"),
    FocusColumn("ChargeDescription", TEXT, "1.0"),
    FocusColumn("ChargeFrequency", TEXT, "1.0"),
    FocusColumn("ChargePeriodEnd", TIMESTAMP, "1.0", required=True),
    FocusColumn("ChargePeriodStart", TIMESTAMP, "1.0", required=True),
    FocusColumn("CommitmentDiscountCategory", TEXT, "1.0"),
    FocusColumn("CommitmentDiscountId", TEXT, "1.0"),
    FocusColumn("CommitmentDiscountName", TEXT, "1.0"),
    FocusColumn("CommitmentDiscountQuantity", QUANTITY, "1.1"),
    FocusColumn("CommitmentDiscountStatus", TEXT, "1.0"),
    FocusColumn("CommitmentDiscountType", TEXT, "1.0"),
    FocusColumn("CommitmentDiscountUnit", TEXT, "1.1"),
    FocusColumn("ConsumedQuantity", QUANTITY, "1.0"),
    FocusColumn("ConsumedUnit", TEXT, "1.0"),
    FocusColumn("ContractedCost", MONEY, "1.0"),
    FocusColumn("ContractedUnitPrice", PRICE, "1.0"),
    FocusColumn("EffectiveCost", MONEY, "1.0", required=True),
    FocusColumn("InvoiceId", TEXT, "1.2"),
    FocusColumn("InvoiceIssuerName", TEXT, "1.0"),
    FocusColumn("ListCost", MONEY, "1.0"),
    FocusColumn("ListUnitPrice", PRICE, "1.0"),
    FocusColumn("PricingCategory", TEXT, "1.0"),
    FocusColumn("PricingCurrency", TEXT, "1.2"),
    FocusColumn("PricingCurrencyContractedUnitPrice", PRICE, "1.2"),
    FocusColumn("PricingCurrencyEffectiveCost", MONEY, "1.2"),
    FocusColumn("PricingCurrencyListUnitPrice", PRICE, "1.2"),
    FocusColumn("PricingQuantity", QUANTITY, "1.0"),
    FocusColumn("PricingUnit", TEXT, "1.0"),
    FocusColumn("ProviderName", TEXT, "1.0"),
    FocusColumn("PublisherName", TEXT, "1.0"),
    FocusColumn("RegionId", TEXT, "1.0"),
    FocusColumn("RegionName", TEXT, "1.0"),
    FocusColumn("ResourceId", TEXT, "1.0"),
    FocusColumn("ResourceName", TEXT, "1.0"),
    FocusColumn("ResourceType", TEXT, "1.0"),
    FocusColumn("ServiceCategory", TEXT, "1.0"),
    FocusColumn("ServiceName", TEXT, "1.0"),
    FocusColumn("ServiceSubcategory", TEXT, "1.1"),
    FocusColumn("SkuId", TEXT, "1.0"),
    FocusColumn("SkuMeter", TEXT, "1.1"),
    FocusColumn("SkuPriceDetails", JSON, "1.1"),
    FocusColumn("SkuPriceId", TEXT, "1.0"),
    FocusColumn("SubAccountId", TEXT, "1.0"),
    FocusColumn("SubAccountName", TEXT, "1.0"),
    FocusColumn("SubAccountType", TEXT, "1.2"),
    FocusColumn("Tags", JSON, "1.0"),
    # FOCUS 1.3 additions: nullable here, filled when a 1.3 export carries them.
    FocusColumn("AllocatedMethodDetails", JSON, "1.3"),
    FocusColumn("AllocatedMethodId", TEXT, "1.3"),
    FocusColumn("AllocatedResourceId", TEXT, "1.3"),
    FocusColumn("AllocatedResourceName", TEXT, "1.3"),
    FocusColumn("AllocatedTags", JSON, "1.3"),
    FocusColumn("ContractApplied", JSON, "1.3"),
    FocusColumn("HostProviderName", TEXT, "1.3"),
    FocusColumn("ServiceProviderName", TEXT, "1.3"),
)

FOCUS_COLUMN_NAMES = tuple(c.name for c in FOCUS_COLUMNS)
REQUIRED_COLUMNS = tuple(c.name for c in FOCUS_COLUMNS if c.required)

# Names used by FOCUS 1.0-preview exports, mapped to the names of 1.0 and later.
RENAMED_COLUMNS = {
    "ChargeType": "ChargeCategory",
    "AmortizedCost": "EffectiveCost",
    "UsageQuantity": "ConsumedQuantity",
    "UsageUnit": "ConsumedUnit",
    "Region": "RegionId",
}

# Allowed values, as the spec enumerates them. Checks use these; connectors never invent others.
CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
CHARGE_CLASSES = ("Correction",)
CHARGE_FREQUENCIES = ("One-Time", "Recurring", "Usage-Based")
PRICING_CATEGORIES = ("Standard", "Dynamic", "Committed", "Other")
COMMITMENT_DISCOUNT_STATUSES = ("Used", "Unused")
COMMITMENT_DISCOUNT_CATEGORIES = ("Spend", "Usage")
CAPACITY_RESERVATION_STATUSES = ("Used", "Unused")
SERVICE_CATEGORIES = (
    "AI and Machine Learning",
    "Analytics",
    "Business Applications",
    "Compute",
    "Databases",
    "Developer Tools",
    "Multicloud",
    "Identity",
    "Integration",
    "Internet of Things",
    "Management and Governance",
    "Media",
    "Migration",
    "Mobile",
    "Networking",
    "Security",
    "Storage",
    "Web",
    "Other",
)

# FOCUS 1.2's ServiceSubcategory values, each under its one parent ServiceCategory
# (sql/macros.sql focus_subcategory_parent holds the same table for the SQL).
SERVICE_SUBCATEGORIES: dict[str, str] = {
    **dict.fromkeys(('AI Platforms', 'Bots', 'Generative AI', 'Machine Learning', 'Natural Language Processing', 'Other (AI and Machine Learning)'), 'AI and Machine Learning'),
    **dict.fromkeys(('Analytics Platforms', 'Business Intelligence', 'Data Processing', 'Search', 'Streaming Analytics', 'Other (Analytics)'), 'Analytics'),
    **dict.fromkeys(('Productivity and Collaboration', 'Other (Business Applications)'), 'Business Applications'),
    **dict.fromkeys(('Containers', 'End User Computing', 'Quantum Compute', 'Serverless Compute', 'Virtual Machines', 'Other (Compute)'), 'Compute'),
    **dict.fromkeys(('Caching', 'Data Warehouses', 'Ledger Databases', 'NoSQL Databases', 'Relational Databases', 'Time Series Databases', 'Other (Databases)'), 'Databases'),
    **dict.fromkeys(('Developer Platforms', 'Continuous Integration and Deployment', 'Development Environments', 'Source Code Management', 'Quality Assurance', 'Other (Developer Tools)'), 'Developer Tools'),
    **dict.fromkeys(('Identity and Access Management', 'Other (Identity)'), 'Identity'),
    **dict.fromkeys(('API Management', 'Messaging', 'Workflow Orchestration', 'Other (Integration)'), 'Integration'),
    **dict.fromkeys(('IoT Analytics', 'IoT Platforms', 'Other (Internet of Things)'), 'Internet of Things'),
    **dict.fromkeys(('Architecture', 'Compliance', 'Cost Management', 'Data Governance', 'Disaster Recovery', 'Endpoint Management', 'Observability', 'Support', 'Other (Management and Governance)'), 'Management and Governance'),
    **dict.fromkeys(('Content Creation', 'Gaming', 'Media Streaming', 'Mixed Reality', 'Other (Media)'), 'Media'),
    **dict.fromkeys(('Data Migration', 'Resource Migration', 'Other (Migration)'), 'Migration'),
    **dict.fromkeys(('Other (Mobile)',), 'Mobile'),
    **dict.fromkeys(('Multicloud Integration', 'Other (Multicloud)'), 'Multicloud'),
    **dict.fromkeys(('Application Networking', 'Content Delivery', 'Network Connectivity', 'Network Infrastructure', 'Network Routing', 'Network Security', 'Other (Networking)'), 'Networking'),
    **dict.fromkeys(('Secret Management', 'Security Posture Management', 'Threat Detection and Response', 'Other (Security)'), 'Security'),
    **dict.fromkeys(('Backup Storage', 'Block Storage', 'File Storage', 'Object Storage', 'Storage Platforms', 'Other (Storage)'), 'Storage'),
    **dict.fromkeys(('Application Platforms', 'Other (Web)'), 'Web'),
    **dict.fromkeys(('Other (Other)',), 'Other'),
}

# FOCUS 1.2 (CostAndUsage dataset): columns a dataset MUST have (the CostAndUsage-D-*-M presence
# rules), and columns that MUST NOT be null on any row (the unconditional nullability rules).
FOCUS_12_MANDATORY_COLUMNS = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "ServiceCategory", "ServiceName",
)
FOCUS_12_NOT_NULL_COLUMNS = (
    "BilledCost", "BillingAccountId", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName",
    "ListCost", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName", "ServiceSubcategory",
)


def _unit_format_regex() -> str:
    """FOCUS 1.2 UnitFormat, as focus-validator 2.2.1 checks it (FormatUnitGenerator): a data size,
    a time or a count unit alone, `<unit>-<Times>`, `<unit>/<Time>`, `<n> <unit>`, `<unit>/<n> <Times>`."""
    sizes = "|".join(f"{p}{b}" for b in ("b", "B") for p in ("", "K", "M", "G", "T", "P", "E")) + "|" + \
        "|".join(f"{p}i{b}" for b in ("b", "B") for p in ("K", "M", "G", "T", "P", "E"))
    one = "Year|Month|Day|Hour|Minute|Second"
    many = "Years|Months|Days|Hours|Minutes|Seconds"
    count = r"[A-Za-z][A-Za-z0-9]*(?:\s+[A-Za-z][A-Za-z0-9]*)*"
    forms = (
        f"({sizes}|{one}|{many}|{count})",
        f"({sizes}|{count})-({many})",
        f"({sizes}|{count}|{many})/({one})",
        f"[0-9]+ ({sizes}|{one}|{many}|{count})",
        f"({sizes}|{count}|{many})/[0-9]+ ({many})",
    )
    return "|".join(f"(^{f}$)" for f in forms)


UNIT_FORMAT_REGEX = _unit_format_regex()
