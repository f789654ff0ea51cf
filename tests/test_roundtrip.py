"""After DocBin / n_process round trips, spacy_elmo.restore gives back doc.tensor and the hooks."""
import warnings

import numpy as np
import pytest
import spacy
from spacy.tokens import DocBin

import spacy_elmo


@pytest.fixture(scope="module")
def nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    return nlp


def test_restore_after_docbin(nlp):
    doc = nlp("He sat on the bank of the river. The bank lends money.")
    data = DocBin(store_user_data=True, docs=[doc]).to_bytes()
    back = next(DocBin().from_bytes(data).get_docs(nlp.vocab))
    assert back.tensor.size == 0  # a DocBin stores no tensor
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no W007/W008 once restored
        docs = list(spacy_elmo.restore_all([back]))
        assert np.array_equal(docs[0].tensor, doc.tensor)
        assert docs[0][4].similarity(docs[0][10]) == pytest.approx(doc[4].similarity(doc[10]), abs=1e-6)
        assert docs[0].similarity(doc) == pytest.approx(1.0, abs=1e-5)


def test_restore_leaves_other_docs_alone(nlp):
    plain = spacy.blank("en")("No ELMo here.")
    assert spacy_elmo.restore(plain) is plain and plain.tensor.size == 0 and not plain.user_hooks


WORKER_SCRIPT = """
import warnings, spacy
from spacy_elmo.roundtrip import silence_worker_hook_warning
silence_worker_hook_warning()
nlp = spacy.blank("en")
nlp.add_pipe("elmo")
docs = list(nlp.pipe([f"The bank number {i} lends money." for i in range(12)], n_process=2, batch_size=1))
assert len(docs) == 12 and docs[0]._.elmo_vectors is not None
nlp("A Doc with hooks.").to_bytes()  # our own serialisation: W109 as usual
"""


@pytest.mark.slow
def test_no_w109_per_doc_from_pipe_workers(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "workers.py"
    script.write_text(WORKER_SCRIPT)
    result = subprocess.run([sys.executable, "-W", "always", str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    w109 = [line for line in result.stderr.splitlines() if "[W109]" in line]
    assert len(w109) == 1 and "workers.py" in w109[0], result.stderr[-2000:]
