"""Text from data and file names, made safe to show in a terminal or a run log."""

import re

# C0 and C1 control characters (ESC sequences among them), DEL, and the bidirectional overrides that
# reorder what a terminal shows: none may reach a terminal from data or file names.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile("[\t\n]")


def for_terminal(value: object, multiline: bool = False) -> str:
    """`value` as text safe to echo to a terminal: control characters dropped (stored text is escaped
    instead, by `connectors.base.printable`, so it stays visible in the warehouse); tabs and newlines kept only
    when `multiline` (a recommendation), else made spaces so one item stays on one line (a path, a reason)."""
    text = "" if value is None else str(value)
    if not multiline:
        text = _LINE_BREAKS.sub(" ", text)
    return _CONTROL.sub("", text)
