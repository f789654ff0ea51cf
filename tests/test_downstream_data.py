"""Downstream data preparation: CoNLL-U and WNUT-style BIO files to Docs, nested subsets."""
import gzip

import pytest
from downstream_data import bio_doc, conllu_doc, nested_subsets, read_bio, read_conllu, write_lm_text
from spacy.vocab import Vocab

CONLLU = """# sent_id = a
# text = I can't go.
1	I	I	PRON	PRP	_	3	nsubj	_	_
2-3	can't	_	_	_	_	_	_	_	_
2	ca	can	AUX	MD	_	4	aux	_	_
3	n't	not	PART	RB	_	4	advmod	_	_
4	go	go	VERB	VB	_	0	root	_	_
4.1	gone	go	VERB	VB	_	_	_	_	_
5	.	.	PUNCT	.	_	4	punct	_	_

# sent_id = b
1	Hi	hi	INTJ	UH	_	0	root	_	_
"""


def test_conllu_keeps_syntactic_words_and_tags(tmp_path):
    path = tmp_path / "x.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(CONLLU)
    sentences = list(read_conllu(path))
    assert [[w[0] for w in s] for s in sentences] == [["I", "ca", "n't", "go", "."], ["Hi"]]
    doc = conllu_doc(Vocab(), sentences[0])
    assert [t.tag_ for t in doc] == ["PRP", "MD", "RB", "VB", "."]
    assert [t.pos_ for t in doc] == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert doc[3].head.i == 3  # the root heads itself
    assert doc[0].head.i == 2 and doc[0].dep_ == "nsubj"


def test_conllu_bad_line_names_the_file(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text("1\tonly\ttwo\n")
    with pytest.raises(ValueError, match="bad.conllu: not a CoNLL-U line"):
        list(read_conllu(path))


def test_bio_tab_only_lines_break_sentences_and_spans_are_exact(tmp_path):
    path = tmp_path / "wnut.conll"
    path.write_text("Empire\tB-location\nState\tI-location\nis\tO\n\t\nin\tO\nNYC\tB-location\n\nBob\tI-person\nsaw\tO\nAnn\tB-person\nLee\tI-person\n")
    sentences = list(read_bio(path))
    assert [w for w, _ in sentences] == [["Empire", "State", "is"], ["in", "NYC"], ["Bob", "saw", "Ann", "Lee"]]
    docs = [bio_doc(Vocab(), w, t) for w, t in sentences]
    assert [(e.text, e.label_) for e in docs[0].ents] == [("Empire State", "location")]
    assert [(e.text, e.label_) for e in docs[2].ents] == [("Bob", "person"), ("Ann Lee", "person")]  # stray I- opens a span


def test_nested_subsets_are_nested_and_deterministic():
    subsets = nested_subsets(1000, (0.01, 0.1, 1.0))
    assert [len(subsets[f]) for f in (0.01, 0.1, 1.0)] == [10, 100, 1000]
    assert set(subsets[0.01]) <= set(subsets[0.1]) <= set(subsets[1.0])
    assert nested_subsets(1000, (0.01, 0.1, 1.0)) == subsets


def test_lm_text_holds_out_training_sentences_only(tmp_path):
    sentences = [[(f"w{i}", "X", "X", "0", "root")] for i in range(600)]
    write_lm_text(sentences, tmp_path / "text", held_out=100)
    train = (tmp_path / "text" / "ewt-train.txt").read_text().split()
    valid = (tmp_path / "text" / "ewt-train-heldout.txt").read_text().split()
    assert len(train) == 500 and len(valid) == 100 and not set(train) & set(valid)
    assert "ewt-train-heldout.txt\tvalid" in (tmp_path / "text" / "manifest.tsv").read_text()
