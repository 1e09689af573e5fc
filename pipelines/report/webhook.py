"""Delivery of the daily report to a chat webhook.

The body uses Slack's incoming-webhook format (a `text` fallback plus Block Kit `blocks`), which
Mattermost, Rocket.Chat and most Slack-compatible endpoints accept too. Retries and backoff
(including 429 `Retry-After`) come from urllib3's `Retry` through a requests `HTTPAdapter`, not a
hand-written loop. A webhook URL is a credential: its path and query never appear in our messages,
and are scrubbed from urllib3's log lines while a delivery runs, in whatever form they are printed
(as given, decoded, or percent-encoded as requests and urllib3 write them).
"""

import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util import Retry

SECTION_LIMIT = 3000  # Slack: a section's text is at most 3000 characters
HEADER_LIMIT = 150  # Slack: a header's plain_text is at most 150 characters
# urllib3 logs the request target (path and query) on retries: WARNING for broken connections.
_URLLIB3_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")


def slack_escape(text: str) -> str:
    """Escape the three characters Slack treats as markup, so `<!channel>` or `<script>` shows as text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    # Do not leave half an entity (`&am`) at the end of escaped text.
    amp = cut.rfind("&", max(0, len(cut) - 4))
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def build_payload(title: str, lines: list[str], report_link: str | None = None) -> dict:
    """A Slack incoming-webhook body: mrkdwn fields are escaped, plain_text ones need not be."""
    body = slack_escape("\n".join(lines))
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": _clip(title, HEADER_LIMIT)}}]
    if body:  # Slack rejects a section with empty text
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _clip(body, SECTION_LIMIT)}})
    if report_link:
        link = _clip(f"Full report: {slack_escape(report_link)}", SECTION_LIMIT)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link}]})
    return {"text": slack_escape(title) + ("\n" + body if body else ""), "blocks": blocks}


class DeliveryError(Exception):
    """The webhook did not accept the message after all retries."""


@dataclass
class Delivery:
    status_code: int
    attempts: int


def _secret_pattern(secret: str) -> str:
    """A regex matching `secret` however it is printed: each character as itself or percent-encoded
    (`/` as `%2F`, `%2f` or `%252F`, as requests, urllib3 or a proxy may write it), a space also as `+`."""
    parts = []
    for ch in unquote(secret):
        # Encoded once or more (`%2F`, `%252F`: a URL inside another URL's query).
        options = [re.escape(ch), "".join(f"%(?:25)*(?i:{b:02x})" for b in ch.encode("utf-8"))]
        if ch == " ":
            options.append(r"\+")
        parts.append("(?:" + "|".join(options) + ")")
    return "".join(parts)


class _Redact(logging.Filter):
    """Replaces the given secrets in log records of the logger it is attached to, in every form
    they are printed: as given, decoded, or percent-encoded in part or whole."""

    def __init__(self, secrets: list[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s and unquote(s).strip("/")]
        # Longest first, so the whole path goes before a part of it.
        patterns = sorted({_secret_pattern(s) for s in self.secrets}, key=len, reverse=True)
        self._pattern = re.compile("|".join(patterns)) if patterns else None

    def scrub(self, text: str) -> str:
        return self._pattern.sub("<redacted>", text) if self._pattern else text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = self.scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
        return True


def redact_url(text: str, url: str) -> str:
    """`text` with the webhook `url`'s credentials (path, query, user, password) replaced, in any
    encoding: for anything that may print a message about a delivery."""
    parts = urlsplit(url)
    return _Redact([parts.path, parts.query, parts.username or "", parts.password or ""]).scrub(text)


@contextmanager
def _redacted_logs(redact: _Redact):
    loggers = [logging.getLogger(name) for name in _URLLIB3_LOGGERS]
    for logger in loggers:
        logger.addFilter(redact)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(redact)


def deliver(url: str, payload: dict, *, timeout_s: float = 10.0, retries: int = 3, backoff_s: float = 0.5) -> Delivery:
    """POST `payload` as JSON to the webhook at `url`; raises DeliveryError when it is not accepted."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook URL must be http(s) with a host, not scheme {parts.scheme!r}")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")  # never userinfo, path or query
    redact = _Redact([parts.path, parts.query, parts.username or "", parts.password or ""])
    retry = Retry(total=retries, connect=retries, read=retries, status=retries, backoff_factor=backoff_s,
                  status_forcelist=(429, 500, 502, 503, 504),
                  # POST is not idempotent: a read retry may post twice, which a chat message tolerates.
                  allowed_methods=frozenset({"POST"}), respect_retry_after_header=True,
                  raise_on_status=False)  # hand back the last response so we can report its status and body
    with requests.Session() as session, _redacted_logs(redact):
        adapter = HTTPAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        try:
            # A redirect would carry the payload elsewhere: treat it as a failure instead.
            response = session.post(url, json=payload, timeout=(timeout_s, timeout_s), allow_redirects=False)
        except requests.RequestException as e:
            reason = getattr(e.args[0], "reason", None) if e.args else None
            # urllib3 makes NewConnectionError (e.g. refused) a subclass of ConnectTimeoutError.
            timed_out = not isinstance(reason, NewConnectionError) and (
                isinstance(e, requests.Timeout) or isinstance(reason, Urllib3Timeout))
            what = "timed out" if timed_out else "could not be reached"
            # `from None`: the chained requests error would print the URL path in tracebacks.
            raise DeliveryError(f"webhook at {host} {what}: {redact.scrub(str(reason or type(e).__name__))}") from None
        except Exception as e:  # urllib3 or idna errors about the URL itself quote it
            raise DeliveryError(f"webhook at {host} failed: {type(e).__name__}: {redact.scrub(str(e))}") from None
    # urllib3 returns the response of the last try, whose Retry records each earlier one.
    used = getattr(response.raw, "retries", None)
    attempts = len(used.history) + 1 if used is not None else 1
    if not 200 <= response.status_code < 300:
        raise DeliveryError(f"webhook at {host} answered {response.status_code} after {attempts} attempt(s): "
                            # Scrub before clipping: a clip could cut a secret into a part the scrub misses.
                            f"{redact.scrub(response.text[:4000])[:200]}")
    return Delivery(status_code=response.status_code, attempts=attempts)
