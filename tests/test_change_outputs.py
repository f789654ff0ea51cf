"""What ``change`` leaves on disk: everything is written beside ``--out`` and moved in whole, so a
failed run leaves the previous output untouched and a finished one holds no word of an earlier run;
the report shows the counts the binary call compared, and each word's saved senses carry what its
page shows (rank, measures with intervals, the binary call, each sense's status)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spacy_elmo.change.detect import ChangeReport, ChangeSettings, compare_word, rank_words
from spacy_elmo.change.report import OUTPUTS, binary_counts, explain, report_json, write_report
from spacy_elmo.files import write_into

from .explore_data import synthetic

pytest.importorskip("plotly", reason="the change pages need plotly (the test extra installs it)")


def word_change(word: str, in_a=(10, 8, 0), in_b=(10, 0, 12), seed=0):
    """A measured word whose three senses sit apart: ``in_a[k]`` occurrences of sense k in A, ``in_b[k]`` in B."""
    ws = synthetic(tuple(a + b for a, b in zip(in_a, in_b)), dim=12, seed=seed)
    ws.word = word
    order = np.concatenate(
        [np.flatnonzero(ws.labels == k)[: in_a[k]] for k in range(3)] + [np.flatnonzero(ws.labels == k)[in_a[k] :] for k in range(3)]
    )
    ws.occurrences = [ws.occurrences[i] for i in order]
    ws.weights, ws.vectors = ws.weights[order], ws.vectors[order]
    ws.extra["elmo_vectors"] = ws.vectors
    settings = ChangeSettings(vectors="elmo", n_resamples=10, min_occurrences=5)
    n_a = sum(in_a)
    return compare_word(ws, n_a, settings, (n_a, len(order) - n_a), ("old", "new"))


def report_of(*changes) -> ChangeReport:
    return ChangeReport(("old", "new"), "mahal", rank_words(list(changes), "mahal"), {"confidence": 0.95})


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------- write_into


def test_write_into_moves_everything_in_only_when_complete(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's own file")
    (out / "report.json").write_text("old")
    (out / "pages").mkdir()
    (out / "pages" / "stale.html").write_text("old word")

    def fails(scratch):
        (scratch / "report.json").write_text("new")
        raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError):
        write_into(out, fails, owned=OUTPUTS)
    assert (out / "report.json").read_text() == "old" and (out / "pages" / "stale.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no scratch folder left

    def works(scratch):
        (scratch / "report.json").write_text("new")
        (scratch / "pages").mkdir()
        (scratch / "pages" / "fresh.html").write_text("new word")
        return 7

    assert write_into(out, works, owned=OUTPUTS) == 7
    assert listing(out) == ["mine.txt", "pages", "pages/fresh.html", "report.json"]  # the old senses/ and pages/ words are gone
    assert (out / "mine.txt").read_text() == "the user's own file" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_into_refuses_a_file(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        write_into(tmp_path / "out", lambda scratch: None)


# ---------------------------------------------------------------------------------------------- write_report


def test_a_finished_run_keeps_no_stale_word(tmp_path):
    out = tmp_path / "out"
    write_report(report_of(word_change("bank"), word_change("cell", seed=1)), out)
    assert {"senses/bank.json", "senses/cell.json", "pages/bank.html", "pages/cell.html"} <= set(listing(out))
    write_report(report_of(word_change("play", seed=2)), out)
    names = listing(out)
    assert "senses/play.json" in names and "pages/play.html" in names
    assert not any("bank" in n or "cell" in n for n in names), names
    write_report(report_of(word_change("mouse", seed=3)), out, pages=False)
    assert not (out / "pages").exists() and "senses/mouse.json" in listing(out)  # no pages of an earlier run's words


def test_a_failed_change_run_leaves_the_previous_output(tmp_path, monkeypatch, capsys):
    """The command end to end: a run that fails while writing its pages changes nothing in --out."""
    import torch

    from spacy_elmo.cli.main import main
    from spacy_elmo.explore import page as explore

    from .test_cli_inputs import SENTENCES

    torch.set_num_threads(1)
    out = tmp_path / "out"
    write_report(report_of(word_change("cell")), out)
    before = {name: (out / name).read_bytes() for name in listing(out) if (out / name).is_file()}
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")

    def no_plotly(*args, **kwargs):
        raise ImportError(explore.PLOTLY_MISSING)

    monkeypatch.setattr(explore, "explore_page", no_plotly)
    args = ["change", str(corpus), str(corpus), "--words", "bank", "--out", str(out), "--min-occurrences", "5", "--resamples", "5"]
    assert main(args + ["--max-senses", "2"]) == 2
    assert "needs Plotly" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in listing(out) if (out / name).is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "out"]


def test_without_plotly_change_writes_everything_but_the_pages(tmp_path, monkeypatch, capsys):
    """Plotly is asked for before any work: without it the run still writes its report and senses,
    says the pages were skipped and how to add them; explore, whose page is all it writes, stops at once."""
    import torch

    from spacy_elmo.cli.main import main
    from spacy_elmo.explore import page as explore

    from .test_cli_inputs import SENTENCES

    torch.set_num_threads(1)
    monkeypatch.setattr(explore, "plotly_available", lambda: False)
    corpus, out = tmp_path / "a.txt", tmp_path / "out"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    args = ["change", str(corpus), str(corpus), "--words", "bank", "--out", str(out), "--min-occurrences", "5", "--resamples", "5"]
    assert main(args + ["--max-senses", "2"]) == 0
    err = capsys.readouterr().err
    assert "pages will be skipped" in err and "pages/ skipped" in err and "pip install" in err
    assert (out / "report.json").is_file() and (out / "report.tsv").is_file() and (out / "senses").is_dir()
    assert not (out / "pages").exists()
    assert main(["explore", str(corpus), "--word", "bank"]) == 2
    assert "needs Plotly" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "out"]


# ---------------------------------------------------------------------------------------------- the binary call's counts


def test_the_report_shows_the_counts_the_binary_call_compared():
    """A has 40 occurrences, B 10: the call scales A's counts to a sample of 10, and the report shows those."""
    change = word_change("bank", in_a=(30, 10, 0), in_b=(5, 0, 5))
    a, b = binary_counts(change)
    assert sum(a) == 10 and a[0] == 8 and a[1] == 2 and b == [5, 0, 5]
    record = report_json(report_of(change))["words"][0]
    assert record["binary_counts_a"] == a and record["binary_counts_b"] == b
    by_id = {s["id"]: s for s in record["senses"]}
    assert by_id[0]["count_a"] == 30 and by_id[0]["binary_count_a"] == 8  # the unscaled count and the one compared
    lines = explain(change, ("old", "new"))
    appeared = next(line for line in lines if "(appeared" in line)
    assert "(appeared: 0 -> 5 in samples of 10; p = " in appeared, lines


