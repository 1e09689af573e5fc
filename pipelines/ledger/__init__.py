"""The ledger: which billing lines count, once, whatever order files arrive and load in.

Every billing file belongs to a *delivery* of an export: provider, export name, scope (billing
account), billing period, delivery id, the provider's creation time, expected parts and mode
(`replace`: a newer delivery of the same export, scope and period replaces the older one;
`incremental`: deliveries append, and a line seen again counts once, its newest version winning).

- `deliveries` finds deliveries: it reads provider manifests (AWS CUR legacy, AWS Data Exports,
  Azure Cost Management) and the folder layouts and file names providers write, and identifies a
  file by its normalized content (decompressed, CRLF→LF, BOM stripped).
- `rules` applies the rules in SQL over every raw row (`deliveries.sql` → `raw.deliveries` and the
  delivery columns and statuses of `raw.files`); `sql/core/billing_lines.sql` keeps the lines that
  count. Nothing depends on which run loaded which file: the rules are recomputed over all rows.
"""
