from pathlib import Path

import pytest
from PIL import Image

from tests.browser import color_pixel_share, find_or_install_chromium, nonwhite_share, screenshot

BLUE = (0x1F, 0x77, 0xB4)  # matplotlib's first colour, #1f77b4

WITH_CHART = """<!doctype html>
<html><head><meta charset="utf-8"><title>chart</title>
<style>body { margin: 0; background: #fff; font-family: sans-serif; }</style></head>
<body>
<h1>GPU spend</h1>
<svg xmlns="http://www.w3.org/2000/svg" width="800" height="400" viewBox="0 0 800 400">
  <rect x="0" y="0" width="800" height="400" fill="#1f77b4"/>
</svg>
</body></html>
"""

WITHOUT_CHART = """<!doctype html>
<html><head><meta charset="utf-8"><title>no chart</title>
<style>body { margin: 0; background: #fff; font-family: sans-serif; }</style></head>
<body>
<h1>GPU spend</h1>
<p>No chart here.</p>
</body></html>
"""


def _browser_or_skip() -> None:
    browser, reason = find_or_install_chromium()
    if browser is None:
        pytest.skip(reason)


def _shoot(tmp_path: Path, name: str, html: str) -> Path:
    page = tmp_path / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    return screenshot(page, tmp_path / f"{name}.png", width=1000, height=800)


def test_screenshot_shows_svg_chart(tmp_path):
    _browser_or_skip()
    png = _shoot(tmp_path, "chart", WITH_CHART)
    assert png.exists() and png.stat().st_size > 0
    with Image.open(png) as image:
        assert image.size == (1000, 800)
    share = color_pixel_share(png, BLUE)
    # 800x400 of a 1000x800 page is 40 %; allow for layout and scaling.
    assert share > 0.02, f"blue share {share:.4f}"
    assert nonwhite_share(png) > share * 0.9


def test_screenshot_without_chart_has_no_blue(tmp_path):
    _browser_or_skip()
    png = _shoot(tmp_path, "plain", WITHOUT_CHART)
    assert png.exists()
    assert color_pixel_share(png, BLUE) == pytest.approx(0.0, abs=1e-3)
    assert 0 < nonwhite_share(png) < 0.05  # the heading and paragraph text only


def test_screenshot_raises_when_no_png(tmp_path, monkeypatch):
    import tests.browser as browser

    monkeypatch.setattr(browser, "find_or_install_chromium", lambda: ("/bin/true", ""))
    page = tmp_path / "page.html"
    page.write_text(WITH_CHART, encoding="utf-8")
    with pytest.raises(RuntimeError, match="wrote no screenshot"):
        screenshot(page, tmp_path / "page.png")


def test_pixel_measures_on_generated_png(tmp_path):
    png = tmp_path / "synthetic.png"
    image = Image.new("RGB", (100, 100), (255, 255, 255))
    image.paste(BLUE, (0, 0, 50, 50))                    # 25 % exact blue
    image.paste((0x25, 0x70, 0xB0), (50, 0, 100, 10))     # 5 % near blue (within 12)
    image.paste((250, 250, 250), (0, 90, 100, 100))      # 10 % near-white
    image.save(png)

    assert color_pixel_share(png, BLUE) == pytest.approx(0.30)
    assert color_pixel_share(png, BLUE, tolerance=0) == pytest.approx(0.25)
    assert color_pixel_share(png, (255, 0, 0)) == 0.0
    assert nonwhite_share(png) == pytest.approx(0.30)
    assert nonwhite_share(png, box=(0, 0, 50, 50)) == pytest.approx(1.0)
    assert nonwhite_share(png, box=(0, 50, 100, 100)) == pytest.approx(0.0)


def test_install_can_be_forbidden(monkeypatch):
    import tests.browser as browser

    monkeypatch.setenv("FINOPS_NO_BROWSER_INSTALL", "1")
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    browser.find_or_install_chromium.cache_clear()
    try:
        path, reason = browser.find_or_install_chromium()
    finally:
        browser.find_or_install_chromium.cache_clear()
    assert path is None
    assert "FINOPS_NO_BROWSER_INSTALL=1" in reason
