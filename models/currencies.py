"""ISO 4217 currency codes, from the `iso4217` package (the list SIX Financial Information
maintains for ISO, bundled with the package): what every connector and setting checks a currency
against, instead of a three-letter pattern that lets `XYZ` through."""

from __future__ import annotations

from functools import cache


@cache
def iso4217_codes() -> frozenset[str]:
    """Every ISO 4217 alphabetic code in the package's list (funds and metal codes such as XAU
    included), less XXX ('no currency') and XTS ('for testing')."""
    from iso4217 import Currency

    return frozenset(c.code for c in Currency) - {"XXX", "XTS"}


ISO4217 = sorted(iso4217_codes())  # for polars `is_in`


def is_iso4217(code: str | None) -> bool:
    return code is not None and code in iso4217_codes()
