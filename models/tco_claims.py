"""Recompute published purchasing claims from their own inputs and say which figures follow."""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import yaml

from models.tco import D

DEFAULT_CLAIMS = Path(__file__).resolve().parent / "data" / "tco_claims.yaml"


@dataclass
class ClaimCheck:
    id: str
    text: str
    unit: str
    stated: Decimal
    recomputed: Decimal | None
    follows: bool | None
    working: str  # the arithmetic, written out
    to_reproduce: str  # what input values would make the stated figure come out


def _fmt(x: Decimal) -> str:
    x = D(x)
    return f"{x.to_integral_value():f}" if x == x.to_integral_value() else format(x, ".6g")


class _AsWrittenLoader(yaml.SafeLoader):
    """YAML reads 1.10 as the float 1.1, losing the digit that says the figure was stated to the
    hundredth. Here a number with a decimal point loads as the Decimal its text spells, so claims
    files written with plain numbers keep working; a quoted "1.10" keeps its digits too."""


def _decimal_as_written(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal:
    try:
        return Decimal(loader.construct_scalar(node).replace("_", ""))
    except InvalidOperation:  # .inf, .nan, 1:30.5 (base 60): YAML's own reading
        return D(loader.construct_yaml_float(node))


_AsWrittenLoader.add_constructor("tag:yaml.org,2002:float", _decimal_as_written)


def _precision(claim: dict) -> Decimal:
    """The last digit the stated figure gives, as written: 0.98 → 0.01, 1.10 → 0.01, 22000 → 1; "22 k" is
    written stated 22000, precision 1000."""
    if "precision" in claim:
        return D(claim["precision"])
    return Decimal(1).scaleb(D(claim["stated"]).as_tuple().exponent)


def _follows(claim: dict, recomputed: Decimal) -> bool:
    """A stated figure follows when the recomputed one rounds to it at the precision it was stated with."""
    return abs(D(claim["stated"]) - recomputed) <= _precision(claim) / 2


def _divisor(claim: dict, field: str, value) -> Decimal:
    """A field the check divides by: at 0 no input reproduces the stated figure, so the file is refused."""
    if D(value) == 0:
        raise ValueError(f"claim {claim['id']}: {field} is 0, but the check divides by it")
    return D(value)


def check_claim(claim: dict) -> ClaimCheck:
    kind, stated = claim["kind"], D(claim["stated"])
    base = dict(id=claim["id"], text=claim["text"], unit=claim.get("unit", ""), stated=stated)
    if kind == "sum":
        terms = {k: (D(v["amount"]), _divisor(claim, f"terms.{k}.count", v["count"])) for k, v in claim["terms"].items()}
        total = sum((a * n for a, n in terms.values()), Decimal(0))
        working = " + ".join(f"{_fmt(n)} × {_fmt(a)} ({k})" if n != 1 else f"{_fmt(a)} ({k})" for k, (a, n) in terms.items())
        gap = stated - total
        fixes = [f"{k} = {_fmt(a + gap / n)}" for k, (a, n) in terms.items()]
        return ClaimCheck(**base, recomputed=total, follows=_follows(claim, total),
                          working=f"{working.replace('+ -1 ×', '−')} = {_fmt(total)}",
                          to_reproduce="one of: " + ", ".join(fixes))
    if kind == "rate":
        price, quantity = _divisor(claim, "price", claim["price"]), _divisor(claim, "quantity", claim["quantity"])
        total = price * quantity
        return ClaimCheck(**base, recomputed=total, follows=_follows(claim, total),
                          working=f"{_fmt(quantity)} {claim.get('quantity_name', '')} × {_fmt(price)} = {_fmt(total)}",
                          to_reproduce=f"price {_fmt(stated / quantity)} per unit, or {_fmt(stated / price)} {claim.get('quantity_name', 'units')}")
    if kind == "depreciation":
        price, rate = _divisor(claim, "price", claim["price"]), D(claim["rate"])
        # Years as stated: 2.5 years is 2.5, not 2 (int() made 0.5 a 0 the check then divided by).
        years = _divisor(claim, "years", claim["years"])
        if years < 0:
            raise ValueError(f"claim {claim['id']}: years is below 0")
        if not 0 <= rate <= 1:  # as the purchasing parameters: more than all of the value lost a year is no rate
            raise ValueError(f"claim {claim['id']}: rate is {_fmt(rate)}, not between 0 and 1")
        residual = price * (1 - rate) ** years
        implied = 1 - (stated / price) ** (Decimal(1) / years) if stated > 0 else None
        return ClaimCheck(**base, recomputed=residual, follows=_follows(claim, residual),
                          working=f"{_fmt(price)} × (1 − {_fmt(rate)})^{_fmt(years)} = {_fmt(residual)}",
                          to_reproduce=f"depreciation of {_fmt(implied * 100)} % a year" if implied is not None else "")
    if kind == "saving":
        baseline, alternative = _divisor(claim, "baseline", claim["baseline"]), D(claim["alternative"])
        pct = (baseline - alternative) / baseline * 100
        return ClaimCheck(**base, recomputed=pct, follows=_follows(claim, pct),
                          working=f"({_fmt(baseline)} − {_fmt(alternative)}) ÷ {_fmt(baseline)} = {_fmt(pct)} %",
                          to_reproduce=f"alternative of {_fmt(baseline * (1 - stated / 100))} for exactly {_fmt(stated)} %")
    return ClaimCheck(**base, recomputed=None, follows=None, working="not computable from the published figures",
                      to_reproduce="needs: " + ", ".join(claim.get("needs", [])))


def check_claims(path: Path | None = None) -> list[ClaimCheck]:
    """Every claim in the file checked, or a ValueError naming the file, the claim and the field at fault."""
    path = Path(path or DEFAULT_CLAIMS)
    try:
        document = yaml.load(path.read_text(), Loader=_AsWrittenLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("claims"), list):
        raise ValueError(f"{path}: the file must hold a list of claims under `claims:`")
    checks = []
    for number, claim in enumerate(document["claims"], 1):
        name = claim.get("id", f"#{number}") if isinstance(claim, dict) else f"#{number}"
        try:
            checks.append(check_claim(claim))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        # A field left out or not a number ended in a traceback: refused naming the claim instead.
        except KeyError as exc:
            raise ValueError(f"{path}: claim {name}: no {exc.args[0]}") from None
        except (ArithmeticError, TypeError, AttributeError):
            raise ValueError(f"{path}: claim {name}: a figure is not a number (or its terms not a mapping)") from None
    return checks
