"""Any spaCy language, end to end: the ``elmo`` component on ``spacy.blank(LANG)`` for German,
Russian, Chinese and Arabic (tokens, sentence boundaries without a parser, long docs, bytes and
ELMoForManyLangs' Unicode lexicon), the language resources the sense tools read
(:mod:`spacy_elmo.lang`), and ``--lang`` in prepare, pretrain, induce, change, explore and package.

The German texts are tests/data/german (written for these tests; its SOURCE.md)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import spacy
import torch
from spacy.lang.de.stop_words import STOP_WORDS as GERMAN_STOP_WORDS  # spaCy's own list, not read through the code under test
from spacy.tokens import Doc, DocBin

from spacy_elmo.bilm.characters import MAX_CHARS, token_char_ids
from spacy_elmo.cli.main import main
from spacy_elmo.hub.efml_random import write_random_efml
from spacy_elmo.lang import LanguageError, language, resources
from spacy_elmo.layers.contexts import SentenceContexts

from .conftest import ALLENNLP, REPO

GERMAN = REPO / "tests" / "data" / "german"
LANGS = ("de", "ru", "zh", "ar")
TEXTS = {
    "de": [
        "Die Bank am Fluss war leer. Wir saßen auf der Bank und sahen den Booten zu!",
        "Straßenbahnhaltestellenüberdachung?",
        "Grüße aus Köln: Das Schloss öffnet um neun Uhr.",
    ],
    "ru": [
        "Банк у реки был пуст. Мы сидели на скамейке и смотрели на лодки!",
        "Достопримечательности?",
        "Ёлка стоит в подъезде, а щука плавает в реке.",
    ],
    "zh": ["河边的银行是空的。我们坐在长椅上看着船！", "这是什么？", "中华人民共和国的首都是北京。"],
    "ar": ["كان البنك بجانب النهر فارغا. جلسنا على المقعد ونظرنا إلى القوارب!", "ما هذا؟", "مُحَمَّد يقرأ الكتاب في المكتبة."],
}


def vectors(doc) -> np.ndarray:
    return np.asarray(doc._.elmo_vectors)


def elmo_pipeline(lang: str, weights=ALLENNLP, sentencizer: bool = False, **config):
    nlp = spacy.blank(lang)
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), **config})
    return nlp


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------- the component


def test_blank_pipelines_tokenise_without_optional_packages():
    """spacy.blank(LANG) for the four languages needs nothing beyond spaCy: no lemmatizer is added
    (Russian's would need pymorphy3), and Chinese is split into characters (spaCy's default)."""
    for lang in LANGS:
        nlp = spacy.blank(lang)
        assert nlp.pipe_names == [] and nlp.lang == lang
    assert [t.text for t in spacy.blank("zh")("银行在河边。")] == ["银", "行", "在", "河", "边", "。"]
    assert [t.text for t in spacy.blank("ar")("ما هذا؟")] == ["ما", "هذا", "؟"]
    assert [t.text for t in spacy.blank("de")("Wir saßen auf der Bank!")] == ["Wir", "saßen", "auf", "der", "Bank", "!"]


@pytest.mark.parametrize("lang", LANGS)
def test_the_component_on_each_language_alone_or_in_a_batch(lang):
    nlp = elmo_pipeline(lang, contexts={"@misc": "spacy-elmo.sentence_contexts.v1", "max_length": 12, "overlap": 4})
    alone = [vectors(nlp(text)) for text in TEXTS[lang]]
    together = [vectors(doc) for doc in nlp.pipe(TEXTS[lang] * 2, batch_size=4)]
    for a, b in zip(alone * 2, together):
        assert a.shape == b.shape and np.isfinite(a).all()
        assert np.abs(a - b).max() < 1e-6
        assert np.abs(a).sum(1).min() > 0  # every token got a vector


@pytest.mark.parametrize("lang", LANGS)
def test_sentences_without_a_parser_are_the_sentencizers(lang):
    """A Doc without sentence boundaries (``has_annotation("SENT_START")`` false: no parser, no
    sentencizer) is split after sentence-final punctuation of its script (。！？ ؟ ...): the
    same sentences, and so the same vectors, as with spaCy's sentencizer in the pipeline."""
    plain, split = elmo_pipeline(lang), elmo_pipeline(lang, sentencizer=True)
    text = " ".join(TEXTS[lang][:2])
    doc, reference = plain(text), split(text)
    assert not doc.has_annotation("SENT_START") and reference.has_annotation("SENT_START")
    contexts = SentenceContexts()(doc)
    assert [[doc[i].text for i in c.indices] for c in contexts] == [[t.text for t in s] for s in reference.sents]
    assert len(contexts) == 3
    assert np.abs(vectors(doc) - vectors(reference)).max() < 1e-6


