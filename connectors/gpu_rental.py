"""GPU-rental clouds that export no FOCUS: one declarative mapping file per provider.

A mapping (connectors/mappings/*.yaml, and the folders FINOPS_MAPPINGS names) names the file's
columns for each canonical field, maps its billing-mode words to monthly / on-demand / spot, gives
constants (`defaults:`) and derived fields (`computed: {end: start + hours}`) for what the file
lacks, and says how times are written. Its schema is checked (connectors/mapping_schema.py): an
invalid file becomes an InvalidMapping, listed and reported with its error, never a crash. The
connector turns each invoice line into a FOCUS charge: costs exact, GPU model and count as x_
columns, monthly plans as Committed/Recurring, on-demand as Standard/Usage-Based.
"""

import codecs
import difflib
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl
import pyarrow as pa
from connectors.kit import (
    NOT_COMPUTED,
    ROW_NUMBER,
    WHERE,
    cell_reason,
    failed,
    short_value,
    find_header_line,
    first_lines_fields,
    first_reason,
    parse_decimal,
    read_head,
    parse_utc,
    split_rejected,
    stream_csv_as_strings,
    to_canonical,
)
from connectors.kit import (
    WORKBOOK_TIME_FORMATS,
    Connector,
    ConnectorError,
    ReadContext,
    find_workbook_headers,
    is_workbook,
    money_sum,
    stream_workbook_as_strings,
    workbook_problems,
)
from connectors.mapping_schema import Columns, MappingError, MappingFile, display_path, load_mapping, validate_mapping
from models.currencies import ISO4217
from models.gpus import gpu_model_expr

MAPPINGS_DIR = Path(__file__).resolve().parent / "mappings"
USER_MAPPINGS_ENV = "FINOPS_MAPPINGS"
PRICING = {"monthly": ("Committed", "Recurring"), "commit_1y": ("Committed", "Recurring"),
           "commit_3y": ("Committed", "Recurring"), "on_demand": ("Standard", "Usage-Based"),
           "spot": ("Dynamic", "Usage-Based")}
FIELDS = tuple(Columns.model_fields)
NUMERIC_FIELDS = {"amount", "unit_price", "hours", "gpu_count"}
MAX_HOURS, MAX_GPUS = 1_000_000, 1_000_000


