"""Write spacy_elmo/lang/irregular_forms.tsv: the irregular English forms sense induction and
``change`` match for a target word (``mouse`` -> ``mice``, ``go`` -> ``went``).

The source is WordNet 3.0's exception lists for nouns and verbs, as spaCy ships them in
spacy-lookups-data (``en_lemma_exc``). Kept: lower-case alphabetic forms that the package's regular
rules (:func:`spacy_elmo.lang.english.inflection_bases`) do not reach already. A verb's form
that is itself a word of another part of speech or another verb (``saw``, ``found``, ``left``,
``lay``: a verb, noun or adjective lemma in ``en_lemma_index``, participles in -n/-en/-ing/-ed
aside) is listed as shared: not matched unless the user names it, but named in the hint. Run
with spacy-lookups-data installed (``pip install spacy-lookups-data``), from the repository:
``python project/scripts/irregular_forms.py``.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Dict, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "spacy_elmo" / "lang" / "irregular_forms.tsv"
PARTICIPLES = ("n", "ing", "ed")  # adjectives that are a verb's participle (gone, fallen, lying) stay the verb's forms

WORDNET_NOTICE = """\
WordNet Release 3.0. This software and database is being provided to you, the LICENSEE, by Princeton
University under the following license. By obtaining, using and/or copying this software and database,
you agree that you have read, understood, and will comply with these terms and conditions.:
Permission to use, copy, modify and distribute this software and database and its documentation for any
purpose and without fee or royalty is hereby granted, provided that you agree to comply with the
following copyright notice and statements, including the disclaimer, and that the same appear on ALL
copies of the software, database and documentation, including modifications that you make for internal
use or for distribution.
WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR
WARRANTIES, EXPRESS OR IMPLIED. BY WAY OF EXAMPLE, BUT NOT LIMITATION, PRINCETON UNIVERSITY MAKES NO
REPRESENTATIONS OR WARRANTIES OF MERCHANT- ABILITY OR FITNESS FOR ANY PARTICULAR PURPOSE OR THAT THE USE
OF THE LICENSED SOFTWARE, DATABASE OR DOCUMENTATION WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS,
TRADEMARKS OR OTHER RIGHTS.
The name of Princeton University or Princeton may not be used in advertising or publicity pertaining to
distribution of the software and/or database. Title to copyright in this software, database and any
associated documentation shall at all times remain with Princeton University and LICENSEE agrees to
preserve same."""


def _table(name: str) -> dict:
    import spacy_lookups_data

    return json.loads(gzip.decompress((Path(spacy_lookups_data.__file__).parent / "data" / f"en_{name}.json.gz").read_bytes()))


def irregular_forms() -> Dict[str, Tuple[Set[str], Set[str]]]:
    """``{lemma: (forms matched, forms shared with another word)}`` from WordNet's exception lists."""
    sys.path.insert(0, str(REPO))
    from spacy_elmo.lang.english import inflection_bases

    exceptions, index = _table("lemma_exc"), _table("lemma_index")
    other_words = set(index["verb"]) | set(index["noun"])
    modifiers = set(index["adj"]) | set(index["adv"])
    out: Dict[str, Tuple[Set[str], Set[str]]] = {}
    for pos in ("noun", "verb"):
        for form, lemmas in exceptions[pos].items():
            if not (form.isalpha() and form.islower()):
                continue
            for lemma in lemmas:
                if lemma == form or not (lemma.isalpha() and lemma.islower()) or lemma in inflection_bases(form):
                    continue
                shared = pos == "verb" and (form in other_words or (form in modifiers and not form.endswith(PARTICIPLES)))
                out.setdefault(lemma, (set(), set()))[1 if shared else 0].add(form)
    return out


def render(table: Dict[str, Tuple[Set[str], Set[str]]]) -> str:
    header = [
        "# Irregular English forms of nouns and verbs: lemma, forms matched, forms shared with another word (named, not matched).",
        "# From WordNet 3.0's exception lists as spaCy's spacy-lookups-data ships them; written by project/scripts/irregular_forms.py.",
        *(f"# {line}" for line in WORDNET_NOTICE.splitlines()),
    ]
    rows = [f"{lemma}\t{' '.join(sorted(forms))}\t{' '.join(sorted(shared))}" for lemma, (forms, shared) in sorted(table.items())]
    return "\n".join(header + rows) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(irregular_forms()), encoding="utf-8")
    print(f"wrote {TARGET}")
