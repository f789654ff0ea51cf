"""Plain-text training portions of the other English evaluation sets (the spaCy project's assets).

The embedded default model is trained on the Gutenberg books plus the *training* portions of
sets whose licence allows it: UD English EWT train (web text, CC BY-SA 4.0), SemCor (the WSD
training corpus, Brown-corpus text) and the WiC train sentences. Dev and test portions of any
set we evaluate on are never written into a training folder. Each sentence becomes its own
paragraph (blank-line separated) in a UTF-8 file; a ``manifest.tsv`` assigns the split, so the
folder is an ordinary input of ``python -m spacy_elmo prepare``. Run from the project folder:
``python scripts/extra_text.py write DATA_ROOT EXTRA_OUT UD_OUT``.

:func:`write_extra_training_text` writes the training folder; :func:`write_ud_text` writes UD
EWT's train/dev/test *text* as a corpus folder (for held-out perplexity on modern English).
"""
from __future__ import annotations

import gzip
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

from spacy_elmo.assets import data_file, require_files

_QUOTES = {"``": '"', "''": '"'}


def ud_sentences(conllu_gz: Path) -> Iterator[str]:
    """The ``# text =`` line of every sentence of a CoNLL-U(.gz) file."""
    opener = gzip.open if str(conllu_gz).endswith(".gz") else open
    with opener(conllu_gz, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        for line in fh:
            if line.startswith("# text = "):
                text = line[len("# text = ") :].strip()
                if text:
                    yield text


def semcor_sentences(xml_gz: Path) -> Iterator[str]:
    """SemCor sentences as text (multiword units' underscores become spaces, `` '' become ")."""
    opener = gzip.open if str(xml_gz).endswith(".gz") else open
    with opener(xml_gz, "rb") as fh:  # type: ignore[operator]
        for _, elem in ET.iterparse(fh, events=("end",)):
            if elem.tag != "sentence":
                continue
            words = [_QUOTES.get(w.text or "", (w.text or "").replace("_", " ")) for w in elem if w.tag in ("wf", "instance")]
            text = " ".join(w for w in words if w)
            if text:
                yield text
            elem.clear()


def wic_sentences(data_txt: Path) -> Iterator[str]:
    """Both example sentences of every WiC pair in a ``*.data.txt`` file (deduplicated)."""
    seen = set()
    with Path(data_txt).open(encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            for text in parts[3:5]:
                if text and text not in seen:
                    seen.add(text)
                    yield text


def _write(path: Path, sentences: Iterator[str]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for text in sentences:
            fh.write(text + "\n\n")
            n += 1
    return n


def _manifest(folder: Path, rows: Sequence[Sequence[str]]) -> None:
    with (folder / "manifest.tsv").open("w", encoding="utf-8") as fh:
        fh.write("file\tsplit\n")
        for name, split in rows:
            fh.write(f"{name}\t{split}\n")


def write_extra_training_text(data_root: Path, out_dir: Path) -> Dict[str, int]:
    """UD EWT train + SemCor + WiC train sentences as a ``prepare`` input folder (all ``train``)."""
    data_root, out_dir = Path(data_root), Path(out_dir)
    semcor = data_root / "wsd_raganato" / "Training_Corpora" / "SemCor"
    require_files(data_root / "ud_english_ewt", ["en_ewt-ud-train.conllu"], "UD English EWT", "--vars.data_root")
    require_files(semcor, ["semcor.data.xml"], "SemCor", "--vars.data_root")
    require_files(data_root / "wic", ["train.data.txt"], "WiC", "--vars.data_root")
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = {
        "ud_english_ewt_train.txt": ud_sentences(data_file(data_root / "ud_english_ewt" / "en_ewt-ud-train.conllu")),
        "semcor.txt": semcor_sentences(data_file(semcor / "semcor.data.xml")),
        "wic_train.txt": wic_sentences(data_root / "wic" / "train.data.txt"),
    }
    counts = {name: _write(out_dir / name, sentences) for name, sentences in sources.items()}
    _manifest(out_dir, [(name, "train") for name in sources])
    return counts


def write_ud_text(data_root: Path, out_dir: Path) -> Dict[str, int]:
    """UD EWT's train/dev/test text as a ``prepare`` input folder (its own splits)."""
    data_root, out_dir = Path(data_root), Path(out_dir)
    names = [f"en_ewt-ud-{part}.conllu" for part in ("train", "dev", "test")]
    require_files(data_root / "ud_english_ewt", names, "UD English EWT", "--vars.data_root")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: List[List[str]] = []
    counts = {}
    for part, split in (("train", "train"), ("dev", "dev"), ("test", "test")):
        name = f"en_ewt_{part}.txt"
        counts[name] = _write(out_dir / name, ud_sentences(data_file(data_root / "ud_english_ewt" / f"en_ewt-ud-{part}.conllu")))
        rows.append([name, split])
    _manifest(out_dir, rows)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """``write DATA_ROOT EXTRA_OUT UD_OUT`` or ``mix CORPUS_DIR [--seed N]``."""
    import argparse

    from spacy_elmo.training.corpus import mix_train_shards

    ap = argparse.ArgumentParser(prog="python scripts/extra_text.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="the extra training text folder and the UD EWT text folder")
    write.add_argument("data_root", type=Path, help="the evaluation data folder (project/assets/data from the repository root)")
    write.add_argument("extra_out", type=Path)
    write.add_argument("ud_out", type=Path)
    mix = sub.add_parser("mix", help="shuffle a prepared corpus's training sentences across its shards")
    mix.add_argument("corpus", type=Path)
    mix.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.command == "write":
        try:
            counts = {**write_extra_training_text(args.data_root, args.extra_out), **write_ud_text(args.data_root, args.ud_out)}
        except FileNotFoundError as exc:
            print(exc, file=sys.stderr)
            return 2
        for name, n in counts.items():
            print(f"{name}: {n:,} sentences")
    else:
        print(f"{mix_train_shards(args.corpus, args.seed):,} training sentences shuffled across shards")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