class GpuRentalConnector(Connector):
    kind = "billing"
    # An invoice export is sent invoice by invoice (a week's, a project's): each invoice id is a
    # delivery of its own, and a month without invoice ids is restated whole (pipelines/ledger).
    invoices_are_deliveries = True

    def __init__(self, mapping: dict | MappingFile, source: Path | str | None = None):
        label = display_path(source) if isinstance(source, Path) else source or "mapping"
        self.mapping = mapping if isinstance(mapping, MappingFile) else validate_mapping(mapping, label)
        self.source = label
        self.name = self.mapping.name
        self.columns: dict[str, str] = self.mapping.columns.mapped()
        self.defaults: dict[str, str] = {"provider": self.mapping.provider, **self.mapping.defaults.given()}
        self.required = [self.columns[f] for f in self.mapping.required_fields()]
        self.not_invoiced = self.mapping.not_invoiced_words()
        self.recognises = (f"GPU-rental invoices mapped by {Path(label).name}: "
                           f"header has {', '.join(self.required)}")

    @classmethod
    def from_file(cls, path: Path) -> "GpuRentalConnector":
        """The connector of one mapping file; MappingError (file and key named) when it is invalid."""
        return cls(load_mapping(path), path)

    def workbook_headers(self, path: Path, head: bytes) -> list[tuple[str, int]]:
        """An Excel workbook's sheets whose header names every required column, with its row."""
        return find_workbook_headers(path, self.required) if is_workbook(path, head) else []

    def _head_text(self, head: bytes) -> bytes | None:
        """The file's first bytes as UTF-8, read in the mapping's encoding; None where they are not
        text in it. A character the sniff cut in two at its end is left out, not an error: a
        Chinese invoice over 64 KiB was unrecognised whenever its 65,536th byte fell inside one."""
        try:
            return codecs.getincrementaldecoder(self.mapping.encoding)(errors="strict").decode(head, final=False).encode()
        except UnicodeDecodeError:
            return None

    def header_line(self, head: bytes) -> int | None:
        """The line of the file's header: the first of its first lines that names every required
        column (an export may put a title, the account or the period above it)."""
        text = self._head_text(head)
        return None if text is None else find_header_line(text, self.required, self.mapping.delimiter)

    def detect(self, path: Path, head: bytes) -> bool:
        if is_workbook(path, head):
            return bool(self.workbook_headers(path, head))
        return self.header_line(head) is not None

    def missing_columns(self, head: bytes) -> list[str] | None:
        """The required columns the closest of the file's first lines lacks (a title may stand above
        the header)."""
        text = self._head_text(head)
        if text is None:
            return None
        lacking = [[c for c in self.required if c not in names] for names in first_lines_fields(text, self.mapping.delimiter)]
        return min(lacking, key=len, default=list(self.required))

    def col(self, field: str) -> pl.Expr:
        """A canonical field's text after defaults: the file's cell, else the mapping's default."""
        return pl.col(f"__f_{field}")

    def _fields(self, frame: pl.DataFrame) -> list[pl.Expr]:
        """One `__f_<field>` text column per canonical field: the file's column where it has one and
        the cell is not empty, else the mapping's default, else null."""
        exprs = []
        for field in FIELDS:
            column = self.columns.get(field)
            raw = pl.col(column) if column in frame.columns else pl.lit(None, dtype=pl.String)
            if field == "invoice_id" and self.not_invoiced:  # `Pending`: no invoice yet, as an empty cell
                raw = pl.when(raw.str.strip_chars().str.to_lowercase().is_in(self.not_invoiced)).then(None).otherwise(raw)
            cell = raw
            number = self._plain_number(raw) if field in NUMERIC_FIELDS else None
            if field in self.defaults:  # a default is a YAML number, written the plain way
                empty, default = raw.is_null() | (raw == ""), pl.lit(self.defaults[field])
                cell = pl.when(empty).then(default).otherwise(raw)
                number = None if number is None else pl.when(empty).then(default).otherwise(number)
            exprs.append(cell.alias(f"__f_{field}"))
            if number is not None:
                exprs.append(number.alias(f"__n_{field}"))
        return exprs

    def _plain_number(self, cell: pl.Expr) -> pl.Expr:
        """The file's way of writing a number (`numbers:`) as the parser reads it: `1.234,56` → `1234.56`,
        `($1,234.56)` → `-1234.56`. A cell not written that way (`12.34` where `.` groups thousands,
        `1.2.3,4`, `(5.00)` where brackets are not the mapping's negatives) becomes text no parser
        reads, so its line is quarantined quoting the file's own text: never 1234."""
        numbers = self.mapping.numbers
        if numbers.is_plain():
            return cell
        text = cell.str.strip_chars()
        if numbers.currency_symbol:
            symbol = re.escape(numbers.currency_symbol)
            # Before the number (after any sign or bracket) or after it (before any bracket or minus).
            leading, trailing = rf"^([+-]?\(?)\s*{symbol}\s*", rf"\s*{symbol}\s*(\)?-?)$"
            # One side only: `$1,234.5$` is no way of writing a number, and stays unread.
            text = pl.when(text.str.contains(leading)).then(text.str.replace(leading, "${1}")) \
                .otherwise(text.str.replace(trailing, "${1}"))
        if numbers.negative == "brackets":
            text = text.str.replace(r"^\((.+)\)$", "-${1}")
        elif numbers.negative == "trailing_minus":
            text = text.str.replace(r"^([^+-].*)-$", "-${1}")
        dec, thousands = re.escape(numbers.decimal_separator), numbers.thousands_separator
        whole = rf"(?:\d{{1,3}}(?:{re.escape(thousands)}\d{{3}})+|\d+)" if thousands else r"\d+"
        written = rf"^[+-]?(?:{whole}(?:{dec}\d*)?|{dec}\d+)$"
        plain = text
        if thousands:
            plain = plain.str.replace_all(thousands, "", literal=True)
        if numbers.decimal_separator != ".":
            plain = plain.str.replace_all(numbers.decimal_separator, ".", literal=True)
        return pl.when(cell.is_null() | (cell == "")).then(cell).when(text.str.contains(written)).then(plain) \
            .otherwise(pl.lit("not written as the mapping's numbers say"))

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        timezone = self.mapping.timezone or ctx.timezone
        formats = tuple(self.mapping.time_formats)
        head = read_head(path, tolerate_cut=True)  # a gzip cut short is refused by the reader, naming its line
        if is_workbook(path, head):
            sheets = self.workbook_headers(path, head)
            if not sheets:
                problems = "".join(f"; {problem}" for problem in workbook_problems(path))
                raise ConnectorError(ctx.source_file, f"no visible sheet's first rows name the columns of {self.name}: "
                                     f"{', '.join(self.required)}{problems}")
            header_line = sheets[0][1] + 1
            # Money merged across rows is its group's once: the amount column is never filled.
            frames = stream_workbook_as_strings(path, ctx.source_file, sheets, self.mapping.numbers.decimal_separator,
                                                unmerged=[self.columns["amount"]], where=True)
            formats = (*formats, *WORKBOOK_TIME_FORMATS) if formats else formats  # the way its date cells are written
        else:
            header_line = self.header_line(head) or 1
            frames = stream_csv_as_strings(path, ctx.source_file, delimiter=self.mapping.delimiter,
                                           encoding=self.mapping.encoding, ctx=ctx, connector=self.name,
                                           header_line=header_line)
        parse_time = (lambda c: parse_utc(c, timezone, formats)) if formats else (lambda c: parse_utc(c, timezone))  # noqa: E731
        computed = self.mapping.computed
        headers_seen: set[tuple[str, ...]] = set()
        totals = TotalRows(self.mapping.total_words(), self.columns["amount"], self.columns["start"])
        quarantined_before, rejected_here = len(ctx.quarantined), 0
        for frame in frames:
            source_columns = [c for c in frame.columns if c not in (ROW_NUMBER, WHERE)]
            missing = [c for c in self.required if c not in frame.columns]
            if missing:
                raise ConnectorError(ctx.source_file, f"columns missing for {self.name}: {', '.join(missing)}", line=header_line)
            if tuple(source_columns) not in headers_seen:
                # A mapped column the header lacks is most often a misspelling: its default (or nothing)
                # would stand in for every line unannounced, so the file's load says so; for each
                # header (a workbook's sheets have one each).
                later = " under it" if headers_seen else ""
                for field, column in self.columns.items():
                    if column not in frame.columns and column not in self.required:
                        near = _nearest_column(field, column, source_columns)
                        if field == "currency" and near:
                            # A default currency standing in for a misspelt column bills every line in
                            # the wrong currency (1,782,880 JPY read as USD): the file is refused.
                            raise ConnectorError(ctx.source_file, f"columns.currency: the header has no column {column!r} "
                                                 f"but has {near!r}; fix the mapping (its default currency would bill "
                                                 f"every line in it)", line=header_line)
                        fallback = f"its default {self.defaults[field]!r} is used" if field in self.defaults else "it is left empty"
                        hint = f" (did you mean {near!r}?)" if near else ""
                        ctx.warn(f"columns.{field}: {'a later' if later else 'the'} header has no column {column!r}{hint}; "
                                 f"{fallback} on every line{later}")
                headers_seen.add(tuple(source_columns))
            frame = frame.with_columns(pl.col(source_columns).str.strip_chars())
            frame = totals.set_aside(frame, source_columns, self._plain_number)
            frame = frame.with_columns(self._fields(frame))
            frame = frame.with_columns(
                parse_time("__f_start").alias("__start"),
                parse_decimal("__n_hours", 28, 10).alias("__hours"),
                parse_decimal("__n_amount", 38, 10).alias("__amount"),
                pl.col("__n_gpu_count").cast(pl.Int32, strict=False).alias("__gpus"),
                self.col("billing_mode").str.to_lowercase().replace_strict(self.mapping.mode_words(), default=None).alias("__mode"),
                # Usage unless the line says otherwise (credits, taxes, adjustments: charge_categories).
                pl.when(self.col("charge_category").fill_null("") == "").then(pl.lit("Usage")).otherwise(
                    self.col("charge_category").str.to_lowercase().replace_strict(self.mapping.category_words(), default=None))
                .alias("__category"),
            )
            if computed.end:  # end = start + hours, to the microsecond
                # Hours out of range get no end (and are quarantined below) rather than overflowing the clock.
                hours_us = pl.when(pl.col("__hours").abs() <= MAX_HOURS).then(
                    (pl.col("__hours").cast(pl.Float64) * 3_600_000_000).round().cast(pl.Int64, strict=False))
                frame = frame.with_columns((pl.col("__start") + pl.duration(microseconds=hours_us)).alias("__end"))
            else:
                end = parse_time("__f_end")
                if self.mapping.end_date_inclusive:  # a date alone is the last day billed: its next midnight, local
                    date_only = ~pl.col("__f_end").str.contains(r"\d:\d\d")
                    end = pl.when(date_only).then(
                        end.dt.convert_time_zone(timezone).dt.offset_by("1d").dt.convert_time_zone("UTC")).otherwise(end)
                frame = frame.with_columns(end.alias("__end"))
            if computed.hours:  # hours = end - start
                frame = frame.with_columns(
                    ((pl.col("__end") - pl.col("__start")).dt.total_microseconds().cast(pl.Decimal(38, 10))
                     / pl.lit(3_600_000_000).cast(pl.Decimal(38, 10))).cast(pl.Decimal(28, 10)).alias("__hours"))
            hours_reason = cell_reason("hours", self.col("hours"), "not a number")
            usage = pl.col("__category") == "Usage"
            # A credit, tax or adjustment need name no GPUs nor billing mode; a GPU count it gives is checked.
            no_gpu_count = pl.col("__gpus").is_null() & (usage | (self.col("gpu_count").fill_null("") != ""))
            reason = first_reason([
                (pl.col("__category").is_null(),
                 pl.format("charge category '{}' is not in the mapping", self.col("charge_category").fill_null(""))),
                (pl.col("__start").is_null(), cell_reason("start", self.col("start"), "not a time")),
                *([(pl.col("__hours").is_null(), hours_reason)] if computed.end else []),
                (pl.col("__end").is_null(), cell_reason("end", self.col("end"), "not a time")),
                (pl.col("__end") < pl.col("__start"), "end is before start"),
                (pl.col("__amount").is_null(), cell_reason("amount", self.col("amount"), "not a number")),
                (no_gpu_count | (pl.col("__gpus") < 0), pl.format("GPU count '{}' is not a whole number", self.col("gpu_count").fill_null(""))),
                # No invoice line covers a century or a million cards: past that a number is a typo, and
                # hours × cards would not fit a quantity.
                (pl.col("__hours").abs() > MAX_HOURS, pl.format("hours '{}' is out of range", short_value("__f_hours"))),
                # A usage line's hours are what its GPUs ran: never fewer than none (a credit's may be).
                (usage & (pl.col("__hours") < 0), pl.format("hours '{}' is negative", short_value("__f_hours"))),
                (pl.col("__gpus") > MAX_GPUS, pl.format("GPU count '{}' is out of range", short_value("__f_gpu_count"))),
                (pl.col("__mode").is_null() & (usage | (self.col("billing_mode").fill_null("") != "")),
                 pl.format("billing mode '{}' is not in the mapping", self.col("billing_mode").fill_null(""))),
                (~self._currency().is_in(ISO4217).fill_null(False),
                 pl.format("currency '{}' is not an ISO 4217 code", self._currency().fill_null(""))),
                *([] if computed.hours else [(failed("__f_hours", pl.col("__hours")), "hours is not a number")]),
                # An id, name or text cell holding a spreadsheet's error or a formula it never
                # computed would load as that text (an account '#N/A', keying a delivery).
                *((spreadsheet_error(pl.col(column)), pl.format(f"{field} '{{}}' is a spreadsheet's error, not a value",
                                                                short_value(column)))
                  for field, column in self.columns.items() if field in TEXT_FIELDS and column in frame.columns),
            ])
            totals.add_lines(frame["__amount"])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__amount"),
                                      currency=self._currency())
            rejected_here += frame.height - accepted.height
            if accepted.height:
                yield to_canonical(self._to_focus(accepted, timezone), self.schema, self.name, ctx)
        totals.add_unsplit_lines(len(ctx.quarantined) - quarantined_before - rejected_here)
        if warning := totals.disagreement():
            ctx.warn(warning)

    def _currency(self) -> pl.Expr:
        return self.col("currency").str.to_uppercase()

    def _to_focus(self, frame: pl.DataFrame, timezone: str) -> pl.DataFrame:
        get = self.col
        hours = pl.col("__hours")
        unit_price = parse_decimal("__n_unit_price", 28, 12)
        provider = self.col("provider")
        currency = self._currency()
        # Invoices name no billing period: it is the calendar month of the charge in the zone its
        # times are read in (the mapping's, else --timezone), so a re-exported month restates the
        # earlier export.
        month = pl.col("__start").dt.convert_time_zone(timezone).dt.truncate("1mo")
        period_start = month.dt.convert_time_zone("UTC")
        period_end = month.dt.offset_by("1mo").dt.convert_time_zone("UTC")
        usage = pl.col("__category") == "Usage"

        def for_usage(expr: pl.Expr) -> pl.Expr:
            """`expr` on a usage line; null on a credit, tax or adjustment (FOCUS: no quantity, unit
            price or pricing category outside usage)."""
            return pl.when(usage).then(expr)

        pricing = pl.col("__mode").replace_strict({m: p for m, (p, _) in PRICING.items()}, default="Other")
        frequency = pl.col("__mode").replace_strict({m: f for m, (_, f) in PRICING.items()}, default="Usage-Based")
        card_hours = hours * pl.col("__gpus").cast(pl.Decimal(28, 10))
        return frame.select(
            pl.col("__amount").alias("BilledCost"), pl.col("__amount").alias("EffectiveCost"), pl.col("__amount").alias("x_SourceCost"),
            pl.coalesce(for_usage(card_hours * unit_price).cast(pl.Decimal(38, 10), strict=False), pl.col("__amount")).alias("ListCost"),
            currency.alias("BillingCurrency"), get("account_id").alias("BillingAccountId"), get("account_id").alias("SubAccountId"),
            pl.col("__category").alias("ChargeCategory"),
            pl.when(usage).then(frequency).otherwise(pl.lit("One-Time")).alias("ChargeFrequency"),
            for_usage(pricing).alias("PricingCategory"),
            pl.col("__start").alias("ChargePeriodStart"), pl.col("__end").alias("ChargePeriodEnd"),
            period_start.alias("BillingPeriodStart"), period_end.alias("BillingPeriodEnd"),
            pl.when(usage).then(pl.format("{}x {} {}", pl.col("__gpus"), get("gpu_model"), pl.col("__mode")))
            .otherwise(pl.format("{} ({})", pl.col("__category"), get("charge_category"))).alias("ChargeDescription"),
            for_usage(card_hours).alias("ConsumedQuantity"), for_usage(pl.lit("GPU-Hours")).alias("ConsumedUnit"),
            for_usage(card_hours).alias("PricingQuantity"), for_usage(pl.lit("GPU-Hours")).alias("PricingUnit"),
            for_usage(unit_price).alias("ListUnitPrice"), for_usage(unit_price).alias("ContractedUnitPrice"),
            get("invoice_id").alias("InvoiceId"), provider.alias("ProviderName"), provider.alias("PublisherName"),
            provider.alias("InvoiceIssuerName"), get("region").alias("RegionId"), get("region").alias("RegionName"),
            get("resource_id").alias("ResourceId"), get("resource_name").alias("ResourceName"),
            pl.lit("GPU instance").alias("ResourceType"), pl.lit("Compute").alias("ServiceCategory"),
            pl.lit("GPU Instances").alias("ServiceName"),
            for_usage(pl.concat_str(gpu_model_expr(get("gpu_model")), pl.lit("-"), pl.col("__mode"))).alias("SkuId"),
            gpu_model_expr(get("gpu_model")).alias("x_GpuModel"), pl.col("__gpus").alias("x_GpuCount"),
            pl.struct([pl.col(c) for c in frame.columns if c not in self.columns.values() and not c.startswith("__") and c != ROW_NUMBER]
                      or [pl.lit(None).alias("none")]).struct.json_encode().alias("x_ExtraColumns"),
            ROW_NUMBER,
        )


