"""The word sense induction scorer: the organisers' SemEval-2010 Task 14 baseline figures, and small cases by hand."""

from pathlib import Path

import pytest

from spacy_elmo.evaluation.wsi_score import paired_fscore, read_key, score, v_measure, write_key

KEYS = Path(__file__).parent / "data" / "wsi_semeval2010"


@pytest.fixture(scope="module")
def gold():
    return read_key(KEYS / "gold.all.key.gz")


@pytest.mark.parametrize(
    "key, fscore, vmeasure, clusters",
    [
        ("mfs_all.key.gz", 63.43, 0.0, 1.0),  # one cluster per word
        ("1cl1inst.key.gz", 0.10, 31.7, 89.15),  # one cluster per instance
        ("random1.key.gz", 32.05, 4.6, 3.99),
    ],
)
def test_official_baselines_reproduce(gold, key, fscore, vmeasure, clusters):
    result = score(read_key(KEYS / key), gold)
    assert result.n_words == 100 and result.n_instances == 8915 and result.n_missing == 0
    assert round(result.fscore, 2) == fscore  # the organisers' figures, to their rounding
    assert round(result.vmeasure, 1) == vmeasure
    assert round(result.clusters_per_word, 2) == clusters


def test_perfect_and_degenerate_clusterings():
    truth = {"a": "x", "b": "x", "c": "y", "d": "y"}
    same = {"a": "1", "b": "1", "c": "2", "d": "2"}
    assert paired_fscore(same, truth) == pytest.approx(1.0) and v_measure(same, truth) == pytest.approx(1.0)
    one = {i: "1" for i in truth}
    assert v_measure(one, truth) == 0.0
    assert paired_fscore(one, truth) == pytest.approx(2 * (2 / 6) * 1 / (2 / 6 + 1))  # 2 of 6 pairs right, all gold pairs found
    split = {"a": "1", "b": "2", "c": "3", "d": "4"}
    assert v_measure(split, truth) == pytest.approx(2 * 1 * 0.5 / 1.5)  # homogeneous, completeness 1 - log 2 / log 4


def test_left_out_instances_count_as_their_own_clusters():
    gold = {"w": {"a": "x", "b": "x", "c": "x"}}
    result = score({"w": {"a": "1", "b": "1"}}, gold)  # "c" left out: not one cluster with the others
    assert result.n_missing == 1 and result.per_word["w"][2] == 2
    assert result.fscore < 100.0


def test_graded_key_round_trip_takes_the_heaviest_label(tmp_path):
    path = tmp_path / "system.key"
    write_key(path, {"w.n": {"w.n.1": {"w.1": 0.3, "w.2": 0.7}, "w.n.2": "w.1"}})
    assert path.read_text().splitlines()[0] == "w.n w.n.1 w.2/0.7000 w.1/0.3000"
    assert read_key(path) == {"w.n": {"w.n.1": "w.2", "w.n.2": "w.1"}}


def test_bad_key_lines_are_named(tmp_path):
    path = tmp_path / "bad.key"
    path.write_text("w.n w.n.1 w.1\nw.n w.n.2\n")
    with pytest.raises(ValueError, match=r"bad.key, line 2: expected 'WORD INSTANCE LABEL"):
        read_key(path)
    path.write_text("w.n w.n.1 w.1/heavy\n")
    with pytest.raises(ValueError, match=r"line 1: weight 'heavy' of 'w.1' is not a number"):
        read_key(path)
    with pytest.raises(ValueError, match="not in the gold key"):
        score({}, {"w": {"a": "x"}}, ["v"])
