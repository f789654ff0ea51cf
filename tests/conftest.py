"""Shared fixtures. The authors' parity fixtures are part of the repository: tests/data/elmo-fixture
(their source and licence are in its SOURCE.md).

The whole test session (and every subprocess it starts, which inherits the environment) uses a
private cache folder, set here before anything imports spacy_elmo and removed at the end: the
compiled kernels and any download never touch the user's own cache."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

SESSION_CACHE = Path(tempfile.mkdtemp(prefix="spacy-elmo-test-cache-"))
os.environ["SPACY_ELMO_CACHE"] = str(SESSION_CACHE)  # spacy_elmo.cache.CACHE_ENV, read on every use

import pytest  # noqa: E402
import spacy  # noqa: E402

from spacy_elmo import load_bilm  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "data" / "elmo-fixture"
ALLENNLP = FIXTURES / "allennlp"  # residual connections
BILMTF = FIXTURES / "bilm-tf"  # no residual connections
PROJECT_SCRIPTS = REPO / "project" / "scripts"
# The spaCy project's data preparation (downstream_data, extra_text) lives with the project, not in
# the package; its tests import it from there.
if str(PROJECT_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(PROJECT_SCRIPTS))

if not (ALLENNLP / "options.json").is_file():  # pragma: no cover - a broken checkout
    raise RuntimeError(f"the ELMo parity fixtures are missing: expected {ALLENNLP} (tests/data/elmo-fixture in the repository)")


@pytest.fixture(scope="session")
def allennlp_bilm():
    return load_bilm(ALLENNLP)


@pytest.fixture(scope="session")
def bilmtf_bilm():
    return load_bilm(BILMTF)


@pytest.fixture(scope="session")
def bilm():
    """The embedded default biLM (sense induction's tests share it)."""
    return load_bilm(None)


@pytest.fixture(scope="session")
def head():
    """The embedded default's LM head (softmax + vocabulary)."""
    from spacy_elmo.induction.substitutes import native_head
    from spacy_elmo.models import default_model_path

    return native_head(default_model_path())


@pytest.fixture()
def nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP)})
    return nlp


@pytest.fixture(scope="module")
def kernel_loader(tmp_path_factory):
    """One loader of the compiled kernels (one build) per test module, in a private temporary
    cache: never the user's, and never another module's."""
    from spacy_elmo.kernels import native

    return native.KernelLoader(tmp_path_factory.mktemp("kernel-cache"))


@pytest.fixture()
def private_kernels(kernel_loader, monkeypatch):
    """The process's compiled kernels (``native.library()``) come from this module's
    :func:`kernel_loader` during the test (``pytestmark = pytest.mark.usefixtures("private_kernels")``)."""
    from spacy_elmo.kernels import native

    monkeypatch.setattr(native, "LOADER", kernel_loader)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """Report how many README and docs/ code blocks tests/test_readme.py did not run, and why."""
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if "test_docs_block" in report.nodeid]
    if skipped:
        not_run = sum(1 for report in skipped if "not-run:" in str(report.longrepr))
        terminalreporter.write_line(
            f"README/docs code blocks not run: {len(skipped)} ({not_run} marked not-run, "
            f"{len(skipped) - not_run} text blocks, which are not code)")