# What Excel writes in a cell whose formula failed, and what a workbook's formula it never computed
# reads as (connectors/_spreadsheet.py): no value, in a CSV exported from Excel too.
SPREADSHEET_ERRORS = ("#NULL!", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#N/A", "#GETTING_DATA", "#SPILL!",
                      "#CALC!", "#FIELD!", "#BLOCKED!", "#CONNECT!", "#BUSY!", "#UNKNOWN!")


# The fields a spreadsheet's error would load as text (ids keying deliveries, names, labels); the
# others are parsed, and an error in them is no number or time (an optional unit price is tolerated).
TEXT_FIELDS = ("provider", "invoice_id", "account_id", "resource_id", "resource_name", "region", "gpu_model")


def spreadsheet_error(cell: pl.Expr) -> pl.Expr:
    text = cell.str.strip_chars()
    return (text.str.to_uppercase().is_in(SPREADSHEET_ERRORS) | text.str.starts_with(NOT_COMPUTED)).fill_null(False)


class TotalRows:
    """An invoice's own total rows (`total_rows:` in the mapping), kept apart from its lines.

    A row whose first non-empty cell is one of the mapping's words is the invoice's sum, not a
    charge: loading it would count the money twice, and quarantining it would call it money not
    loaded. Its amount is checked instead: the file's lines (loaded and quarantined) add up to its
    last total row (a grand total under subtotals) or to all of them together (one per section or
    currency); otherwise the file's load warns with both sums, since lines may be missing."""

    def __init__(self, words: list[str], amount_column: str, start_column: str):
        self.words = words
        self.amount_column = amount_column
        self.start_column = start_column
        # (row under the header, amount, the cell as written, where a workbook's row is: `sheet 'S' row 9`)
        self.stated: list[tuple[int, Decimal | None, str, str | None]] = []
        self.lines_sum = Decimal(0)
        self.unreadable_lines = 0

    def set_aside(self, frame: pl.DataFrame, source_columns: list[str], plain_number) -> pl.DataFrame:
        """The frame without its total rows, whose amounts are kept."""
        if not self.words:
            return frame
        def word(cell: pl.Expr) -> pl.Expr:
            return cell.str.strip_chars_end(":\uff1a").str.strip_chars().str.to_lowercase()

        first_cell = pl.coalesce([pl.when(pl.col(c) != "").then(pl.col(c)) for c in source_columns])
        # A line states when its charge starts; a total row does not (or has its word there).
        start = pl.col(self.start_column) if self.start_column in frame.columns else pl.lit(None, pl.String)
        no_start = start.is_null() | (start == "") | word(start).is_in(self.words)
        is_total = (word(first_cell).is_in(self.words) & no_start).fill_null(False)
        found = frame.filter(is_total)
        if found.height:
            amount = pl.col(self.amount_column) if self.amount_column in frame.columns else pl.lit(None, pl.String)
            where = pl.col(WHERE) if WHERE in frame.columns else pl.lit(None, pl.String)
            read = found.select(ROW_NUMBER, amount.alias("__text"), plain_number(amount).alias("__plain"), where.alias("__at")) \
                .with_columns(parse_decimal("__plain", 38, 10).alias("__stated"))
            self.stated += list(read.select(ROW_NUMBER, "__stated", "__text", "__at").iter_rows())
        return frame.filter(~is_total)

    def add_lines(self, amounts: pl.Series) -> None:
        self.lines_sum = money_sum([self.lines_sum, amounts.sum()])
        self.unreadable_lines += amounts.null_count()

    def add_unsplit_lines(self, count: int) -> None:
        """Lines the reader quarantined itself (more fields than the header): no amount is read."""
        self.unreadable_lines += count

    def disagreement(self) -> str | None:
        """A warning when the lines do not add up to what the total rows state; None when they do."""
        if not self.stated:
            return None
        many = len(self.stated) > 1
        if all(at for *_, at in self.stated):  # a workbook's: the sheet and the row Excel shows
            where = f"the total row{'s' if many else ''} ({', '.join(at for *_, at in self.stated)})"
        else:
            rows = ", ".join(str(row) for row, *_ in self.stated)
            where = f"the total row{'s' if many else ''} (row{'s' if many else ''} {rows} under the header)"
        unread = [text or "" for _, amount, text, _ in self.stated if amount is None]
        if unread:
            quoted = unread[0] if len(unread[0]) <= 40 else unread[0][:40] + "…"
            return (f"{where}: amount {quoted!r} is not a number, so the file's lines are not checked "
                    "against what it states")
        last, together = self.stated[-1][1], money_sum(amount for _, amount, *_ in self.stated)
        if self.lines_sum in (last, together):
            return None
        stated = f"state {_plain(last)} (the last) and {_plain(together)} (together)" if many else f"states {_plain(last)}"
        unread_lines = (f" ({self.unreadable_lines} line{'s' if self.unreadable_lines > 1 else ''} whose amount "
                        "could not be read left out)") if self.unreadable_lines else ""
        return (f"{where} {stated}, but the file's lines add up to {_plain(self.lines_sum)}{unread_lines}: "
                "lines may be missing from the file")


