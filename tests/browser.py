"""Screenshot an HTML file in headless Chromium and measure what was drawn.

The report tests use this to check that the HTML report really renders its
charts in a browser: they screenshot the page and count the pixels painted in
the chart colours (``color_pixel_share``) or anything that is not background
(``nonwhite_share``), so a chart that fails to render shows up as a missing
colour rather than as a passing string match on the markup.

When no Chromium/Chrome binary is on PATH, ``find_or_install_chromium`` tries
to install Debian's ``chromium`` package with apt-get (through ``sudo -n``
when not root). Set ``FINOPS_NO_BROWSER_INSTALL=1`` to forbid that. When no
browser can be had, it returns ``(None, reason)`` and the tests call
``pytest.skip(reason)`` so the reason appears in the test summary.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_TIMEOUT_S = 600
NO_INSTALL_ENV = "FINOPS_NO_BROWSER_INSTALL"


def _which_browser() -> str | None:
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _apt(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run([*prefix, "apt-get", *args], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S, env=env, check=False)


@functools.cache
def find_or_install_chromium() -> tuple[str | None, str]:
    """Return ``(browser path, "")``, or ``(None, one-line reason)`` when none can be had."""
    found = _which_browser()
    if found:
        return found, ""
    if os.environ.get(NO_INSTALL_ENV) == "1":
        return None, f"chromium is not installed and {NO_INSTALL_ENV}=1 forbids installing it"
    if not shutil.which("apt-get"):
        return None, "chromium is not installed and there is no apt-get on this machine to install it"
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            return None, "chromium is not installed and apt-get needs root, but this user is not root and has no sudo"
        prefix = ["sudo", "-n"]
    install = ("install", "-y", "-q", "--no-install-recommends", "chromium")
    try:
        result = _apt(prefix, *install)
        if result.returncode != 0 and "unable to locate package" in (result.stderr + result.stdout).lower():
            update = _apt(prefix, "update", "-q")
            if update.returncode != 0:
                return None, ("chromium is not installed and apt-get update failed: "
                              f"{_last_line(update.stderr or update.stdout)}")
            result = _apt(prefix, *install)
    except subprocess.TimeoutExpired:
        return None, f"chromium is not installed and apt-get did not finish within {INSTALL_TIMEOUT_S} s"
    except OSError as exc:
        return None, f"chromium is not installed and apt-get could not be run: {exc}"
    if result.returncode != 0:
        return None, ("chromium is not installed and apt-get could not install it: "
                      f"{_last_line(result.stderr or result.stdout)}")
    found = _which_browser()
    if found:
        return found, ""
    return None, "apt-get installed chromium but no chromium binary is on PATH"


def screenshot(html_path: Path, png_path: Path, width: int = 1280, height: int = 2400,
               timeout_s: int = 90) -> Path:
    """Render ``html_path`` headless at ``width``x``height`` and write ``png_path``."""
    browser, reason = find_or_install_chromium()
    if browser is None:
        raise RuntimeError(reason)
    html_path = Path(html_path).resolve()
    png_path = Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    png_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="finops-chromium-") as profile:
        cmd = [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={width},{height}",
            f"--screenshot={png_path}", html_path.as_uri(),
        ]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
            stderr = result.stderr
        except subprocess.TimeoutExpired as exc:
            stderr = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or "")
            stderr += f"\n(timed out after {timeout_s} s)"
    if not png_path.exists() or png_path.stat().st_size == 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"{Path(browser).name} wrote no screenshot of {html_path}:\n{tail}")
    return png_path


def _pixels(png_path: Path, box: tuple[int, int, int, int] | None = None) -> np.ndarray:
    with Image.open(png_path) as image:
        rgb = image.convert("RGB")
        if box is not None:
            rgb = rgb.crop(box)
        return np.asarray(rgb, dtype=np.int16).reshape(-1, 3)


def color_pixel_share(png_path: Path, rgb: tuple[int, int, int], tolerance: int = 12) -> float:
    """Fraction of pixels whose every channel is within ``tolerance`` of ``rgb``."""
    pixels = _pixels(png_path)
    if pixels.size == 0:
        return 0.0
    close = np.all(np.abs(pixels - np.asarray(rgb, dtype=np.int16)) <= tolerance, axis=1)
    return float(close.mean())


def nonwhite_share(png_path: Path, box: tuple[int, int, int, int] | None = None,
                   threshold: int = 240) -> float:
    """Fraction of pixels in ``box`` (left, top, right, bottom) that are not near-white.

    A pixel counts as near-white when every channel is at least ``threshold``.
    """
    pixels = _pixels(png_path, box)
    if pixels.size == 0:
        return 0.0
    return float((pixels < threshold).any(axis=1).mean())
