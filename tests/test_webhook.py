"""pipelines.report.webhook against a real HTTP server on 127.0.0.1 (no network, no mocks of requests)."""

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipelines.report.webhook import SECTION_LIMIT, Delivery, DeliveryError, build_payload, deliver, slack_escape

SECRET_PATH = "/services/T000/SECRET123"
PAYLOAD = build_payload("Daily GPU spend", ["total: 1,234 USD", "idle: 12%"], report_link="https://example.test/r")


@pytest.fixture
def server():
    """Yields (base URL, received requests). Paths: /ok, /flaky (503 twice, then 200), /slow (1.5 s),
    anything else 500."""
    received: list[dict] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                seen = sum(r["path"] == self.path for r in received)
            if self.path == "/ok" or (self.path == "/flaky" and seen > 2):
                status = 200
            elif self.path == "/flaky":
                status = 503
            elif self.path == "/slow":
                time.sleep(1.5)
                status = 200
            else:
                status = 500
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else f"error {status}".encode())
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args):  # keep test output quiet
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_good_endpoint_delivers_once(server):
    base, received = server
    assert deliver(base + "/ok", PAYLOAD, backoff_s=0) == Delivery(status_code=200, attempts=1)
    assert len(received) == 1
    assert received[0]["headers"]["Content-Type"] == "application/json"
    body = json.loads(received[0]["body"])
    assert body["text"].startswith("Daily GPU spend") and body["blocks"]


def test_flaky_endpoint_is_retried(server):
    base, received = server
    assert deliver(base + "/flaky", PAYLOAD, backoff_s=0) == Delivery(status_code=200, attempts=3)
    assert len(received) == 3


def test_failing_endpoint_raises_without_leaking_the_url(server, caplog):
    base, received = server
    caplog.set_level(logging.DEBUG, logger="urllib3")
    with pytest.raises(DeliveryError) as err:
        deliver(base + SECRET_PATH + "?token=XYZ", PAYLOAD, retries=2, backoff_s=0)
    assert len(received) == 3
    message = str(err.value)
    assert "500" in message and "3 attempt" in message and "127.0.0.1" in message
    assert "SECRET123" not in message and "XYZ" not in message
    assert caplog.records and "SECRET123" not in caplog.text and "XYZ" not in caplog.text


def test_slow_endpoint_times_out(server):
    base, received = server
    start = time.monotonic()
    with pytest.raises(DeliveryError, match="timed out"):
        deliver(base + "/slow", PAYLOAD, timeout_s=0.3, retries=1, backoff_s=0)
    assert time.monotonic() - start < 3
    assert len(received) == 2  # one try, one retry


def test_connection_refused(caplog):
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.DEBUG, logger="urllib3")
    with pytest.raises(DeliveryError, match=f"127.0.0.1:{port} could not be reached") as err:
        deliver(f"http://127.0.0.1:{port}{SECRET_PATH}", PAYLOAD, retries=1, backoff_s=0)
    assert "SECRET123" not in str(err.value)
    assert err.value.__suppress_context__  # the chained requests error would print the path
    # urllib3 warns about the broken connection with the request target: it must be scrubbed.
    assert "Retrying" in caplog.text and "SECRET123" not in caplog.text


def test_escaping_and_truncation():
    payload = build_payload("spend <script>", ["tag <script>alert(1)</script> & co"])
    assert "&lt;script&gt;" in payload["text"] and "&amp;" in payload["text"]
    section = payload["blocks"][1]["text"]["text"]
    assert section == "tag &lt;script&gt;alert(1)&lt;/script&gt; &amp; co"
    assert "<script>" not in json.dumps([payload["text"], section])
    assert payload["blocks"][0]["text"] == {"type": "plain_text", "text": "spend <script>"}
    assert slack_escape("<!channel> a&b") == "&lt;!channel&gt; a&amp;b"

    long = build_payload("t", ["cost & usage <row>"] * 500, report_link="https://example.test/r?a=1&b=2")
    section = long["blocks"][1]["text"]["text"]
    assert len(section) <= SECTION_LIMIT and section.endswith("…")
    assert not section[:-1].rsplit("&", 1)[-1].isalpha()  # no half entity before the ellipsis
    assert long["blocks"][2]["type"] == "context" and "a=1&amp;b=2" in long["blocks"][2]["elements"][0]["text"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.test/x", "http:///nohost"])
def test_non_http_url_rejected(url):
    with pytest.raises(ValueError):
        deliver(url, PAYLOAD)
