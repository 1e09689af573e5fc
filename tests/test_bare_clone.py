"""The suite needs nothing beside the clone: every sample it reads is vendored with its attribution."""

import re
import subprocess

from tests.conftest import FIXTURES, REPO

SAMPLES_DIR = FIXTURES / "samples"


def test_no_test_reads_outside_the_repository():
    """No test, benchmark or CI script names the development machine's ../shared folder."""
    tracked = subprocess.run(["git", "ls-files", "tests", ".ci", "Makefile"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    offenders = [name for name in tracked
                 if name != "tests/test_bare_clone.py" and (REPO / name).suffix in {".py", ".sh", ""} and (REPO / name).is_file()
                 and re.search(r"\.\./shared|\"shared\"\s*/|/ \"shared\"", (REPO / name).read_text(errors="replace"))]
    assert offenders == []


def test_every_vendored_sample_is_attributed():
    """Each file under tests/fixtures/samples is named in the SOURCES.md of its folder tree."""
    sources = {folder: (folder / "SOURCES.md").read_text() for folder in SAMPLES_DIR.iterdir() if folder.is_dir()}
    unnamed = []
    for path in SAMPLES_DIR.rglob("*"):
        if not path.is_file() or path.name == "SOURCES.md":
            continue
        top = SAMPLES_DIR / path.relative_to(SAMPLES_DIR).parts[0]
        text = sources[top]
        # Files of a folder family are named by their folder (`focus12_spec_examples/*.csv`).
        if path.name not in text and path.parent.name not in text:
            unnamed.append(str(path.relative_to(SAMPLES_DIR)))
    assert unnamed == []
    assert set(sources) == {SAMPLES_DIR / "billing", SAMPLES_DIR / "telemetry"}


def test_unlicensed_trace_data_is_generated_not_copied():
    """alibaba/clusterdata's GenTD26 files carry no redistribution licence: only generated look-alikes travel."""
    names = [p.name for p in SAMPLES_DIR.rglob("alibaba_*")]
    assert names and all(n.endswith("_generated.csv") or n.startswith("alibaba_pai2020") for n in names)