def test_sentence_final_punctuation_of_other_scripts_ends_a_context():
    """Urdu's ۔, Devanagari's ।, the fullwidth and ideographic stops: the sentencizer's characters."""
    words = ["a", "۔", "b", "।", "c", "॥", "d", "．", "e", "｡", "f", "…", "g"]
    doc = Doc(spacy.blank("xx").vocab, words=words)
    assert [[words[i] for i in c.indices] for c in SentenceContexts()(doc)] == [words[i : i + 2] for i in range(0, 12, 2)] + [["g"]]


@pytest.mark.parametrize("lang", LANGS)
def test_long_docs_without_boundaries_are_read_in_windows(lang):
    """A long text with no sentence-final punctuation is cut into overlapping windows: every token
    gets a finite vector, the same alone as in a batch."""
    words = {"de": "Bank Fluss Wasser Haus", "ru": "банк река вода дом", "zh": "银 行 河 水", "ar": "بنك نهر ماء بيت"}[lang].split()
    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "max_batch_tokens": 512})
    shapes = []
    nlp.get_pipe("elmo").bilm.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].token_index.shape)))
    sep = "" if lang == "zh" else " "
    text = sep.join(words[i % 4] for i in range(700))
    doc = nlp(text)
    assert len(doc) == 700 and not doc.has_annotation("SENT_START")
    assert max(width for _, width in shapes) == 202  # windows of max_length=200 plus <S>, </S>
    tensor = vectors(doc)
    assert np.isfinite(tensor).all() and np.abs(tensor).sum(1).min() > 0
    batch = list(nlp.pipe([TEXTS[lang][0], text, TEXTS[lang][1]], batch_size=3))
    assert np.abs(vectors(batch[1]) - tensor).max() < 1e-6


def test_multi_byte_characters_are_read_as_utf8_bytes():
    """The char-CNN reads UTF-8 bytes (as the original ELMo does): 2-byte Arabic and Cyrillic, 3-byte
    Chinese, 4-byte characters outside the BMP; a token is cut after 48 bytes, inside a character if it must."""
    for token in ("Köln", "мир", "北京", "مُحَمَّد", "𠀀", "a" + "中" * 20):
        data = token.encode("utf-8")[: MAX_CHARS - 2]
        ids = token_char_ids(token)
        assert list(ids[1 : len(data) + 1] - 1) == list(data) and ids[len(data) + 1] - 1 == 259  # the bytes, then end-of-word
    nlp = spacy.blank("ar")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP)})
    long_word = "بالمستشفيات" * 3  # 33 letters, 66 bytes: read as its first 24 letters
    doc, cut = nlp(Doc(nlp.vocab, words=["في", long_word])), nlp(Doc(nlp.vocab, words=["في", long_word[:24]]))
    assert np.isfinite(vectors(doc)).all() and np.allclose(vectors(doc), vectors(cut), atol=1e-6)


@pytest.fixture(scope="module")
def efml_folder(tmp_path_factory):
    """A random ELMoForManyLangs model whose character lexicon holds most characters of the texts
    (some are left out: they read as <oov>) and whose word lexicon holds a few of their words."""
    text = "".join(t for texts in TEXTS.values() for t in texts)
    chars = sorted(set(text) - set(" ßщ首ُ"))
    words = ["Bank", "банк", "银", "البنك"]
    tiny = {
        "encoder": {"name": "elmo", "projection_dim": 6, "cell_clip": 3, "proj_clip": 3, "dim": 24, "n_layers": 2},
        "token_embedder": {
            "name": "cnn", "activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 1,
            "word_dim": 3, "char_dim": 4, "max_characters_per_token": 12,
        },
        "dropout": 0.1,
    }  # fmt: skip
    return write_random_efml(tmp_path_factory.mktemp("efml") / "model", tiny, chars=chars, words=words, seed=3)


