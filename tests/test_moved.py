"""The old import paths of modules that moved out of ``spacy_elmo.senses`` still import, as the new modules."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.moved import MOVED

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_elmo"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])
    assert not (PACKAGE.parent / (old.replace(".", "/") + ".py")).exists()  # a file there would be found first


def test_old_paths_import_first_in_a_fresh_interpreter():
    # nothing imported the new modules yet: the old path loads them, once, under both names
    code = (
        "import sys\n"
        "from spacy_elmo.senses.induce import InductionSettings, build_inventory, induce, save_senses, word_senses_from\n"
        "from spacy_elmo.senses.explore import write_explore_page\n"
        "from spacy_elmo.senses.index import TokenIndex\n"
        "from spacy_elmo.senses import wsi_eval\n"
        "import spacy_elmo.senses.wsd as wsd\n"
        "assert sys.modules['spacy_elmo.senses.induce'] is sys.modules['spacy_elmo.induction.induce']\n"
        "assert induce.__module__ == 'spacy_elmo.induction.induce' and TokenIndex.__module__ == 'spacy_elmo.search.index'\n"
        "assert wsi_eval.__name__ == 'spacy_elmo.evaluation.wsi_eval' and callable(wsd.evaluate_pipeline)\n"
        "assert write_explore_page is sys.modules['spacy_elmo.explore.page'].write_explore_page\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_unknown_old_path_still_fails():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("spacy_elmo.senses.no_such_module")