def test_recorded_counts_are_shown_as_recorded():
    change = word_change("bank")
    assert binary_counts(change) == (change.binary_counts_a, change.binary_counts_b)  # the binary call's own, when it ran
    change.binary_counts_a, change.binary_counts_b = [], []  # as for a word read back from saved senses
    change.word_senses.extra["change"] = {"binary_counts_a": [1, 2, 3], "binary_counts_b": [3, 2, 1]}
    assert binary_counts(change) == ([1, 2, 3], [3, 2, 1])


def test_saved_senses_carry_what_the_page_shows(tmp_path):
    from spacy_elmo.induction.induced import load_word_senses

    out = tmp_path / "out"
    write_report(report_of(word_change("bank"), word_change("play", in_a=(10, 8, 0), in_b=(10, 8, 0), seed=1)), out)
    saved = json.loads((out / "report.json").read_text())
    bank = next(w for w in saved["words"] if w["word"] == "bank")
    change = load_word_senses(out / "senses" / "bank.json").extra["change"]
    assert change["rank"] == bank["rank"] and change["ranked"] == 2 and change["measure"] == "mahal"
    assert change["measures"] == bank["measures"] and change["intervals"] == bank["intervals"]
    assert change["names"]["apd_c"] == "APD-c" and change["confidence"] == 0.95 and change["changed"] == bank["changed"]
    assert change["statuses"] == [s["status"] for s in sorted(bank["senses"], key=lambda s: s["id"])]
    assert change["binary_counts"] == [bank["binary_counts_a"], bank["binary_counts_b"]]