@pytest.mark.parametrize("lang", LANGS)
def test_an_elmoformanylangs_model_reads_each_script_through_its_lexicon(efml_folder, lang):
    nlp = elmo_pipeline(lang, weights=efml_folder)
    vocab = nlp.get_pipe("elmo").bilm.vocab
    alone = [vectors(nlp(text)) for text in TEXTS[lang]]
    together = [vectors(doc) for doc in nlp.pipe(TEXTS[lang], batch_size=3)]
    for a, b in zip(alone, together):
        assert np.isfinite(a).all() and a.shape == b.shape and np.abs(a - b).max() < 1e-6
    missing = {"de": "ß", "ru": "щ", "zh": "首", "ar": "ُ"}[lang]
    assert missing not in vocab.chars and vocab.chars.get(missing, vocab.char_oov) == vocab.char_oov
    token = next(t.text for text in TEXTS[lang] for t in nlp.make_doc(text) if missing in t.text)
    assert vocab.char_oov in vocab.ids(token)[1:]  # the unknown character reads as <oov>, the rest as itself


# ---------------------------------------------------------------------------------------------- the language resources


def test_stop_words_tokenizer_and_names_come_from_spacy():
    assert {"und", "der"} <= language("de").stop_words and "и" in language("ru").stop_words
    assert "的" in language("zh").stop_words and "في" in language("ar").stop_words
    from spacy.lang.en.stop_words import STOP_WORDS

    assert language("en").stop_words == STOP_WORDS and "und" not in language("en").stop_words
    assert [language(c).name for c in LANGS] == ["German", "Russian", "Chinese", "Arabic"]
    assert [language(c).conjunction for c in ("en", *LANGS)] == ["and", "und", "и", "和", "و"]
    nlp = language("zh").blank(sentencizer=True)
    assert [[t.text for t in s] for s in nlp("银行。河边！").sents] == [["银", "行", "。"], ["河", "边", "！"]]