def _plain(amount: Decimal) -> str:
    """An amount as the invoice would write it: no exponent, no trailing zeros past the cents."""
    text = format(amount.normalize(), "f")
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


class InvalidMapping(Connector):
    """A mapping file that failed its schema check: listed by `finops connectors` with its error,
    reported by a run, and never claims a file."""

    kind = "billing"

    def __init__(self, error: MappingError, path: Path | None = None):
        self.error = error
        self.path = path
        self.name = error.name or f"invalid:{Path(error.source).name}"
        self.recognises = f"nothing, INVALID mapping: {error}"

    def detect(self, path: Path, head: bytes) -> bool:
        return False

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        raise ConnectorError(ctx.source_file, str(self.error))


def mapping_paths() -> list[Path]:
    """The bundled mappings, then those in the folders (or files) FINOPS_MAPPINGS names,
    separated by the platform's path separator; each folder's *.yaml / *.yml in name order."""
    paths = sorted(MAPPINGS_DIR.glob("*.yaml"))
    for entry in filter(None, os.environ.get(USER_MAPPINGS_ENV, "").split(os.pathsep)):
        place = Path(entry).expanduser()
        paths += sorted([*place.glob("*.yaml"), *place.glob("*.yml")]) if place.is_dir() else [place]
    return paths


