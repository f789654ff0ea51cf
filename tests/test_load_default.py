"""load_bilm() with no argument, or an obvious name, opens the embedded default English model."""
import subprocess
import sys

import numpy as np

from spacy_elmo import load_bilm
from spacy_elmo.models import default_model_path


def test_load_bilm_without_argument_is_the_embedded_default():
    default = load_bilm(default_model_path())
    sentence = [["The", "bank", "lends", "money", "."]]
    expected = default.embed_sentences(sentence)[0]
    for bilm in (load_bilm(), load_bilm("en_default"), load_bilm("default")):
        assert np.array_equal(bilm.embed_sentences(sentence)[0], expected)


def test_load_bilm_default_needs_no_spacy():
    code = "import sys; from spacy_elmo.hub import load_bilm; load_bilm(); print('spacy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
