"""Progress lines in logs read as a person writes amounts: 51.9MB, not 5.44019e+07/5.44019e+07 Bs."""
from __future__ import annotations

import io

from spacy_elmo.progress import LineProgress


def closing_line(**kwargs) -> str:
    stream = io.StringIO()
    bar = LineProgress(file=stream, every=3600, **kwargs)
    bar.start -= 4.0  # four seconds ago
    bar.update(kwargs["total"] if kwargs.get("total") else 5167)
    bar.close()
    return stream.getvalue().strip()


def test_a_download_reads_in_bytes_with_prefixes():
    line = closing_line(desc="weights.hdf5", total=54_401_872, unit="B", unit_scale=True, unit_divisor=1024)
    assert line.startswith("weights.hdf5: 51.9MB/51.9MB (100%), 1")  # ~13MB/s
    assert "MB/s" in line and "e+" not in line and "Bs" not in line


def test_large_counts_have_separators_and_no_exponent():
    line = closing_line(desc="embed", total=54_401_872, unit="token")
    assert line.startswith("embed: 54,401,872/54,401,872 tokens (100%)"), line
    assert closing_line(desc="index", unit="token").startswith("index: 5,167 tokens,")


def test_steps_keep_their_plural():
    assert closing_line(desc="train", total=400, unit="step").startswith("train: 400/400 steps (100%)")