def mapping_connectors(paths: list[Path] | None = None) -> list[GpuRentalConnector | InvalidMapping]:
    """One connector per mapping file. An invalid file, or one reusing another's name, becomes an
    InvalidMapping carrying its one-line error, so it cannot take the listing or a run down."""
    found: list[GpuRentalConnector | InvalidMapping] = []
    names: dict[str, str] = {}
    for path in mapping_paths() if paths is None else paths:
        try:
            connector = GpuRentalConnector.from_file(path)
            if connector.name in names:
                raise MappingError(connector.source, f"name: '{connector.name}' is already used by {names[connector.name]}")
        except MappingError as exc:
            found.append(InvalidMapping(exc if exc.name not in names else MappingError(exc.source, exc.message), path))
            continue
        names[connector.name] = connector.source
        found.append(connector)
    return found


def invalid_mappings(connectors) -> list[InvalidMapping]:
    return [c for c in connectors if isinstance(c, InvalidMapping)]


def _nearest_column(field: str, column: str, header: list[str]) -> str | None:
    """The header's column a mapping most likely meant by a `column` the header lacks: one spelt
    nearly alike, or one named as the field itself (`currency`), ignoring case, spaces and marks."""
    def plain(name: str) -> str:
        return "".join(ch for ch in name.lower() if ch.isalnum())
    by_plain = {plain(c): c for c in header}
    for wanted in (plain(column), plain(field)):
        if wanted in by_plain:
            return by_plain[wanted]
    close = difflib.get_close_matches(plain(column), list(by_plain), n=1, cutoff=0.8)
    if close:
        return by_plain[close[0]]
    if field == "currency":  # 'Billing Currency', 'Curr', 'CCY': a currency column by any other name
        return next((c for p, c in by_plain.items() if "currenc" in p or p in ("cur", "curr", "ccy")), None)
    return None
