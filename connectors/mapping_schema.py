"""The schema of a GPU-rental mapping file (connectors/mappings/*.yaml and FINOPS_MAPPINGS).

Every key is declared here, with `extra="forbid"`: a misspelt key is an error naming the file and
the key, never silently ignored. `load_mapping` turns a file into a validated `MappingFile` or
raises `MappingError` with one line that says what is wrong where (README: "Mapping files").
"""

from __future__ import annotations

import codecs
import difflib
from decimal import Decimal
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from models.currencies import is_iso4217

BillingMode = Literal["monthly", "on_demand", "spot", "commit_1y", "commit_3y"]
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Columns(_Strict):
    """Canonical field → the file's column name. `start` and `amount` are always needed."""

    provider: str | None = None
    invoice_id: str | None = None
    account_id: str | None = None
    resource_id: str | None = None
    resource_name: str | None = None
    region: str | None = None
    gpu_model: str | None = None
    gpu_count: str | None = None
    billing_mode: str | None = None
    start: str
    end: str | None = None
    hours: str | None = None
    unit_price: str | None = None
    amount: str
    currency: str | None = None
    charge_category: str | None = None

    @field_validator("*")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("a column name cannot be empty")
        return value

    def mapped(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Defaults(_Strict):
    """Constant values for fields the file has no column for, or leaves empty on a row."""

    invoice_id: str | None = None
    account_id: str | None = None
    resource_id: str | None = None
    resource_name: str | None = None
    region: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = Field(None, ge=0)
    billing_mode: BillingMode | None = None
    hours: Decimal | None = Field(None, gt=0)
    unit_price: Decimal | None = Field(None, ge=0)
    currency: str | None = None

    @field_validator("currency")
    @classmethod
    def _iso_currency(cls, value: str | None) -> str | None:
        if value is not None and not is_iso4217(value):
            raise ValueError(f"{value!r} is not an ISO 4217 currency code (e.g. USD, EUR, CNY)")
        return value

    def given(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items() if v is not None}


class Computed(_Strict):
    """Fields derived from others, for files that lack them. Only these two rules exist."""

    end: Literal["start + hours"] | None = None
    hours: Literal["end - start"] | None = None


class Numbers(_Strict):
    """How the file writes numbers: many European consoles write `1.234,56` (decimal comma,
    point between thousands), invoices `$1,234.56` or `(12.00)` for a credit. Applied to the file's
    cells of amount, unit price, hours and GPU count, never to `defaults`."""

    decimal_separator: Literal[".", ","] = "."
    thousands_separator: Literal[",", ".", " ", "'", "\u00a0", "\u202f"] | None = None
    # A symbol written before or after the number (`$12.00`, `-$12.00`, `12,00 €`), read as nothing:
    # the currency is the mapping's `currency` column or default, never the symbol.
    currency_symbol: str | None = Field(default=None, min_length=1, max_length=4)
    # How a negative amount is written besides a leading minus: `(12.00)` or `12.00-`.
    negative: Literal["leading_minus", "brackets", "trailing_minus"] = "leading_minus"

    @model_validator(mode="after")
    def _distinct(self) -> Numbers:
        if self.thousands_separator == self.decimal_separator:
            raise ValueError(f"thousands_separator: '{self.thousands_separator}' is also the decimal separator")
        symbol = self.currency_symbol
        # The symbol is taken off the cell's start or end as written, before the separators are read,
        # so one holding a separator (`kr.`, `Rs.`) is read as nothing too; one of separators alone is no symbol.
        separators = {self.decimal_separator, self.thousands_separator, " "}
        if symbol is not None and (symbol != symbol.strip() or any(c.isdigit() or c in "+-()" for c in symbol)
                                   or all(c in separators for c in symbol)):
            raise ValueError(f"currency_symbol: {symbol!r} holds a digit, a sign, a bracket or spaces around it, "
                             "or only separators")
        return self

    def is_plain(self) -> bool:
        """Written the way the parser reads numbers itself: nothing to rewrite."""
        return self == Numbers()


class BillingModes(_Strict):
    """Canonical billing mode → the words the file uses for it (matched case-insensitively)."""

    monthly: list[str] = []
    on_demand: list[str] = []
    spot: list[str] = []
    commit_1y: list[str] = []
    commit_3y: list[str] = []


class ChargeCategories(_Strict):
    """FOCUS ChargeCategory → the words the file uses for it (matched case-insensitively). A line
    whose category column is empty, or a file without one, is usage."""

    usage: list[str] = []
    credit: list[str] = []
    tax: list[str] = []
    adjustment: list[str] = []


class MappingFile(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    provider: str = Field(min_length=1)
    encoding: str = "utf-8"
    # The field separator: `;` where a decimal comma is written (many European consoles), `\t` for TSV.
    delimiter: str = ","
    numbers: Numbers = Numbers()
    timezone: str | None = None
    time_formats: list[str] = []
    # An end written as a date alone names the last day billed (`30.09.2026`): the period ends at
    # the next midnight, as FOCUS's exclusive ChargePeriodEnd says. An end with a time is kept.
    end_date_inclusive: bool = False
    columns: Columns
    required: list[str] | None = None
    billing_modes: BillingModes = BillingModes()
    charge_categories: ChargeCategories = ChargeCategories()
    defaults: Defaults = Defaults()
    computed: Computed = Computed()
    # The words that open an invoice's total rows (`Total`, `合计`): such a row is the file's sum of
    # its lines, not a line; the file's lines are checked against it.
    total_rows: list[str] = []
    # The words an invoice id cell holds on a line no invoice has billed yet (`Pending`): no
    # invoice id, so the line is the month to date, which the invoice restates when it comes.
    # Compared trimmed and in lower case; `not_invoiced: []` reads every word as an id.
    not_invoiced: list[str] = ["pending", "unbilled", "not billed", "not invoiced", "not yet invoiced", "uninvoiced",
                               "n/a", "na", "none", "null", "-", "--"]

    @model_validator(mode="before")
    @classmethod
    def _default_currency(cls, data):
        # `default_currency: CNY` (the first release's spelling) is `defaults: {currency: CNY}`.
        if isinstance(data, dict) and "default_currency" in data:
            data = dict(data)
            currency = data.pop("default_currency")
            defaults = data.get("defaults") or {}
            if isinstance(defaults, dict) and "currency" in defaults:
                raise ValueError("default_currency: give the currency once, under defaults.currency")
            data["defaults"] = {**defaults, "currency": currency} if isinstance(defaults, dict) else defaults
        return data

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding '{value}'") from None
        return value

    @field_validator("delimiter")
    @classmethod
    def _one_character(cls, value: str) -> str:
        if len(value) != 1 or value in "\r\n\"":
            raise ValueError(f"{value!r} is not a field separator: give one character, e.g. ';' or '\\t' (tab)")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown IANA time zone '{value}'") from None
        return value

    @field_validator("total_rows")
    @classmethod
    def _words(cls, value: list[str]) -> list[str]:
        for word in value:
            if not total_word(word):
                raise ValueError(f"{word!r}: a total row's word cannot be empty")
        return value

    @field_validator("time_formats")
    @classmethod
    def _strftime_patterns(cls, value: list[str]) -> list[str]:
        for fmt in value:
            if "%" not in fmt:
                raise ValueError(f"'{fmt}' is not a strftime pattern (e.g. '%Y-%m-%d %H:%M:%S')")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MappingFile:
        mapped = self.columns.mapped()
        for field in self.required or []:
            if field not in Columns.model_fields:
                raise ValueError(f"required: '{field}' is not a field{_suggest(field, Columns.model_fields)}")
            if field not in mapped:
                raise ValueError(f"required: '{field}' has no column under columns")
        if self.computed.end and self.computed.hours:
            raise ValueError("computed: end and hours cannot both be computed")
        if self.computed.end:
            if "end" in mapped:
                raise ValueError("computed.end: the file has an end column (columns.end); drop one of the two")
            if "hours" not in mapped and self.defaults.hours is None:
                raise ValueError("computed.end: start + hours needs columns.hours or defaults.hours")
        elif "end" not in mapped:
            raise ValueError("columns.end: required field missing; or declare computed: {end: start + hours}")
        if self.computed.hours:
            if "hours" in mapped:
                raise ValueError("computed.hours: the file has an hours column (columns.hours); drop one of the two")
        seen: dict[str, str] = {}
        for mode, words in self.billing_modes.model_dump().items():
            for word in words:
                if seen.setdefault(word.lower(), mode) != mode:
                    raise ValueError(f"billing_modes.{mode}: '{word}' is also a word for {seen[word.lower()]}")
        categories: dict[str, str] = {}
        for category, words in self.charge_categories.model_dump().items():
            for word in words:
                if categories.setdefault(word.lower(), category) != category:
                    raise ValueError(f"charge_categories.{category}: '{word}' is also a word for {categories[word.lower()]}")
        if self.delimiter == self.numbers.decimal_separator and self.delimiter != ".":
            raise ValueError(f"numbers.decimal_separator: '{self.delimiter}' is also the delimiter; "
                             "a file with a decimal comma separates its fields with ';' (delimiter: ';')")
        if any(self.charge_categories.model_dump().values()) and "charge_category" not in mapped:
            raise ValueError("charge_categories: the words need a column to be read from (columns.charge_category)")
        return self

    def required_fields(self) -> list[str]:
        """The fields whose columns a file's header must have: `required`, else every mapped one."""
        return list(self.required) if self.required is not None else list(self.columns.mapped())

    def category_words(self) -> dict[str, str]:
        """The file's word (lower case) → FOCUS ChargeCategory; the category names themselves also work."""
        words = {category: category for category in ChargeCategories.model_fields}
        words.update({w.lower(): c for c, ws in self.charge_categories.model_dump().items() for w in ws})
        return {word: category.capitalize() for word, category in words.items()}

    def total_words(self) -> list[str]:
        """The words of `total_rows` as a row's first cell is compared with them: lower case, and
        without a closing colon (`Total:`, `合计：`)."""
        return [total_word(w) for w in self.total_rows]

    def not_invoiced_words(self) -> list[str]:
        return [w.strip().lower() for w in self.not_invoiced]

    def mode_words(self) -> dict[str, str]:
        """The file's word (lower case) → canonical mode; the canonical names themselves also work."""
        words = {mode: mode for mode in BillingModes.model_fields}
        words.update({w.lower(): mode for mode, ws in self.billing_modes.model_dump().items() for w in ws})
        return words


def total_word(text: str) -> str:
    return text.strip().rstrip(":\uff1a").strip().lower()


class MappingError(ValueError):
    """A mapping file that cannot be used: one line naming the file and what is wrong in it."""

    def __init__(self, source: str, message: str, name: str | None = None):
        self.source = source
        self.message = message
        self.name = name  # the mapping's `name`, when it has a usable one
        super().__init__(f"{source}: {message}")


# The model at each key path, to suggest the right spelling of an unknown key.
_MODELS_AT: dict[tuple, type[BaseModel]] = {
    (): MappingFile, ("columns",): Columns, ("defaults",): Defaults, ("computed",): Computed,
    ("billing_modes",): BillingModes, ("charge_categories",): ChargeCategories, ("numbers",): Numbers,
}


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _describe(error: dict) -> str:
    loc = tuple(p for p in error["loc"])
    where = ".".join(str(p) for p in loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _MODELS_AT.get(loc[:-1])
        extra = ("default_currency",) if model is MappingFile else ()
        known = [*model.model_fields, *extra] if model else []
        text = f"unknown field{_suggest(loc[-1], known)}"
    elif kind == "missing":
        text = "required field missing"
    elif kind == "value_error":
        text = str(error["ctx"]["error"]) if "ctx" in error else error["msg"]
        return f"{where}: {text}" if where else text
    else:
        value = error.get("input")
        shown = f" (got {value!r})" if isinstance(value, str | int | float | bool | Decimal) or value is None else ""
        text = error["msg"][:1].lower() + error["msg"][1:] + shown
    return f"{where}: {text}" if where else text


def display_path(path: Path) -> str:
    """The path as a user would type it: relative to the project for bundled mappings."""
    resolved = path.resolve()
    for base in (Path.cwd(), PACKAGE_ROOT):
        if resolved.is_relative_to(base):
            return resolved.relative_to(base).as_posix()
    return str(path)


def validate_mapping(data: object, source: str) -> MappingFile:
    """A parsed YAML document → MappingFile, or MappingError naming `source` and every problem."""
    name = data.get("name") if isinstance(data, dict) and isinstance(data.get("name"), str) else None
    if not isinstance(data, dict):
        raise MappingError(source, f"expected a mapping of keys (name:, provider:, columns:, …), got {type(data).__name__}")
    try:
        return MappingFile.model_validate(data)
    except ValidationError as exc:
        raise MappingError(source, "; ".join(_describe(e) for e in exc.errors()), name) from None


def load_mapping(path: Path) -> MappingFile:
    source = display_path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingError(source, f"cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None) or str(exc)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise MappingError(source, f"not valid YAML: {where}{problem}") from None
    return validate_mapping(data, source)
