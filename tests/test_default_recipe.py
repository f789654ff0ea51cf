"""The default model's recipe helpers: extra training text, shard mixing, float16 softmax."""
import gzip

import torch
from extra_text import write_extra_training_text, write_ud_text

from spacy_elmo.training.corpus import mix_train_shards
from spacy_elmo.training.ship import half_softmax

CONLLU = "# sent_id = a\n# text = Hello there .\n1\tHello\t_\t_\t_\t_\t0\troot\t_\t_\n\n# text = Second one\n1\tSecond\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
SEMCOR = ('<?xml version="1.0" encoding="UTF-8" ?><corpus lang="en"><text id="d0"><sentence id="d0.s0">'
          '<wf lemma="the" pos="DET">The</wf><instance id="x" lemma="grand_jury" pos="NOUN">Grand_Jury</instance>'
          '<wf lemma="``" pos=".">``</wf><wf lemma="say" pos="VERB">said</wf><wf lemma="\'\'" pos=".">\'\'</wf></sentence></text></corpus>')


def make_root(tmp_path):
    root = tmp_path / "data"
    (root / "ud_english_ewt").mkdir(parents=True)
    for part in ("train", "dev", "test"):
        with gzip.open(root / "ud_english_ewt" / f"en_ewt-ud-{part}.conllu.gz", "wt", encoding="utf-8") as fh:
            fh.write(CONLLU.replace("Hello", part.title()))
    (root / "wsd_raganato" / "Training_Corpora" / "SemCor").mkdir(parents=True)
    with gzip.open(root / "wsd_raganato" / "Training_Corpora" / "SemCor" / "semcor.data.xml.gz", "wt", encoding="utf-8") as fh:
        fh.write(SEMCOR)
    (root / "wic").mkdir()
    (root / "wic" / "train.data.txt").write_text("carry\tV\t2-1\tYou must carry it .\tSound carries .\nx\tN\t0-0\tYou must carry it .\tNew one .\n")
    (root / "wic" / "test.data.txt").write_text("secret\tN\t0-0\tTEST ONLY .\tTEST TWO .\n")
    return root


def test_extra_text_uses_training_portions_only(tmp_path):
    root = make_root(tmp_path)
    counts = write_extra_training_text(root, tmp_path / "extra")
    assert counts == {"ud_english_ewt_train.txt": 2, "semcor.txt": 1, "wic_train.txt": 3}
    text = "".join(p.read_text() for p in (tmp_path / "extra").glob("*.txt"))
    assert "Train there ." in text and "Dev" not in text and "Test there" not in text and "TEST ONLY" not in text
    assert 'The Grand Jury " said "' in text
    assert (tmp_path / "extra" / "manifest.tsv").read_text().count("\ttrain") == 3
    ud = write_ud_text(root, tmp_path / "ud")
    assert sum(ud.values()) == 6 and "en_ewt_test.txt\ttest" in (tmp_path / "ud" / "manifest.tsv").read_text()


def test_mix_train_shards_keeps_every_sentence(tmp_path):
    train = tmp_path / "corpus" / "train"
    train.mkdir(parents=True)
    lines = [f"sentence {i}\n" for i in range(25)]
    (train / "shard-00000.txt").write_text("".join(lines[:20]))
    (train / "shard-00001.txt").write_text("".join(lines[20:]))
    assert mix_train_shards(tmp_path / "corpus", seed=3, shard_size=10) == 25
    shards = sorted(train.glob("shard-*.txt"))
    assert [len(p.read_text().splitlines()) for p in shards] == [10, 10, 5]
    mixed = [line for p in shards for line in p.read_text().splitlines(keepends=True)]
    assert sorted(mixed) == sorted(lines) and mixed != lines


def test_half_softmax(tmp_path):
    state = {"weight": torch.randn(7, 4), "bias": torch.randn(7)}
    torch.save(state, tmp_path / "softmax.pt")
    half_softmax(tmp_path / "softmax.pt", tmp_path / "half.pt")
    loaded = torch.load(tmp_path / "half.pt", weights_only=True)
    assert loaded["weight"].dtype == torch.float16
    assert torch.allclose(loaded["weight"].float(), state["weight"], atol=1e-2)
