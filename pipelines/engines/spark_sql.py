"""DuckDB model SQL → Spark SQL, in one place.

`sql/` stays the one source of every model. For Spark, each model is parsed as DuckDB by SQLGlot,
then, in this order:

1. `sql/macros.sql` is expanded inline (`expand_macros`): the macro bodies are read from that file,
   so a macro is still written once. A one-row "let" subquery (focus_unit's body, transfer_path's
   per-provider branches) is flattened first, since Spark cannot run a correlated subquery without
   a FROM (its bound expressions are repeated where used).
2. The rewrites in `REWRITES` carry every DuckDB construct that SQLGlot's `write="spark"` leaves
   out or translates with other semantics; each says why.
3. Stars Spark cannot expand itself (`* REPLACE (...)`, `UNION ALL BY NAME`) are expanded with the
   column lists Spark's own analyzer resolves for the star's FROM clause (`expand_stars`).
4. SQLGlot writes Spark SQL; parameters stay bound (`$name` becomes Spark's `:name` marker).

Money stays exact by three session settings and one Spark SQL function (see `SPARK_CONF` and
`SPARK_FUNCTIONS`): DuckDB gives DECIMAL × DECIMAL the scale s1 + s2 and computes `/` in DOUBLE;
Spark's default (`allowPrecisionLoss`) cuts a product's scale to as little as 6 digits, so it is
turned off (a product then keeps s1 + s2, as in DuckDB, and an overflow fails instead of rounding),
every `/` is written as DOUBLE division (DuckDB's meaning), and DuckDB's HUGEINT `//` on money units
is `fin_idiv`, an exact truncating division on DECIMAL(38, 0) (Spark's own `div` returns a BIGINT
and wraps silently past 9.2·10^18).

Known differences, none in money: a DECIMAL zero inside an evidence JSON reads `0E-10` on Spark
(`0.0000000000` on DuckDB); DOUBLE sums (GPU-hours) may differ in their last bit, Spark adding in
another order; `printf`'s `%.0f` rounds a tie the Java way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import sqlglot
from sqlglot import exp, transforms
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator

SQL_DIR = Path(__file__).resolve().parent.parent.parent / "sql"

# Spark session settings the translation relies on (pipelines/engines/spark.py applies them).
SPARK_CONF = {
    # Day and minute boundaries in UTC, as DuckDB's sessions (SET TimeZone = 'UTC').
    "spark.sql.session.timeZone": "UTC",
    # DECIMAL × DECIMAL keeps the scale s1 + s2 (DuckDB's rule); the default would round a money
    # product to 6 decimals when the operands are wide.
    "spark.sql.decimalOperations.allowPrecisionLoss": "false",
    # Overflow and bad casts fail, as in DuckDB, instead of turning into NULL.
    "spark.sql.ansi.enabled": "true",
}

# Spark SQL functions the translation calls (temporary: created once per session). None today:
# fin_idiv is written inline, since Spark 4.3 refuses a SQL function inside a struct of an aggregate.
SPARK_FUNCTIONS: list[str] = []

# Columns the Spark engine adds to inputs and drops from results.
ROWID = "__rowid"  # DuckDB's rowid pseudo-column of a raw table, carried as a real column


# --------------------------------------------------------------------------------------------
# 1. Macros
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[str, ...]
    body: exp.Expression
    table: bool


def _flatten_let(body: exp.Expression) -> exp.Expression:
    """`(WITH s AS (SELECT e AS u) SELECT f(u) FROM s)` → `f(e)`: a one-row let binding."""
    select = body.this if isinstance(body, exp.Subquery) else body
    if not isinstance(select, exp.Select) or not select.args.get("with_") or len(select.expressions) != 1:
        return body
    ctes = select.args["with_"].expressions
    if len(ctes) != 1 or ctes[0].this.args.get("from_") is not None:
        return body
    bound = {e.alias: e.this for e in ctes[0].this.expressions}
    out = select.expressions[0].copy()
    return out.transform(lambda n: exp.paren(bound[n.name].copy()) if isinstance(n, exp.Column) and not n.table
                         and n.name in bound else n)


@cache
def load_macros(path: Path = SQL_DIR / "macros.sql") -> dict[str, Macro]:
    text = path.read_text()
    macros = {}
    for m in re.finditer(r"CREATE OR REPLACE MACRO (\w+)\(([^)]*)\) AS\s+(TABLE\b)?(.*?);[ \t]*(?=\n|\Z)", text, re.S):
        name, params, table, body = m.group(1).lower(), m.group(2), bool(m.group(3)), m.group(4)
        parsed = sqlglot.parse_one(body, read="duckdb")
        if not table:
            # A let subquery may also sit inside the body (transfer_path: one per provider branch).
            parsed = _flatten_let(parsed).transform(lambda n: _flatten_let(n) if isinstance(n, exp.Subquery) else n)
        macros[name] = Macro(name, tuple(p.strip() for p in params.split(",") if p.strip()), parsed, table)
    return macros


def expand_macros(tree: exp.Expression, macros: dict[str, Macro]) -> exp.Expression:
    """Inline every macro call (scalar and table macros), to a fixed point (macros call macros)."""

    def fn(node):
        if isinstance(node, exp.Anonymous) and node.name.lower() in macros and not macros[node.name.lower()].table:
            macro = macros[node.name.lower()]
            args = dict(zip(macro.params, node.expressions))
            body = macro.body.copy().transform(
                lambda n: exp.paren(args[n.name].copy()) if isinstance(n, exp.Column) and not n.table and n.name in args else n)
            return exp.paren(body)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) and node.this.name.lower() in macros:
            macro = macros[node.this.name.lower()]
            # A table's name as written (a CTE's, or schema.table)
            args = {p: a.sql(dialect="duckdb") for p, a in zip(macro.params, node.this.expressions)}
            body = macro.body.copy().transform(
                lambda n: exp.to_table(args[n.expressions[0].name]) if isinstance(n, exp.Anonymous)
                and n.name.lower() == "query_table" else n)
            body = body.transform(
                lambda n: exp.to_table(args[n.this.expressions[0].name]) if isinstance(n, exp.Table)
                and isinstance(n.this, exp.Anonymous) and n.this.name.lower() == "query_table" else n)
            return exp.Subquery(this=body, alias=node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(f"__{macro.name}")))
        return node

    for _ in range(10):
        before = tree.sql(dialect="duckdb")
        tree = tree.transform(fn)
        if tree.sql(dialect="duckdb") == before:
            return tree
    raise RuntimeError("macros nest deeper than 10 levels")


# --------------------------------------------------------------------------------------------
# 2. Rewrites: DuckDB constructs SQLGlot does not carry to Spark with the same meaning
# --------------------------------------------------------------------------------------------

def _fn(name: str, *args) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=[a if isinstance(a, exp.Expression) else exp.convert(a) for a in args])


def _is_utc(node) -> bool:
    return isinstance(node, exp.Literal) and node.is_string and node.this.upper() == "UTC"


def rw_utc(node):
    """timezone('UTC', ts) and `ts AT TIME ZONE 'UTC'` are identities: Spark's TIMESTAMP is an
    instant shown in the session zone, which is UTC (SPARK_CONF)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "timezone" and _is_utc(node.expressions[0]):
        return node.expressions[1]
    if isinstance(node, exp.AtTimeZone) and _is_utc(node.args.get("zone")):
        return node.this
    return node


