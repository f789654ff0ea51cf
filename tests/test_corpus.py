"""Corpus preparation keeps every line: both layouts, over-long text, held-out splits, gzip, counts."""
import gzip
import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_elmo.cli import main
from spacy_elmo.training.baseline import unigram_perplexity
from spacy_elmo.training.corpus import detect_layout, prepare_corpus, read_vocab, text_files
from spacy_elmo.training.data import Vocabulary, evaluation_shards

WORDS = "the a dog cat runs sees house river old new king quiet".split()


def one_per_line(n: int, seed: int = 0, length: int = 8) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(length)) + " ." for _ in range(n)]


def shard_lines(folder: Path) -> list:
    return [line for split in ("train", "valid", "test") for p in sorted((folder / split).glob("shard-*.txt")) for line in p.read_text(encoding="utf-8").splitlines()]


def test_six_thousand_sentences_one_per_line_are_all_kept(tmp_path):
    """The 1B Word Benchmark layout: before the fix this kept 2,935 of 6,000 sentences, counting no loss."""
    lines = one_per_line(6000)
    (tmp_path / "lm1b.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = prepare_corpus([tmp_path / "lm1b.txt"], tmp_path / "out")
    assert sum(s.sentences for s in stats.values()) == 6000
    assert sum(s.tokens for s in stats.values()) == 54000
    assert stats["train"].layouts == {"line": 1} and stats["train"].lines == 6000
    assert stats["train"].split_units == 0 and stats["train"].skipped_lines == 0
    assert sorted(shard_lines(tmp_path / "out")) == sorted(lines)


def test_a_single_file_gets_a_held_out_valid_and_test_split(tmp_path):
    (tmp_path / "one.txt").write_text("\n".join(one_per_line(4000)) + "\n", encoding="utf-8")
    stats = prepare_corpus([tmp_path / "one.txt"], tmp_path / "out", held_out=0.1)
    total = sum(s.sentences for s in stats.values())
    assert total == 4000
    assert 0.02 < stats["valid"].sentences / total < 0.09 and 0.02 < stats["test"].sentences / total < 0.09
    again = prepare_corpus([tmp_path / "one.txt"], tmp_path / "again", held_out=0.1)
    assert {k: v.sentences for k, v in again.items()} == {k: v.sentences for k, v in stats.items()}  # deterministic
    # the vocabulary counts train text only; held-out sentences never count
    tokens, counts = read_vocab(tmp_path / "out" / "vocab.txt")
    assert counts[0] == counts[1] == stats["train"].sentences
    assert sum(counts[3:]) + counts[2] == stats["train"].tokens
    none = prepare_corpus([tmp_path / "one.txt"], tmp_path / "none", held_out=0)
    assert none["train"].sentences == 4000 and not (tmp_path / "none" / "valid").exists()


def test_manifest_splits_turn_the_held_out_fraction_off(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(one_per_line(300)), encoding="utf-8")
    (tmp_path / "v.txt").write_text("\n".join(one_per_line(20, seed=1)), encoding="utf-8")
    (tmp_path / "manifest.tsv").write_text("file\tsplit\na.txt\ttrain\nv.txt\tdev\n", encoding="utf-8")
    stats = prepare_corpus([tmp_path], tmp_path / "out", held_out=0.5)
    assert (stats["train"].sentences, stats["valid"].sentences, stats["test"].sentences) == (300, 20, 0)


def test_paragraph_layout_joins_wrapped_lines_and_detection_tells_the_layouts_apart(tmp_path):
    book = "It was a dark night, and the old\nking walked by the river.\n\nThe dog ran\nhome. The cat slept.\n"
    (tmp_path / "book.txt").write_text(book * 50, encoding="utf-8")
    (tmp_path / "lines.txt").write_text("\n".join(one_per_line(50)), encoding="utf-8")
    assert detect_layout(tmp_path / "book.txt") == "paragraph"
    assert detect_layout(tmp_path / "lines.txt") == "line"
    stats = prepare_corpus([tmp_path / "book.txt"], tmp_path / "out", held_out=0)
    assert stats["train"].sentences == 150 and stats["train"].layouts == {"paragraph": 1}
    assert "It was a dark night , and the old king walked by the river ." in shard_lines(tmp_path / "out")
    as_lines = prepare_corpus([tmp_path / "book.txt"], tmp_path / "as-lines", held_out=0, layout="line")
    assert as_lines["train"].layouts == {"line": 1} and as_lines["train"].sentences > 150  # each wrapped line alone


def test_over_long_paragraphs_and_lines_are_split_and_counted_never_cut(tmp_path):
    lines = one_per_line(3000)  # one paragraph of ~150K characters (no blank line), then one 40K-character line
    long_line = " ".join(["word"] * 8000)
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n\n" + long_line + "\n", encoding="utf-8")
    stats = prepare_corpus([tmp_path / "big.txt"], tmp_path / "out", held_out=0, layout="paragraph", max_chars=10_000)
    assert stats["train"].split_units >= 14  # ~150K / 10K for the paragraph, 4 for the line
    assert stats["train"].tokens == 3000 * 9 + 8000
    joined = "".join(shard_lines(tmp_path / "out")).replace(" ", "")
    assert joined == ("".join(lines) + long_line).replace(" ", "")


@settings(max_examples=40, deadline=None, database=None)
@given(
    st.lists(
        st.one_of(st.just(""), st.text(alphabet=st.sampled_from(list("abc xyz.!?,'\t")), min_size=1, max_size=300)),
        min_size=1, max_size=60,
    ),
    st.sampled_from(["auto", "line", "paragraph"]),
    st.integers(min_value=20, max_value=400),
)
def test_property_no_character_is_lost_without_being_counted(tmp_path_factory, lines, layout, max_chars):
    folder = tmp_path_factory.mktemp("prop")
    text = "\n".join(lines) + "\n"
    (folder / "in.txt").write_bytes(text.encode("utf-8") + b"\xff\xfe broken line\n")
    if not text.strip():  # nothing to keep: an error, and no empty corpus is written
        with pytest.raises(ValueError, match="no sentences in"):
            prepare_corpus([folder / "in.txt"], folder / "out", layout=layout, held_out=0.3, max_chars=max_chars)
        assert not (folder / "out").exists()
        return
    stats = prepare_corpus([folder / "in.txt"], folder / "out", layout=layout, held_out=0.3, max_chars=max_chars)
    out = "".join(shard_lines(folder / "out")).replace(" ", "")
    assert sorted(out) == sorted("".join(text.split()))  # every non-space character (held-out blocks move whole units)
    assert sum(s.skipped_lines for s in stats.values()) == 1
    assert sum(s.tokens for s in stats.values()) == sum(len(line.split(" ")) for line in shard_lines(folder / "out"))


def test_folder_scans_take_plain_gz_files_and_report_truncated_gzip(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    with gzip.open(folder / "news.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(one_per_line(30)))
    (folder / "notes.txt").write_text("\n".join(one_per_line(10, seed=2)), encoding="utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG")
    assert sorted(p.name for p in text_files([folder])["train"]) == ["news.gz", "notes.txt"]
    assert prepare_corpus([folder], tmp_path / "out", held_out=0)["train"].sentences == 40
    data = (folder / "news.gz").read_bytes()
    (folder / "news.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"news\.gz.*truncated"):
        prepare_corpus([folder], tmp_path / "out2", held_out=0)


def test_prepare_command_reports_lines_and_splits(tmp_path, capsys):
    (tmp_path / "one.txt").write_text("\n".join(one_per_line(500)), encoding="utf-8")
    assert main(["prepare", str(tmp_path / "one.txt"), "--out-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "500 lines" in out and "over-long units split" in out
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["valid"]["sentences"] > 0 and stats["held_out"] == 0.02
    assert main(["prepare", str(tmp_path / "one.txt"), "--out-dir", str(tmp_path / "o2"), "--layout", "pages"]) == 2
    assert "--layout 'pages'" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_prepare_on_empty_text_is_an_error_and_writes_nothing(tmp_path, capsys, content):
    (tmp_path / "empty.txt").write_text(content, encoding="utf-8")
    assert main(["prepare", str(tmp_path / "empty.txt"), "--out-dir", str(tmp_path / "out")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress line
    assert "no sentences in" in last and "empty.txt" in last and "nothing was written" in last, last
    assert not (tmp_path / "out").exists()


def test_unigram_baseline_uses_the_real_unk_count_and_the_biLMs_predictions(tmp_path):
    rng = random.Random(3)
    rare = [f"rare{i}" for i in range(400)]
    lines = [" ".join(rng.choice(WORDS + rare[:20]) for _ in range(rng.randint(3, 120))) for _ in range(600)]
    (tmp_path / "t.txt").write_text("\n".join(lines), encoding="utf-8")
    prepare_corpus([tmp_path / "t.txt"], tmp_path / "out", max_vocab=10, held_out=0.2)
    vocab = Vocabulary.load(tmp_path / "out" / "vocab.txt")
    assert vocab.counts[2] > 0  # <UNK> carries the count of the tokens left out
    # exactly the pieces (cut at 50 tokens) that the biLM's perplexity scores
    pieces = [p for shard in evaluation_shards(tmp_path / "out", "test", 50) for p in shard]
    sentences = sum(len(p.read_text().splitlines()) for p in (tmp_path / "out" / "test").glob("shard-*.txt"))
    assert max(len(p) for p in pieces) == 50 and len(pieces) > sentences
    ppl = unigram_perplexity(vocab, tmp_path / "out", "test")
    total = sum(vocab.counts) + len(vocab)
    ids = [i for p in pieces for i in vocab.ids(p) + [vocab.EOS]]

    expected = math.exp(-sum(math.log((vocab.counts[i] + 1) / total) for i in ids) / len(ids))
    assert ppl == pytest.approx(expected, rel=1e-12)
    zero_unk = Vocabulary(vocab.tokens, [c if i != 2 else 0 for i, c in enumerate(vocab.counts)])
    assert unigram_perplexity(zero_unk, tmp_path / "out", "test") > ppl  # what the old count of 0 overstated