def test_an_unknown_language_code_is_one_line_naming_it(capsys, tmp_path):
    with pytest.raises(LanguageError, match="unknown language code 'qq'"):
        language("qq")
    text = tmp_path / "a.txt"
    text.write_text("Eine Zeile.\n", encoding="utf-8")
    for argv in (
        ["prepare", text, "--out-dir", tmp_path / "prep", "--lang", "qq"],
        ["induce", text, "--out", tmp_path / "senses", "--lang", "qq"],
        ["change", text, text, "--out", tmp_path / "change", "--lang", "qq"],
        ["explore", text, "--word", "Zeile", "--lang", "qq"],
        ["package", ALLENNLP, tmp_path / "pipeline", "--lang", "qq"],
        ["embed", "Eine Zeile.", "--weights", ALLENNLP, "--lang", "qq"],
    ):
        code, out, err = run(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "unknown language code 'qq'" in lines[0], (argv, err)
        assert "Traceback" not in out + err
    assert not (tmp_path / "prep").exists() and not (tmp_path / "pipeline").exists()


def test_a_tokenizer_that_needs_a_package_is_one_line():
    pytest.importorskip("spacy.lang.ja")
    try:
        import sudachipy  # noqa: F401
    except ImportError:
        with pytest.raises(LanguageError, match="spaCy's tokenizer for 'ja' .*needs a package that is not installed"):
            language("ja").blank()
    else:  # pragma: no cover - only where SudachiPy is installed
        pytest.skip("SudachiPy is installed here: Japanese tokenizes")


def test_words_of_running_text_in_each_script():
    assert language("en").words("Don't café, naïve!") == ["Don't", "caf", "na", "ve"]  # English: ASCII, as before
    assert language("de").words("Grüße aus Köln, l'homme!") == ["Grüße", "aus", "Köln", "l'homme"]
    assert language("ru").words("Ёлка, подъезд.") == ["Ёлка", "подъезд"]
    assert language("zh").words("银行在河边, OK") == ["银", "行", "在", "河", "边", "OK"]
    assert language("ar").words("مُحَمَّد يقرأ.") == ["مُحَمَّد", "يقرأ"]  # vowel marks stay inside their word
    assert language("ar").is_word("مُحَمَّد") and not language("en").is_word("مُحَمَّد")


def test_naming_and_context_words_use_the_languages_stop_words():
    from spacy_elmo.induction.context import context_tokens
    from spacy_elmo.induction.naming import readable

    assert not readable("und", lang="de") and readable("und") and readable("ufer", lang="de")
    assert not readable("chapter") and readable("chapter", lang="de")  # English book apparatus is English only
    assert readable("河", lang="zh") and not readable("的", lang="zh") and not readable("x", lang="de")
    text = "Wir saßen auf der Bank und sahen den Booten zu."
    start = text.index("Bank")
    assert context_tokens(text, start, start + 4, lang="de") == ["saßen", "sahen", "Booten"]
    assert "und" in context_tokens(text, start, start + 4)  # English stop words would keep it


def test_forms_with_a_lookup_table_and_without(monkeypatch):
    """Without spacy-lookups-data a German word matches as typed (and the hint says so); with a
    lookup table (here a small stand-in for spaCy's), its inflected forms match too."""
    from spacy_elmo.induction.forms import forms_hint, target_forms
    from spacy_elmo.induction.induce import match_target
    from spacy_elmo.induction.substitutes import fold_vocabulary

    forms = target_forms({"Bank": []}, "de")
    monkeypatch.setattr(resources, "_lookup_table", lambda code: None)
    language.cache_clear()
    try:
        assert match_target("Bank", forms, "de") == "Bank" and match_target("Banken", forms, "de") is None
        assert "forms are matched as typed only: no lemma table for German" in forms_hint(["Bank"], "de")
        table = {"Banken": "Bank", "ging": "gehen"}
        monkeypatch.setattr(resources, "_lookup_table", lambda code: table if code == "de" else None)
        language.cache_clear()
        assert match_target("Banken", forms, "de") == "Bank" and match_target("banken", forms, "de") == "Bank"
        assert "by spaCy's lookup lemmas for German" in forms_hint(["Bank"], "de")
        fold = fold_vocabulary(["bank", "banken", "ging", "gehen", "gings"], bases=language("de").bases)
        assert fold.tolist() == [0, 0, 3, 3, 4]  # "gings": no lemma, no English -s rule
    finally:
        language.cache_clear()
    assert match_target("banks", target_forms({"bank": []})) == "bank"  # English keeps its rules


def test_the_symmetric_pattern_is_the_languages_and():
    from spacy_elmo.induction.induce import InductionSettings

    assert InductionSettings().pattern == "and" and InductionSettings(lang="de").pattern == "und"
    assert InductionSettings(lang="zh").pattern == "和" and InductionSettings(lang="xx").pattern is None
    assert InductionSettings(lang="de", pattern="oder").pattern == "oder" and InductionSettings(lang="de", pattern=None).pattern is None
    with pytest.raises(ValueError, match="unknown language code 'qq'"):
        InductionSettings(lang="qq")


# ---------------------------------------------------------------------------------------------- the commands


def test_prepare_lang_zh_splits_chinese_into_tokens(tmp_path, capsys):
    text = tmp_path / "zh.txt"
    text.write_text("银行在河边。我们坐在长椅上！\n中华人民共和国的首都是北京。\n", encoding="utf-8")
    code, out, err = run(capsys, "prepare", text, "--out-dir", tmp_path / "prep", "--lang", "zh", "--held-out", "0")
    assert code == 0, err
    lines = (tmp_path / "prep" / "train" / "shard-00000.txt").read_text(encoding="utf-8").splitlines()
    assert lines == ["银 行 在 河 边 。", "我 们 坐 在 长 椅 上 ！", "中 华 人 民 共 和 国 的 首 都 是 北 京 。"]
    assert json.loads((tmp_path / "prep" / "stats.json").read_text())["lang"] == "zh"


def test_pretrain_checks_the_language_prepare_recorded_and_records_it(tmp_path, capsys):
    prep = tmp_path / "prep"
    code, _, err = run(capsys, "prepare", GERMAN / "a.txt", GERMAN / "b.txt", "--out-dir", prep, "--lang", "de")
    assert code == 0, err
    code, out, err = run(capsys, "pretrain", prep, tmp_path / "run", "--lang", "ru")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "holds 'de' text" in lines[0] and not (tmp_path / "run").exists()
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"lstm_dim": 16, "projection_dim": 8, "char_dim": 4, "filters": [[1, 8], [2, 8]], "max_steps": 1,
                                  "warmup_steps": 1, "max_tokens": 256, "threads": 1, "eval_sentences": 4, "eval_every": 1}))
    code, out, err = run(capsys, "pretrain", prep, tmp_path / "run", "--config", config)
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["lang"] == "de"


def test_the_corpus_is_read_in_its_language():
    from spacy_elmo.induction.corpus import read_sentences

    (first, second) = read_sentences(["银行在河边。我们坐着！"], lang="zh")
    assert first.tokens == ["银", "行", "在", "河", "边", "。"] and second.tokens == ["我", "们", "坐", "着", "！"]
    assert second.text[slice(*second.spans[1])] == "们"