def rw_hugeint(node):
    """HUGEINT (128-bit) is DECIMAL(38, 0) in Spark: the same exact integers (to 10^38)."""
    if isinstance(node, exp.DataType) and node.this in (exp.DataType.Type.INT128, exp.DataType.Type.UINT128):
        return exp.DataType.build("DECIMAL(38, 0)")
    return node


def rw_infinity(node):
    """'infinity'::TIMESTAMPTZ has no Spark twin; the largest timestamp compares the same way."""
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.this.lower() == "infinity":
        return exp.cast(exp.Literal.string("9999-12-31 23:59:59.999999"), "TIMESTAMP")
    return node


def _mentions_units(node) -> bool:
    """An operand in money units: it calls a units macro or casts to HUGEINT (after expansion:
    a DECIMAL(38, 0) cast)."""
    return any(isinstance(n, exp.DataType) and n.this in (exp.DataType.Type.INT128,) for n in node.walk()) or any(
        isinstance(n, exp.DataType) and n.this == exp.DataType.Type.DECIMAL and n.sql() in ("DECIMAL(38, 0)",)
        for n in node.walk())


def fin_idiv(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """DuckDB's HUGEINT `//`, exactly: truncation toward zero of a / b. DECIMAL(38,0) / DECIMAL(19,0)
    without precision loss is DECIMAL(38, 9), rounded half up, so its truncation can be one too far
    from zero when the fraction is within 5·10^-10 of 1; the product check moves it back. Exact for
    a divisor under 10^19 and a quotient under 10^29; beyond, the cast fails (never a wrong value).
    A zero divisor fails, as in DuckDB 2."""
    big_a = exp.cast(exp.paren(a.copy()), "DECIMAL(38, 0)")
    big_b = exp.cast(exp.paren(b.copy()), "DECIMAL(19, 0)")
    quotient = exp.Div(this=big_a.copy(), expression=big_b.copy())
    q = exp.cast(exp.If(this=exp.LT(this=quotient.copy(), expression=exp.Literal.number(0)),
                        true=exp.Ceil(this=quotient.copy()), false=exp.Floor(this=quotient.copy())), "DECIMAL(38, 0)")
    too_far = exp.GT(this=exp.Abs(this=exp.Mul(this=q.copy(), expression=big_b.copy())), expression=exp.Abs(this=big_a.copy()))
    # One step toward zero. Not sign(q): Spark's sign is a DOUBLE, which would turn the whole CASE
    # into a DOUBLE and round every quotient past 2^53.
    toward_zero = exp.If(this=exp.LT(this=q.copy(), expression=exp.Literal.number(0)),
                         true=exp.Add(this=q.copy(), expression=exp.Literal.number(1)),
                         false=exp.Sub(this=q.copy(), expression=exp.Literal.number(1)))
    fixed = exp.Case(ifs=[exp.If(this=too_far, true=toward_zero)], default=q.copy())
    fixed.meta["exact_division"] = True
    return exp.cast(exp.paren(fixed), "DECIMAL(38, 0)")


def rw_intdiv(node):
    """`//` on HUGEINT money units → fin_idiv (exact, truncating like DuckDB); on BIGINT → Spark's
    `div`, which truncates the same way (SQLGlot's default). Spark's own `div` on a DECIMAL returns
    a BIGINT and wraps silently past 9.2·10^18, so it never sees money units."""
    if isinstance(node, exp.IntDiv) and (_mentions_units(node.this) or _mentions_units(node.expression)):
        return fin_idiv(node.this, node.expression)
    return node


def _inside_exact_division(node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.meta.get("exact_division"):
            return True
        parent = parent.parent
    return False


def rw_div(node):
    """DuckDB computes `/` in DOUBLE (integers and DECIMALs alike); Spark would return a DECIMAL
    of its own precision for DECIMAL operands. The models divide only quantities and shares."""
    if isinstance(node, exp.Div) and not _inside_exact_division(node):
        return exp.Div(this=exp.cast(node.this, "DOUBLE"), expression=exp.cast(node.expression, "DOUBLE"))
    return node


def rw_window_filter(node):
    """`agg(x) FILTER (WHERE c) OVER w`: Spark has no FILTER on window aggregates; the condition
    moves into the argument (NULLs are skipped by every aggregate, count(*) counts a constant)."""
    if isinstance(node, exp.Window) and isinstance(node.this, exp.Filter):
        agg, cond = node.this.this, node.this.expression.this
        agg = agg.copy()
        arg = agg.this
        if isinstance(arg, exp.Star) or arg is None:
            agg.set("this", exp.If(this=cond.copy(), true=exp.Literal.number(1), false=exp.Null()))
        else:
            agg.set("this", exp.If(this=cond.copy(), true=arg.copy(), false=exp.Null()))
        node = node.copy()
        node.set("this", agg)
    return node


def rw_list_position(node):
    """list_position returns NULL when absent; Spark's array_position returns 0."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "list_position":
        return exp.Nullif(this=_fn("array_position", *node.expressions), expression=exp.Literal.number(0))
    return node


def rw_epoch_us(node):
    """epoch_us(ts) → unix_micros(ts)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "epoch_us":
        return _fn("unix_micros", node.expressions[0])
    return node


def rw_to_timestamp(node):
    """to_timestamp(seconds) → timestamp_seconds (SQLGlot goes through a formatted string)."""
    if isinstance(node, exp.UnixToTime) and not node.args.get("scale") and not node.args.get("format"):
        return _fn("timestamp_seconds", node.this)
    return node


def rw_to_minutes(node):
    """to_minutes(n) → an n-minute interval."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "to_minutes":
        return _fn("make_dt_interval", 0, 0, node.expressions[0], 0)
    return node


_DATEDIFF_MICROS = {"MICROSECOND": 1, "MILLISECOND": 1000, "SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000}


def rw_datediff(node):
    """DuckDB's datediff counts unit boundaries crossed; Spark's counts whole units elapsed (they
    differ when the times carry fractions). Sub-day units: the difference of floored epoch units."""
    if isinstance(node, exp.DateDiff):
        unit = (node.args.get("unit").name if node.args.get("unit") else "DAY").upper()
        if unit in _DATEDIFF_MICROS:
            size = exp.Literal.number(_DATEDIFF_MICROS[unit])
            end, start = node.this, node.expression
            return exp.paren(exp.Sub(this=exp.IntDiv(this=_fn("unix_micros", end), expression=size.copy()),
                                     expression=exp.IntDiv(this=_fn("unix_micros", start), expression=size.copy())))
    return node


def rw_json_object(node):
    """json_object(k, v, ...) → to_json(named_struct(...)), keeping nulls as DuckDB does."""
    if isinstance(node, exp.JSONObject):
        # struct(v AS k): named_struct's literal keys are refused inside an aggregate (Spark 4.3).
        fields = [exp.alias_(kv.expression, kv.this.this, quoted=True) for kv in node.expressions]
        return _fn("to_json", exp.Struct(expressions=fields), _fn("map", exp.Literal.string("ignoreNullFields"),
                                                                   exp.Literal.string("false")))
    return node


def rw_parse_json(node):
    """json(text) → parse_json(text): a JSON text nested in a json_object as JSON, not as a quoted
    string (Spark's generator drops the call; its to_json writes a VARIANT as the JSON it holds)."""
    if isinstance(node, exp.ParseJSON):
        return _fn("parse_json", node.this)
    return node


def _spark_json_path(path: exp.Expression) -> exp.Expression:
    """DuckDB's `$."key"` → Spark's `$['key']` (a literal, or '$."' || k || '"' built at run time)."""
    if isinstance(path, exp.Literal):
        return exp.Literal.string(re.sub(r'\."([^"]*)"', r"['\1']", path.this))
    parts = list(path.flatten()) if isinstance(path, exp.DPipe) else None
    if parts and len(parts) == 3 and isinstance(parts[0], exp.Literal) and parts[0].this == '$."' \
            and isinstance(parts[2], exp.Literal) and parts[2].this == '"':
        return exp.DPipe(this=exp.DPipe(this=exp.Literal.string("$['"), expression=parts[1]),
                         expression=exp.Literal.string("']"))
    return path


def rw_json_extract(node):
    """json_extract_string(j, path) → get_json_object(j, path) with the path in Spark's syntax."""
    if isinstance(node, (exp.JSONExtractScalar, exp.JSONExtract)):
        path = node.expression
        if isinstance(path, exp.JSONPath):
            return node  # a static path SQLGlot already carries
        return _fn("get_json_object", node.this, _spark_json_path(path))
    if isinstance(node, exp.Anonymous) and node.name.lower() == "json_extract_string":
        return _fn("get_json_object", node.expressions[0], _spark_json_path(node.expressions[1]))
    return node


def rw_try(node):
    """try(x): the functions it wraps (JSON extraction) already return NULL on bad input in Spark."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "try":
        return node.expressions[0]
    if type(node).__name__ == "Try":
        return node.this
    return node


def rw_quantile(node):
    """quantile_cont(x, q) → percentile(x, q): both interpolate linearly between exact ranks."""
    if isinstance(node, (exp.PercentileCont,)) and node.args.get("expression") is not None:
        return _fn("percentile", node.this, node.expression)
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("quantile_cont",):
        return _fn("percentile", *node.expressions)
    return node


def _compare_keys(keys: list[exp.Ordered]) -> exp.Lambda:
    """array_sort's comparator over structs (k0, k1, ..., v): each key in its direction, NULLs
    where DuckDB puts them (last, unless NULLS FIRST)."""
    ifs = []
    for i, k in enumerate(keys):
        left, right = (exp.Dot(this=exp.column(side), expression=exp.to_identifier(f"k{i}")) for side in ("l", "r"))
        first = -1 if k.args.get("nulls_first") else 1  # where a NULL key goes, against a non-NULL one
        sign = -1 if k.args.get("desc") else 1
        ifs += [
            exp.If(this=exp.and_(exp.Is(this=left.copy(), expression=exp.Null()), exp.Not(this=exp.Is(this=right.copy(), expression=exp.Null()))),
                   true=exp.Literal.number(first)),
            exp.If(this=exp.and_(exp.Not(this=exp.Is(this=left.copy(), expression=exp.Null())), exp.Is(this=right.copy(), expression=exp.Null())),
                   true=exp.Literal.number(-first)),
            exp.If(this=exp.LT(this=left.copy(), expression=right.copy()), true=exp.Literal.number(-sign)),
            exp.If(this=exp.GT(this=left.copy(), expression=right.copy()), true=exp.Literal.number(sign)),
        ]
    return exp.Lambda(this=exp.Case(ifs=ifs, default=exp.Literal.number(0)),
                      expressions=[exp.to_identifier("l"), exp.to_identifier("r")])


def rw_ordered_list(node):
    """list(x ORDER BY k) → the collected (k, x) pairs sorted, then x (Spark's collect_list has no
    order); a MAP built from it keeps DuckDB's entry order. Ascending keys sort as structs; any
    DESC key (findings.hidden_costs' details) sorts with a comparator (`_compare_keys`), NULLs
    last as in DuckDB. array_sort is stable: ties keep collect_list's order, as arbitrary as
    DuckDB's own for ties."""
    if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
        value, keys = node.this.this, node.this.expressions
        fields = []
        for i, k in enumerate(keys):
            fields += [exp.Literal.string(f"k{i}"), k.this]
        fields += [exp.Literal.string("v"), value]
        collected = _fn("collect_list", _fn("named_struct", *fields))
        if any(k.args.get("desc") for k in keys):
            sorted_ = _fn("array_sort", collected, _compare_keys(keys))
        else:
            sorted_ = _fn("array_sort", collected)
        lam = exp.Lambda(this=exp.Dot(this=exp.column("s"), expression=exp.to_identifier("v")),
                         expressions=[exp.to_identifier("s")])
        return _fn("transform", sorted_, lam)
    return node


def rw_distinct_string_agg(node):
    """string_agg(DISTINCT x, sep ORDER BY x) → the sorted set of x, joined (NULL when there is
    none, as string_agg). Spark 4.3's LISTAGG(DISTINCT ...) WITHIN GROUP fails in its optimizer
    (RewriteDistinctAggregates: ClassCastException) beside other DISTINCT aggregates
    (findings.hidden_costs). Only this form: the order key is the value itself, ascending."""
    if isinstance(node, exp.GroupConcat) and isinstance(node.this, exp.Order) and isinstance(node.this.this, exp.Distinct):
        values, keys = node.this.this.expressions, node.this.expressions
        if len(values) == 1 and len(keys) == 1 and keys[0].this == values[0] and not keys[0].args.get("desc"):
            found = _fn("collect_set", values[0].copy())
            sep = node.args.get("separator") or exp.Literal.string(",")
            return exp.Case(ifs=[exp.If(this=exp.EQ(this=_fn("size", found.copy()), expression=exp.Literal.number(0)),
                                        true=exp.Null())],
                            default=_fn("array_join", _fn("array_sort", found), sep))
    return node


def rw_json_list(node):
    """to_json(list(json_object(...))): DuckDB nests the objects (`[{...},{...}]`); Spark's to_json
    of an array of JSON texts would quote each one. The texts are joined into the array instead.
    Runs before the json_object and list rewrites, which then make the texts and their order."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "to_json" and len(node.expressions) == 1 \
            and isinstance(node.expressions[0], exp.ArrayAgg):
        agg = node.expressions[0]
        value = agg.this.this if isinstance(agg.this, exp.Order) else agg.this
        if isinstance(value, exp.JSONObject):
            return _fn("concat", exp.Literal.string("["), _fn("array_join", agg, exp.Literal.string(",")),
                       exp.Literal.string("]"))
    return node


def rw_generate_series_table(node):
    """generate_series(a, b, step) AS g(h) in FROM → unnest of the (inclusive) series."""
    if isinstance(node, exp.Table) and isinstance(node.this, (exp.GenerateSeries, exp.Anonymous)) and \
            (isinstance(node.this, exp.GenerateSeries) or node.this.name.lower() == "generate_series"):
        return exp.Unnest(expressions=[node.this], alias=node.args.get("alias"))
    return node


def rw_rowid(node):
    """DuckDB's rowid pseudo-column: the Spark engine exports it as a real column (ROWID)."""
    if isinstance(node, exp.Column) and node.name.lower() == "rowid":
        return exp.column(ROWID, table=node.table or None)
    return node


def rw_string_slice(node):
    """DuckDB strings index from 1 (s[1], s[2:]); the models index only strings. SQLGlot has already
    moved a single index to 0-based. A map lookup (`(SELECT keys FROM model_keys)[name]`, core.gpu_minutes:
    a scalar subquery or a map function indexed) is try_element_at: NULL for a key not there, as in DuckDB."""
    if isinstance(node, exp.Bracket):
        (index,) = node.expressions
        target = _unparen(node.this)
        if isinstance(target, exp.Subquery) or isinstance(target, (exp.Map, exp.MapFromEntries)) or \
                (isinstance(target, exp.Anonymous) and target.name.lower().startswith("map")):
            if isinstance(index, exp.Slice):
                raise NotImplementedError("slice of a map")
            return _fn("try_element_at", node.this, index)
        if isinstance(index, exp.Slice):
            start = index.this or exp.Literal.number(1)
            if index.expression is not None:
                raise NotImplementedError("string slice with an end")
            return exp.Substring(this=node.this, start=start)
        return exp.Substring(this=node.this, start=exp.Add(this=index, expression=exp.Literal.number(1)),
                             length=exp.Literal.number(1))
    return node


def rw_regexp(node):
    """regexp_full_match(s, p) → s RLIKE '^(?:p)$'. regexp_replace: DuckDB replaces the first match
    unless 'g'; Spark replaces all, so a pattern without 'g' must be anchored (one match at most)."""
    if type(node).__name__ == "RegexpFullMatch" or isinstance(node, exp.Anonymous) and node.name.lower() == "regexp_full_match":
        s, p = node.expressions if isinstance(node, exp.Anonymous) else (node.this, node.expression)
        return exp.RegexpLike(this=s, expression=exp.Literal.string(f"^(?:{p.this})$"))
    if isinstance(node, exp.RegexpReplace):
        mods = node.args.get("modifiers")
        if mods is None or "g" not in mods.this:
            pattern = node.expression.this if isinstance(node.expression, exp.Literal) else ""
            if not (pattern.startswith("^") or pattern.endswith("$")):
                raise NotImplementedError(f"regexp_replace without 'g' of an unanchored pattern {pattern!r}")
        return exp.RegexpReplace(this=node.this, expression=node.expression, replacement=node.args["replacement"])
    return node


_STRFTIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss"}


def rw_strftime(node):
    """strftime → date_format with literal text quoted ('T', 'Z', ' UTC')."""
    if isinstance(node, exp.TimeToStr) and isinstance(node.args.get("format"), exp.Literal):
        fmt, out, text = node.args["format"].this, [], []
        i = 0
        while i < len(fmt):
            if fmt[i:i + 2] in _STRFTIME:
                if text:
                    out.append("'" + "".join(text).replace("'", "''") + "'")
                    text = []
                out.append(_STRFTIME[fmt[i:i + 2]])
                i += 2
            elif fmt[i] in "-:. /" :
                out.append(fmt[i])
                i += 1
            else:
                text.append(fmt[i])
                i += 1
        if text:
            out.append("'" + "".join(text).replace("'", "''") + "'")
        return _fn("date_format", node.this, exp.Literal.string("".join(out)))
    return node


def _literal_text(node) -> str | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    if isinstance(node, exp.DPipe):
        parts = [_literal_text(p) for p in (node.this, node.expression)]
        return None if None in parts else "".join(parts)
    if isinstance(node, exp.Paren):
        return _literal_text(node.this)
    return None


def rw_printf(node):
    """printf: Java's formatter wants %d arguments integral and %f/%g floating (a DECIMAL fails),
    so each argument is cast to what its conversion expects."""
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("printf", "format"):
        fmt = _literal_text(node.expressions[0])
        if fmt is None:
            return node
        specs = list(re.finditer(r"%[-+ 0#]*\d*(?:\.(\d+))?([a-zA-Z%])", fmt))
        specs = [m for m in specs if m.group(2) != "%"]
        args = list(node.expressions[1:])
        for i, m in enumerate(specs[:len(args)]):
            conv = m.group(2)
            if conv == "d":
                args[i] = exp.cast(args[i], "BIGINT")
            elif conv in "gG":
                # C's %g drops trailing zeros (3.0 → "3"); Java's keeps them ("3.00000").
                digits = m.group(1) or "6"
                text = _fn("format_string", exp.Literal.string(f"%.{digits}g"), exp.cast(args[i], "DOUBLE"))
                text = _fn("regexp_replace", text, exp.Literal.string(r"(\.\d*?)0+(e|$)"), exp.Literal.string("$1$2"))
                args[i] = _fn("regexp_replace", text, exp.Literal.string(r"\.(e|$)"), exp.Literal.string("$1"))
            elif conv in "feFE":
                args[i] = exp.cast(args[i], "DOUBLE")
        # %g is now text: the rewritten argument is a string.
        fmt = re.sub(r"%[-+ 0#]*\d*(?:\.\d+)?[gG]", "%s", fmt)
        return _fn("format_string", exp.Literal.string(fmt), *args)
    return node


def rw_first_match_subquery(node):
    """(SELECT e FROM unnest(list) AS t(k) WHERE c LIMIT 1): Spark cannot correlate a subquery over
    a generator; the first k of the list that meets c, in list order, by higher-order functions."""
    if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
        return node
    sel = node.this
    source = sel.args.get("from_")
    limit = sel.args.get("limit")
    if source is None or not isinstance(source.this, exp.Unnest) or limit is None or sel.args.get("joins") \
            or len(sel.expressions) != 1 or limit.expression.name != "1":
        return node
    unnest = source.this
    alias = unnest.args.get("alias")
    var = alias.columns[0].name if alias and alias.columns else "unnest"
    table = alias.name if alias else None
    value = sel.expressions[0].unalias()
    cond = sel.args.get("where").this if sel.args.get("where") else exp.true()

    def local(n):
        if isinstance(n, exp.Column) and n.name == var and (not n.table or n.table == table):
            return exp.to_identifier(var)
        return n

    value, cond = value.copy().transform(local), cond.copy().transform(local)
    picked = exp.Lambda(this=exp.If(this=cond, true=exp.Struct(expressions=[exp.alias_(value, "v")]), false=exp.Null()),
                        expressions=[exp.to_identifier(var)])
    kept = exp.Lambda(this=exp.Not(this=exp.Is(this=exp.to_identifier("__x"), expression=exp.Null())),
                      expressions=[exp.to_identifier("__x")])
    first = _fn("get", _fn("filter", _fn("transform", unnest.expressions[0], picked), kept), 0)
    return exp.Dot(this=exp.paren(first), expression=exp.to_identifier("v"))


def rw_asof(select):
    """ASOF LEFT JOIN b ON <equalities> AND b.d <= <expr>: the last b row at or before <expr>.
    Each b row gets the day before its successor's (lead over the equality columns of b), so the
    join is an ordinary LEFT JOIN on `b.d <= expr < next d`: at most one b row per left row."""
    if not isinstance(select, exp.Select):
        return select
    for join in select.args.get("joins") or []:
        if (join.args.get("method") or "").upper() != "ASOF":
            continue
        right = join.this
        alias = right.alias_or_name
        conds = list(join.args["on"].flatten()) if isinstance(join.args["on"], exp.And) else [join.args["on"]]
        keys, bound = [], None
        for c in conds:
            cols = [n for n in c.find_all(exp.Column) if n.table == alias]
            if isinstance(c, exp.EQ):
                keys += [n.name for n in cols]
            elif isinstance(c, (exp.LTE, exp.GTE)) and bound is None:
                bound = c
            else:
                raise NotImplementedError(f"ASOF condition {c.sql()}")
        if bound is None:
            raise NotImplementedError("ASOF join without an inequality")
        if isinstance(bound, exp.LTE):
            right_col, left_expr = bound.this, bound.expression
        else:
            right_col, left_expr = bound.expression, bound.this
        if not (isinstance(right_col, exp.Column) and right_col.table == alias):
            raise NotImplementedError("ASOF inequality must be <right>.col <= <left expr>")
        window = exp.Window(this=exp.Anonymous(this="lead", expressions=[exp.column(right_col.name)]),
                            partition_by=[exp.column(k) for k in keys],
                            order=exp.Order(expressions=[exp.Ordered(this=exp.column(right_col.name))]))
        source = exp.Table(this=right.this.copy(), db=right.args.get("db"), catalog=right.args.get("catalog"))
        inner = exp.select(exp.Star(), exp.alias_(window, "__asof_next")).from_(source)
        sub = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        upper = exp.Or(this=exp.Is(this=exp.column("__asof_next", table=alias), expression=exp.Null()),
                       expression=exp.LT(this=left_expr.copy(), expression=exp.column("__asof_next", table=alias)))
        join.set("this", sub)
        join.set("method", None)
        join.set("on", exp.and_(join.args["on"], exp.paren(upper)))
    return select


WAREHOUSE_SCHEMAS = ("raw", "core", "marts", "findings")


def view_name(table: str) -> str:
    """The Spark temp view of a warehouse table: `core.cost_lines` → `core__cost_lines` (temp
    views are not schema-qualified, and need no catalog on a shared cluster)."""
    return table.replace(".", "__")


def rw_tables(node):
    """core.cost_lines → the temp view core__cost_lines."""
    if isinstance(node, exp.Table) and node.args.get("db") is not None and node.db.lower() in WAREHOUSE_SCHEMAS:
        return exp.Table(this=exp.to_identifier(view_name(f"{node.db}.{node.name}")), alias=node.args.get("alias"))
    if isinstance(node, exp.Column) and node.args.get("db") is not None and node.db.lower() in WAREHOUSE_SCHEMAS:
        return exp.column(node.name, table=view_name(f"{node.db}.{node.table}"))
    return node


def referenced_tables(tree: exp.Expression) -> set[str]:
    """The warehouse tables a model reads (schema.table), a table macro's argument included."""
    tree = expand_macros(tree.copy(), load_macros())
    return {f"{t.db}.{t.name}".lower() for t in tree.find_all(exp.Table)
            if t.args.get("db") is not None and t.db.lower() in WAREHOUSE_SCHEMAS}


def rw_json_valid(node):
    """json_valid(s) → whether Spark parses s as JSON (NULL stays NULL)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "json_valid" or type(node).__name__ == "IsJSON":
        arg = node.expressions[0] if isinstance(node, exp.Anonymous) else node.this
        return exp.Case(ifs=[exp.If(this=exp.Is(this=arg.copy(), expression=exp.Null()), true=exp.Null())],
                        default=exp.Not(this=exp.Is(this=_fn("try_parse_json", arg.copy()), expression=exp.Null())))
    return node


def _unparen(node):
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def rw_date_minus(node):
    """DATE − DATE is a number of days in DuckDB, an INTERVAL in Spark: datediff. The models
    subtract dates only as utc_day(ts) − a date column. DATE − a number of days is a date in both."""
    if isinstance(node, exp.Sub) and not (isinstance(node.expression, exp.Literal) and node.expression.is_number):
        left = _unparen(node.this)
        if isinstance(left, (exp.Cast, exp.TryCast)) and left.to.this == exp.DataType.Type.DATE:
            return _fn("datediff", node.this, node.expression)
    return node


def rw_cte_materialized(node):
    """A CTE's [NOT] MATERIALIZED hint (DuckDB keeps a CTE read twice in memory unless told not
    to): Spark has no such syntax, and plans each reference of a CTE on its own anyway."""
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    return node


# (name, rewrite). Order matters only where noted: macros are already expanded; `rw_div` runs
# after the rewrites that build divisions of their own (marked so it leaves them alone).
REWRITES: list[tuple[str, Callable]] = [
    ("tables", rw_tables),
    ("utc identities", rw_utc),
    ("asof join", rw_asof),
    ("rowid", rw_rowid),
    ("hugeint", rw_hugeint),
    ("infinity", rw_infinity),
    ("window filter", rw_window_filter),
    ("list_position", rw_list_position),
    ("epoch_us", rw_epoch_us),
    ("to_timestamp", rw_to_timestamp),
    ("to_minutes", rw_to_minutes),
    ("to_json(list(json_object))", rw_json_list),
    ("json(text)", rw_parse_json),
    ("json_object", rw_json_object),
    ("json_extract_string", rw_json_extract),
    ("json_valid", rw_json_valid),
    ("date - date", rw_date_minus),
    ("CTE [NOT] MATERIALIZED", rw_cte_materialized),
    ("try", rw_try),
    ("quantile_cont", rw_quantile),
    ("list ORDER BY", rw_ordered_list),
    ("string_agg(DISTINCT x ORDER BY x)", rw_distinct_string_agg),
    ("generate_series in FROM", rw_generate_series_table),
    ("string slices", rw_string_slice),
    ("regexp", rw_regexp),
    ("strftime", rw_strftime),
    ("printf", rw_printf),
    ("first-match subquery", rw_first_match_subquery),
    ("money //", rw_intdiv),
    ("datediff", rw_datediff),
    ("/ in DOUBLE", rw_div),
]


def transform_up(node: exp.Expression, fn: Callable) -> exp.Expression:
    """Apply `fn` children first (SQLGlot's transform stops below a replaced node, so a division
    inside a division would keep DuckDB's meaning)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, transform_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [transform_up(v, fn) if isinstance(v, exp.Expression) else v for v in value])
    return fn(node)


def rewrite(tree: exp.Expression) -> exp.Expression:
    for _name, rule in REWRITES:
        tree = transform_up(tree, rule)
    return tree


# --------------------------------------------------------------------------------------------
# 3. Stars Spark does not expand, resolved with Spark's own analyzer
# --------------------------------------------------------------------------------------------

# Spark's analysis of a query: its columns as (name, Spark type name), nothing run.
ColumnsOf = Callable[[str], list[tuple[str, str]]]


def _visible_ctes(node: exp.Expression) -> list[exp.CTE]:
    """The CTEs a node may reference: those of every enclosing WITH, defined before the node."""
    ancestors, parent = [], node
    while parent is not None:
        ancestors.append(parent)
        parent = parent.parent
    ids = {id(a) for a in ancestors}
    chain = []
    for a in ancestors[1:]:
        if a.args.get("with_") is not None:
            ctes = a.args["with_"].expressions
            inside = next((i for i, c in enumerate(ctes) if id(c) in ids), None)
            chain = [c.copy() for c in (ctes[:inside] if inside is not None else ctes)] + chain
    return chain


def _in_context(context: exp.Expression, query: exp.Expression) -> exp.Select:
    """SELECT * over `query` with the CTEs visible at `context`."""
    probe = exp.select(exp.Star()).from_(exp.Subquery(this=query.copy(), alias=exp.TableAlias(this=exp.to_identifier("__p"))))
    ctes = _visible_ctes(context)
    if ctes:
        probe.set("with_", exp.With(expressions=ctes))
    return probe


def _probe(select: exp.Select, star: exp.Expression) -> exp.Select:
    probe = exp.Select(expressions=[star])
    for key in ("from_", "joins", "laterals"):
        if select.args.get(key) is not None:
            probe.set(key, select.args[key].copy() if not isinstance(select.args[key], list)
                      else [j.copy() for j in select.args[key]])
    ctes = _visible_ctes(select)
    if select.args.get("with_") is not None:  # a query's own CTEs are visible to its FROM
        ctes += [c.copy() for c in select.args["with_"].expressions]
    if ctes:
        probe.set("with_", exp.With(expressions=ctes))
    return probe


def _columns(node: exp.Expression, columns_of: ColumnsOf) -> list[str]:
    return [name for name, _ in columns_of(to_spark_text(node))]


def duckdb_timestamptz_text(ts: exp.Expression) -> exp.Expression:
    """A TIMESTAMPTZ as DuckDB writes it in UTC: '2026-10-01 00:00:00+00', fractions without
    trailing zeros ('…:00.5+00'), so ids hashed from it are the same on both engines."""
    micros = _fn("pmod", _fn("unix_micros", ts.copy()), 1_000_000)
    fraction = exp.Case(ifs=[exp.If(this=exp.EQ(this=micros.copy(), expression=exp.Literal.number(0)), true=exp.Literal.string(""))],
                        default=_fn("regexp_replace", _fn("concat", exp.Literal.string("."),
                                                          _fn("lpad", exp.cast(micros.copy(), "STRING"), 6, "0")),
                                    exp.Literal.string("0+$"), exp.Literal.string("")))
    return _fn("concat", _fn("date_format", ts.copy(), exp.Literal.string("yyyy-MM-dd HH:mm:ss")), fraction,
               exp.Literal.string("+00"))


def _text_casts(select: exp.Select, columns_of: ColumnsOf) -> None:
    """CAST(<timestamp column> AS VARCHAR): Spark writes no zone suffix; DuckDB's text is kept."""
    for cast in list(select.find_all(exp.Cast)):
        if cast.to.this not in (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT) or not isinstance(cast.this, exp.Column):
            continue
        owner = cast.parent
        while owner is not None and not isinstance(owner, exp.Select):
            owner = owner.parent
        if owner is not select:
            continue
        types = columns_of(to_spark_text(_probe(select, cast.this.copy())))
        if types and types[0][1] == "timestamp":
            cast.replace(duckdb_timestamptz_text(cast.this))


def expand_stars(tree: exp.Expression, columns_of: ColumnsOf) -> exp.Expression:
    """Expand `* REPLACE (...)` (and the EXCLUDE beside it), and turn `UNION ALL BY NAME` into a
    positional UNION ALL of the left side's columns, innermost first."""

    def visit(node):
        # children first, in document order, so a CTE is resolved before the CTEs that read it
        for child in list(node.iter_expressions()):
            visit(child)
        if isinstance(node, exp.Select):
            _text_casts(node, columns_of)
            new = []
            changed = False
            for e in node.expressions:
                if isinstance(e, (exp.Star, exp.Column)) and (e.args.get("replace") or
                                                             (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
                                                              and e.this.args.get("replace"))):
                    star = e if isinstance(e, exp.Star) else e.this
                    table = e.table if isinstance(e, exp.Column) else None
                    plain = exp.Star() if table is None else exp.Column(this=exp.Star(), table=exp.to_identifier(table))
                    names = _columns(_probe(node, plain), columns_of)
                    excluded = {c.name.lower() for c in (star.args.get("except_") or [])}
                    replaced = {r.alias.lower(): r for r in star.args.get("replace") or []}
                    for name in names:
                        if name.lower() in excluded:
                            continue
                        if name.lower() in replaced:
                            new.append(replaced[name.lower()].copy())
                        else:
                            new.append(exp.column(name, table=table, quoted=True))
                    changed = True
                else:
                    new.append(e)
            if changed:
                node.set("expressions", new)
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            left = _columns(_in_context(node.left, node.left), columns_of)
            right_cols = {c.lower() for c in _columns(_in_context(node.right, node.right), columns_of)}
            right = node.right
            sub = exp.Subquery(this=right.copy(), alias=exp.TableAlias(this=exp.to_identifier("__by_name")))
            proj = [exp.column(c, table="__by_name", quoted=True) if c.lower() in right_cols
                    else exp.alias_(exp.Null(), c, quoted=True) for c in left]
            node.set("expression", exp.select(*proj).from_(sub))
            node.set("by_name", None)
        return node

    visit(tree)
    return tree


# --------------------------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------------------------

class Spark4(Spark):
    """SQLGlot's Spark dialect, keeping QUALIFY: Spark 3.5+ runs it natively, and SQLGlot's
    rewrite into a subquery would move the model's final ORDER BY inside that subquery."""

    class Generator(SparkGenerator):
        TRANSFORMS = {
            **SparkGenerator.TRANSFORMS,
            exp.Select: transforms.preprocess([transforms.eliminate_distinct_on, transforms.unnest_to_explode,
                                               transforms.any_to_exists]),
        }


def to_spark_text(tree: exp.Expression) -> str:
    return tree.sql(dialect=Spark4)


@dataclass(frozen=True)
class Step:
    """One statement of a model file: `temp` (CREATE TEMP TABLE <name> AS <query>: a Spark temp
    view, materialized), `model` (the CREATE of the model itself) or `drop` (DROP of a temp)."""
    kind: str
    name: str
    query: exp.Expression | None = None


@dataclass
class Model:
    table: str          # schema.table
    query: exp.Expression  # the SELECT of `CREATE OR REPLACE TABLE ... AS`, DuckDB dialect
    params: tuple[str, ...]  # the $parameters it uses (every statement)
    steps: tuple[Step, ...] = ()  # every statement, in file order (the model's own CREATE among them)

    @property
    def queries(self) -> list[exp.Expression]:
        return [s.query for s in self.steps if s.query is not None] or [self.query]


def parse_model(table: str, text: str | None = None) -> Model:
    """A model file, DuckDB dialect: `CREATE OR REPLACE TABLE|VIEW <table> AS <query>`, optionally
    after `CREATE TEMP TABLE <name> AS <query>` statements it reads and before their DROPs
    (run one by one, as pipelines/warehouse/connection.py run_sql_file does)."""
    schema, name = table.split(".")
    text = text if text is not None else (SQL_DIR / schema / f"{name}.sql").read_text()
    statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    steps: list[Step] = []
    for s in statements:
        target = s.this.this if isinstance(s, exp.Create) and isinstance(s.this, exp.Schema) else s.this
        if isinstance(s, exp.Drop) and len(s.args.get("tables") or []) == 1:
            target = s.args["tables"][0]
        qualified = f"{target.db}.{target.name}".lower() if isinstance(target, exp.Table) and target.db else \
            (target.name.lower() if isinstance(target, exp.Table) else "")
        if isinstance(s, exp.Create) and qualified == table.lower() and s.expression is not None:
            steps.append(Step("model", table, s.expression))
        elif isinstance(s, exp.Create) and s.args.get("properties") is not None and s.expression is not None and \
                any(isinstance(p, exp.TemporaryProperty) for p in s.args["properties"].expressions) and not target.db:
            steps.append(Step("temp", target.name, s.expression))
        elif isinstance(s, exp.Drop) and isinstance(target, exp.Table) and not target.db and \
                target.name in {t.name for t in steps if t.kind == "temp"}:
            steps.append(Step("drop", target.name))
        else:
            raise NotImplementedError(f"{table}: statement {s.sql(dialect='duckdb')[:80]!r} does not run on Spark "
                                      "(a model file holds temp tables, its own CREATE ... AS, and DROPs of its temps)")
    models = [s for s in steps if s.kind == "model"]
    if len(models) != 1:
        raise NotImplementedError(f"{table}: {len(models)} CREATE statements of the model itself; Spark needs one")
    params = tuple(sorted({p.name for s in steps if s.query is not None
                           for p in s.query.find_all(exp.Placeholder, exp.Parameter)}))
    return Model(table, models[0].query, params, tuple(steps))


# A CTE computed this many times or more, as Spark inlines it (every read, times the times its reader
# is computed), is written once instead. Fewer: writing and reading it back costs more than
# computing it again (core.gpu_minutes' CTEs, read twice or three times: 10 % slower written).
SHARED_CTE_COMPUTATIONS = 4


def shared_ctes(query: exp.Expression) -> tuple[list[tuple[str, exp.Expression]], exp.Expression]:
    """The query's CTEs that Spark would compute SHARED_CTE_COMPUTATIONS times or more, each as a
    query of its own, and what is left of the query once they are temp views of the same names.

    Spark inlines a CTE at every read, and again each time what reads it is computed: in
    marts.cost_attribution, `classified` (a JSON lookup per charge) was computed over 20 times, and
    the model took 33 s of the demo's Spark build (15 s written once). A CTE written as a view is
    computed once. Each view's query keeps the CTEs before it that are not views themselves. A
    recursive WITH, and a CTE with a WITH of its own or whose name a nested WITH takes again, stay
    inline."""
    key = next((k for k in query.args if k.startswith("with")), None)
    with_ = query.args.get(key) if key else None
    if with_ is None or with_.args.get("recursive"):
        return [], query
    ctes = list(with_.expressions)
    names = [c.alias.lower() for c in ctes]
    nested = {c.alias.lower() for w in query.find_all(exp.With) if w is not with_ for c in w.expressions}
    macros = load_macros()

    def reads_in(tree: exp.Expression) -> list[str]:
        return [t.name.lower() for t in expand_macros(tree.copy(), macros).find_all(exp.Table)
                if t.args.get("db") is None and t.name.lower() in names]

    main = query.copy()
    main.set(key, None)
    readers: dict[str, list[str]] = {n: [] for n in names}  # each read of a CTE, by the CTE (or "") reading it
    for name in reads_in(main):
        readers[name].append("")
    for cte in ctes:
        for name in reads_in(cte.this):
            readers[name].append(cte.alias.lower())
    # A CTE can read only those before it: from the last back, each reader's count is known.
    computed: dict[str, int] = {"": 1}
    shared: set[str] = set()
    for cte in reversed(ctes):
        name = cte.alias.lower()
        computed[name] = sum(1 if r in shared else computed[r] for r in readers[name])
        if computed[name] >= SHARED_CTE_COMPUTATIONS and name not in nested \
                and not any(k.startswith("with") and v is not None for k, v in cte.this.args.items()):
            shared.add(name)
    if not shared:
        return [], query
    views, kept = [], []
    for cte in ctes:
        if cte.alias.lower() in shared:
            body = cte.this.copy()
            if kept:
                body.set(next((k for k in body.args if k.startswith("with")), "with_"),
                         exp.With(expressions=[c.copy() for c in kept]))
            views.append((cte.alias, body))
        else:
            kept.append(cte)
    rest = query.copy()
    rest.set(key, exp.With(expressions=[c.copy() for c in kept]) if kept else None)
    return views, rest


def transpile_model(model: Model, columns_of: ColumnsOf | None = None) -> str:
    """The Spark SQL of a model's own query (see `transpile_query`)."""
    return transpile_query(model.query, columns_of)


def transpile_query(query: exp.Expression, columns_of: ColumnsOf | None = None) -> str:
    """The Spark SQL of one query of a model: macros inlined, rewrites applied, stars expanded
    (when `columns_of` can resolve them; without it the text is for inspection only). A temp step
    must already be a Spark temp view when a later step's stars are resolved."""
    tree = expand_macros(query.copy(), load_macros())
    tree = rewrite(tree)
    if columns_of is not None:
        tree = expand_stars(tree, columns_of)
    return to_spark_text(tree)