def test_frequent_words_leave_out_the_languages_stop_words():
    """What ``induce`` and ``change`` pick without --words: German content words under German stop
    words; under English ones, German function words would lead the list."""
    from spacy_elmo.induction.induce import frequent_words

    corpus = [GERMAN / "a.txt", GERMAN / "b.txt"]
    german = frequent_words(corpus, 5, min_count=5, lang="de")
    assert "bank" in german and not set(german) & GERMAN_STOP_WORDS
    english = frequent_words(corpus, 5, min_count=5, lang="en")
    assert {"der", "die", "auf"} <= set(english)


def test_induce_lang_de_uses_german_stop_words_and_never_english(tmp_path, capsys, monkeypatch):
    torch.set_num_threads(1)
    requested = []
    load = resources._load
    monkeypatch.setattr(resources, "_load", lambda code: requested.append(code) or load(code))
    language.cache_clear()
    try:
        out = tmp_path / "senses"
        argv = ["induce", GERMAN / "a.txt", GERMAN / "b.txt", "--lang", "de", "--out", out, "--n-words", "3", "--min-occurrences", "5"]
        code, printed, err = run(capsys, *argv, "--max-senses", "2", "--threads", "1")
    finally:
        language.cache_clear()
    assert code == 0, err
    assert requested and set(requested) == {"de"}, requested  # the language is passed down, never taken as English
    stop = GERMAN_STOP_WORDS
    saved = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("*.json"))]
    words = {s["word"] for s in saved}
    assert "bank" in words and not words & stop, words
    for senses in saved:
        for sense in senses["senses"]:
            named = sense["name"].split(": ", 1)[-1].split(" / ")
            assert not set(named) & stop, sense["name"]


def test_change_lang_de_compares_german_content_words(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "change"
    argv = ["change", GERMAN / "a.txt", GERMAN / "b.txt", "--lang", "de", "--out", out, "--n-words", "2", "--min-occurrences", "5"]
    code, printed, err = run(capsys, *argv, "--no-pages", "--resamples", "5", "--max-senses", "2", "--threads", "1")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    words = {w["word"] for w in report["words"]}
    assert "bank" in words and not words & GERMAN_STOP_WORDS, words
    assert report["settings"]["induction"]["lang"] == "de" and report["settings"]["induction"]["pattern"] == "und"


def test_change_and_explore_with_named_german_words(tmp_path, capsys):
    torch.set_num_threads(1)
    code, printed, err = run(
        capsys, "change", GERMAN / "a.txt", GERMAN / "b.txt", "--lang", "de", "--words", "Schloss", "--out", tmp_path / "change",
        "--no-pages", "--resamples", "5", "--min-occurrences", "3", "--threads", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "'Schloss': forms matched" in printed and "forms are matched as typed" in printed
    page = tmp_path / "bank.html"
    code, printed, err = run(capsys, "explore", GERMAN / "a.txt", GERMAN / "b.txt", page, "--word", "Bank", "--lang", "de", "--threads", "1")
    assert code == 0, err
    assert "saßen" in page.read_text(encoding="utf-8")  # the German sentences, shown as written


# ---------------------------------------------------------------------------------------------- training and packaging


def test_the_german_tagged_sample_is_what_spacy_convert_writes(tmp_path):
    from spacy.cli.convert import convert

    convert(GERMAN / "tagged.conllu", tmp_path, converter="conllu", n_sents=1, file_type="spacy")
    vocab = spacy.blank("de").vocab

    def read(path):
        return [[(t.text, t.tag_, t.pos_, t.head.i, t.dep_, t.is_sent_start) for t in d] for d in DocBin().from_disk(path).get_docs(vocab)]

    assert read(tmp_path / "tagged.spacy") == read(GERMAN / "tagged.spacy")
    assert len(read(GERMAN / "tagged.spacy")) == 8


def test_package_lang_de_writes_a_german_pipeline(tmp_path, capsys):
    code, out, err = run(capsys, "package", ALLENNLP, tmp_path / "pipeline", "--lang", "de", "--name", "elmo_de")
    assert code == 0, err
    nlp = spacy.load(tmp_path / "pipeline")
    assert nlp.lang == "de" and nlp.meta["lang"] == "de" and nlp.pipe_names == ["elmo"]
    doc = nlp("Wir saßen auf der Bank. Die Bank erhöht die Zinsen.")
    assert doc.tensor.shape == (12, 32) and np.isfinite(doc.tensor).all()
