"""The spaCy project's data: asset definitions that validate and are pinned, no default reading
outside the clone, one-line errors when the data is missing, and the checks run against a local
copy when one is present (the ``shared/data`` folder beside the repository, or ``SPACY_ELMO_DATA_COPY``)."""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from weasel.util import load_project_config

from spacy_elmo.cli import main

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"
LOCAL_COPY = Path(os.environ.get("SPACY_ELMO_DATA_COPY", REPO.parent / "shared" / "data"))
needs_copy = pytest.mark.skipif(not LOCAL_COPY.is_dir(), reason=f"no local copy of the evaluation data at {LOCAL_COPY} (set SPACY_ELMO_DATA_COPY)")


@pytest.fixture(scope="module")
def config():
    return load_project_config(PROJECT)  # validates project.yml against weasel's schema


def test_assets_are_pinned_with_checksums_and_licences(config):
    assets = config["assets"]
    datasets = {Path(a["dest"]).parts[2] if a["dest"].startswith("assets/data/") else Path(a["dest"]).name for a in assets}
    assert {"ud_english_ewt", "wnut17_ner", "WiC_dataset.zip", "WSD_Evaluation_Framework.zip"} <= datasets
    for asset in assets:
        assert asset["dest"].startswith("assets/"), asset["dest"]
        url = asset["url"]
        book = re.fullmatch(r"https://www\.gutenberg\.org/cache/epub/(\d+)/pg(\d+)\.txt", url)
        if url.startswith("https://www.cs.york.ac.uk/semeval2010_WSI/files/"):  # unversioned: unpack-wsi checks the files
            assert "checksum" not in asset and "no checksum" in asset["description"]
            assert re.search(r"Terms", asset["description"])
            continue
        if book:  # Project Gutenberg has no versions: convert-corpora checks the converted text instead
            assert book[1] == book[2] and asset["dest"] == f"assets/downloads/gutenberg/pg{book[1]}.txt"
            assert "checksum" not in asset and "no checksum" in asset["description"]
        else:
            pinned = re.search(r"/[0-9a-f]{40}/", url) or "/r2.16/" in url or url.endswith(".zip")
            assert pinned, f"{url} is not pinned to a commit or a release"
        if not url.endswith(".zip") and not book:  # zips are checked by unpack-assets (SHA-256)
            assert re.fullmatch(r"[0-9a-f]{32}", asset.get("checksum", "")), f"{asset['dest']} has no MD5 checksum"
        assert re.search(r"Licen[cs]e|Terms|licence", asset["description"]), f"{asset['dest']}: no licence note"


def _manifest(name: str) -> list:
    with open(PROJECT / "assets" / "manifests" / f"{name}.tsv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_every_corpus_file_is_an_asset(config):
    """Each Gutenberg book and CRAFT article (text and copyright notice) of the manifests is fetched,
    the books through the mirror variable, CRAFT from one pinned commit."""
    dests = {a["dest"]: a for a in config["assets"]}
    books = _manifest("gutenberg_en_books")
    assert len(books) == 112 and {b["split"] for b in books} == {"train", "valid", "test"}
    for book in books:
        assert f"assets/downloads/gutenberg/pg{book['pg_ebook']}.txt" in dests, book["pg_ebook"]
    articles = _manifest("craft_biomed_fulltext")
    assert len(articles) == 97 and {a["split"] for a in articles} == {"train", "dev", "test"}
    commits = set()
    for article in articles:
        for suffix in (".txt", ".copyright"):
            asset = dests[f"assets/downloads/craft/{article['pmid']}{suffix}"]
            commits.add(re.search(r"/CRAFT/([0-9a-f]{40})/", asset["url"])[1])
    assert len(commits) == 1 and "assets/downloads/craft/LICENSE.txt" in dests
    mirrored = load_project_config(PROJECT, overrides={"vars.gutenberg_mirror": "http://127.0.0.1:9"})
    urls = [a["url"] for a in mirrored["assets"] if a["dest"].startswith("assets/downloads/gutenberg/")]
    assert len(urls) == 112 and all(u.startswith("http://127.0.0.1:9/cache/epub/") for u in urls)


def test_corpus_commands_follow_data_root(config):
    """`full` reads ${vars.books}/${vars.biomed}, which live under data_root unless given."""
    moved = load_project_config(PROJECT, overrides={"vars.data_root": "/copy"})
    scripts = {c["name"]: " ".join(c.get("script", [])) for c in moved["commands"]}
    assert "prepare /copy/gutenberg_en_books " in scripts["prepare-general-full"]
    assert "prepare /copy/craft_biomed_fulltext " in scripts["prepare-domain-full"]
    assert "/copy/gutenberg_en_books" in scripts["convert-corpora"] and "--books /copy/gutenberg_en_books" in scripts["neighbours-default"]
    assert "convert-corpora" in moved["workflows"]["data"]


def test_no_default_reads_outside_the_clone(config):
    for name, value in config["vars"].items():
        text = str(value)
        assert not text.startswith("/") and "../.." not in text, f"var {name}={value} points outside the clone"
    for command in config["commands"]:
        for line in command.get("script", []):
            assert "../.." not in line and "shared/data" not in line, f"{command['name']}: {line}"


def test_evaluation_commands_without_data_name_spacy_project_assets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["wic"], ["wsd"], ["wic", "--data", str(tmp_path / "nowhere")]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "spacy project assets" in err, err
    result = subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "downstream.py"), "prepare", "--ud", str(tmp_path / "ud")],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300,
    )
    assert result.returncode != 0 and result.stderr.strip().count("\n") == 0 and "spacy project assets" in result.stderr
    result = subprocess.run([sys.executable, str(PROJECT / "scripts" / "assets.py"), "check", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1 and "spacy project assets" in result.stderr


def _md5(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        return hashlib.md5(handle.read()).hexdigest()


@needs_copy
def test_local_copy_matches_the_pinned_assets(config):
    """The MD5 in project.yml is that of the same file in the local copy (gzipped there or not)."""
    for asset in config["assets"]:
        if "checksum" not in asset:
            continue
        relative = Path(asset["dest"])
        if relative.parts[:3] == ("assets", "downloads", "craft"):  # kept gzipped under articles/ in the copy
            name = relative.name
            relative = Path("craft_biomed_fulltext") / (name if name == "LICENSE.txt" else Path("articles") / name)
        else:
            relative = relative.relative_to("assets/data")
        local = LOCAL_COPY / relative
        local = local if local.is_file() else local.with_name(local.name + ".gz")
        assert _md5(local) == asset["checksum"], relative


@needs_copy
def test_workflow_pieces_run_against_the_local_copy():
    """`spacy project run check-assets` with data_root pointed at the copy; then `wic`'s data check passes."""
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "project", "run", "check-assets", str(PROJECT), "--vars.data_root", str(LOCAL_COPY)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for dataset in ("ud", "wic", "wnut", "wsd", "books", "craft"):
        assert f"{dataset}: " in result.stdout and "files OK" in result.stdout
    from spacy_elmo.assets import require_files

    require_files(LOCAL_COPY / "wic", ["train.data.txt", "test.gold.txt"], "WiC")


# ---- convert-corpora: the downloads in the layout `prepare` reads -------------------------------

SCRIPT = PROJECT / "scripts" / "corpora.py"
SAMPLES = PROJECT / "assets"


def _wrap_gutenberg(text: str, number: str, produced_by: bool, credit: str = "Produced by A. Volunteer and David Widger\n\n\n") -> bytes:
    """A body in Project Gutenberg's plain-text dress: BOM, CRLF, header, licence footer."""
    credit = credit if produced_by else ""
    raw = (
        f"\ufeffThe Project Gutenberg eBook of Something, by Someone\n\nThis eBook is for the use of anyone anywhere...\n\n"
        f"Release Date: 1994 [eBook #{number}]\n\n*** START OF THE PROJECT GUTENBERG EBOOK SOMETHING ***\n"
        f"{credit}{text}\n\n\n\n*** END OF THE PROJECT GUTENBERG EBOOK SOMETHING ***\n\nUpdated editions will replace the previous one...\n"
    )
    return raw.replace("\n", "\r\n").encode("utf-8")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


def _sample_books(tmp_path: Path, produced_by: bool = True):
    """Raw downloads made from the six in-repo sample books, and a manifest of those six."""
    sys.path.insert(0, str(PROJECT / "scripts"))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    sample = {r["pg_ebook"]: r for r in csv.DictReader(open(SAMPLES / "general_sample" / "manifest.tsv", encoding="utf-8"), delimiter="\t")}
    rows = [row for row in _manifest("gutenberg_en_books") if row["pg_ebook"] in sample]
    assert len(rows) == 6
    texts = {}
    for row in rows:
        text = gzip.open(SAMPLES / "general_sample" / sample[row["pg_ebook"]]["file"], "rb").read().decode("utf-8")
        texts[row["pg_ebook"]] = text
        # a credit line can only have preceded a text that starts at once (the rule drops blank lines after it)
        (downloads / f"pg{row['pg_ebook']}.txt").write_bytes(_wrap_gutenberg(text, row["pg_ebook"], produced_by and text[:1] != "\n"))
    manifest = tmp_path / "books.tsv"
    with open(manifest, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return downloads, manifest, texts


def test_gutenberg_conversion_gives_back_the_texts_our_figures_used(tmp_path):
    downloads, manifest, texts = _sample_books(tmp_path)
    out = tmp_path / "books"
    result = _run("gutenberg", downloads, out, "--manifest", manifest)
    assert result.returncode == 0, result.stderr
    assert "6 of 6 books identical" in result.stdout and "revised" not in result.stdout
    for number, text in texts.items():
        assert gzip.open(out / "books" / f"pg{number}.txt.gz", "rb").read().decode("utf-8") == text
    written = list(csv.DictReader(open(out / "manifest.tsv", encoding="utf-8"), delimiter="\t"))
    assert [(r["file"], r["split"]) for r in written] == [(f"books/pg{n}.txt.gz", r["split"]) for n, r in zip(texts, written)]
    prepared = subprocess.run([sys.executable, "-m", "spacy_elmo", "prepare", str(out), "--out-dir", str(tmp_path / "prepared"), "--max-files", "1"],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    stats = json.loads((tmp_path / "prepared" / "stats.json").read_text())
    assert all(stats[split]["files"] == 1 and stats[split]["tokens"] > 10_000 for split in ("train", "valid", "test"))
    result = subprocess.run([sys.executable, str(PROJECT / "scripts" / "assets.py"), "check", str(tmp_path), "--only", "books"], capture_output=True, text=True)
    assert result.returncode == 1 and "pg1" in result.stderr  # the other 106 books are missing: named, one line
    # a book revised upstream: converted and named, not refused
    revised = downloads / "pg36.txt"
    revised.write_bytes(revised.read_bytes().replace(b"Martians", b"Martian", 1))
    result = _run("gutenberg", downloads, tmp_path / "again", "--manifest", manifest)
    assert result.returncode == 0 and "5 of 6 books identical" in result.stdout and "eBooks 36)" in result.stdout


def test_gutenberg_rule_matches_the_staged_processing():
    sys.path.insert(0, str(PROJECT / "scripts"))
    from corpora import strip_gutenberg

    body = "\n\n\nTITLE\n\nText  \n_italic_ “quoted”.\n"
    assert strip_gutenberg(_wrap_gutenberg(body, "1", produced_by=False)) == body  # leading blank lines kept
    two_lines = "Produced by A. Volunteer and the Online Distributed\nProofreading Team\n\n\n"
    # only the credit's first line goes, as in the staged copy (its War and Peace opens with a credit's second line)
    assert strip_gutenberg(_wrap_gutenberg("TITLE\n", "1", True, two_lines)) == "Proofreading Team\n\n\nTITLE\n"
    old_style = b"header\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n\nProduced by Someone\n\nTITLE\nEnd of the Project Gutenberg EBook of X\nfooter\n"
    assert strip_gutenberg(old_style) == "TITLE\n"


@pytest.mark.parametrize("damage, message", [
    (lambda raw: raw[: len(raw) // 2], "no '*** END OF' line"),
    (lambda raw: raw.replace(b"*** START OF", b"START OF"), "no '*** START OF' line"),
    (lambda raw: b"\xff\xfe" + raw, "not UTF-8"),
])
def test_gutenberg_conversion_refuses_a_damaged_download_in_one_line(tmp_path, damage, message):
    downloads, manifest, _ = _sample_books(tmp_path)
    path = downloads / "pg11.txt"
    path.write_bytes(damage(path.read_bytes()))
    result = _run("gutenberg", downloads, tmp_path / "out", "--manifest", manifest)
    assert result.returncode == 1 and message in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    path.unlink()
    result = _run("gutenberg", downloads, tmp_path / "out", "--manifest", manifest)
    assert result.returncode == 1 and "spacy project assets" in result.stderr and result.stderr.strip().count("\n") == 0


def test_craft_conversion_on_the_in_repo_articles(tmp_path):
    """The 28 articles of the domain sample are CRAFT files: downloads of them convert to the same layout."""
    sample = SAMPLES / "domain_sample"
    rows = list(csv.DictReader(open(sample / "manifest.tsv", encoding="utf-8"), delimiter="\t"))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    for row in rows:
        (downloads / f"{row['pmid']}.txt").write_bytes(gzip.open(sample / row["file"], "rb").read())
        (downloads / f"{row['pmid']}.copyright").write_bytes((sample / row["copyright_file"]).read_bytes())
    (downloads / "LICENSE.txt").write_text("The CRAFT annotations are licensed under CC BY 3.0.\n")
    pmids = {row["pmid"] for row in rows}
    full = _manifest("craft_biomed_fulltext")
    manifest = tmp_path / "craft.tsv"
    with open(manifest, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(full[0]), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(r for r in full if r["pmid"] in pmids)
    out = tmp_path / "craft"
    result = _run("craft", downloads, out, "--manifest", manifest)
    assert result.returncode == 0, result.stderr
    for row in rows:
        assert gzip.open(out / row["file"], "rb").read() == gzip.open(sample / row["file"], "rb").read()
        assert (out / row["copyright_file"]).read_bytes() == (sample / row["copyright_file"]).read_bytes()
    # an article that differs from the pinned commit is refused, in one line
    first = downloads / f"{rows[0]['pmid']}.txt"
    first.write_bytes(first.read_bytes() + b"\n")
    result = _run("craft", downloads, tmp_path / "again", "--manifest", manifest)
    assert result.returncode == 1 and "differs from the pinned commit" in result.stderr and result.stderr.strip().count("\n") == 0


@needs_copy
def test_corpora_workflow_against_the_local_copy(tmp_path):
    """Every staged book, dressed as a Gutenberg download, converts back to itself; the local copy's
    CRAFT files convert to the copy; `prepare` runs on ${vars.biomed} with data_root pointed at the copy."""
    books, craft = LOCAL_COPY / "gutenberg_en_books", LOCAL_COPY / "craft_biomed_fulltext"
    if not books.is_dir() or not craft.is_dir():
        pytest.skip(f"no Gutenberg books or CRAFT in the local copy at {LOCAL_COPY}")
    downloads = tmp_path / "gutenberg"
    downloads.mkdir()
    for row in _manifest("gutenberg_en_books"):
        text = gzip.open(books / row["file"], "rb").read().decode("utf-8")
        (downloads / f"pg{row['pg_ebook']}.txt").write_bytes(_wrap_gutenberg(text, row["pg_ebook"], text[:1] not in ("", "\n")))
    result = _run("gutenberg", downloads, tmp_path / "data" / "gutenberg_en_books")
    assert result.returncode == 0 and "112 of 112 books identical" in result.stdout, result.stdout + result.stderr
    downloads = tmp_path / "craft"
    downloads.mkdir()
    for row in _manifest("craft_biomed_fulltext"):
        (downloads / f"{row['pmid']}.txt").write_bytes(gzip.open(craft / row["file"], "rb").read())
        (downloads / f"{row['pmid']}.copyright").write_bytes((craft / row["copyright_file"]).read_bytes())
    (downloads / "LICENSE.txt").write_bytes((craft / "LICENSE.txt").read_bytes())
    result = _run("craft", downloads, tmp_path / "data" / "craft_biomed_fulltext")
    assert result.returncode == 0, result.stderr
    check = subprocess.run([sys.executable, str(PROJECT / "scripts" / "assets.py"), "check", str(tmp_path / "data"), "--only", "books", "craft"], capture_output=True, text=True)
    assert check.returncode == 0 and "books: 112 files OK" in check.stdout and "craft: 194 files OK" in check.stdout, check.stderr
    moved = load_project_config(PROJECT, overrides={"vars.data_root": str(LOCAL_COPY)})
    line = next(c for c in moved["commands"] if c["name"] == "prepare-domain-full")["script"][0]
    command = line.split()[1:]  # python -m spacy_elmo prepare <copy>/craft_biomed_fulltext ...
    out = tmp_path / "prepared"
    command[command.index("corpus/full-domain")] = str(out)
    result = subprocess.run([sys.executable, *command, "--max-files", "2"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "vocab.txt").is_file() and (out / "stats.json").is_file()


def test_extra_text_reads_the_assets_layout(tmp_path):
    """`prepare-extra-full` reads the files as `spacy project assets` leaves them (not gzipped) or
    gzipped as in a local copy; without them it stops in one line naming spacy project assets."""
    from extra_text import main as extra_text

    conllu = "# sent_id = 1\n# text = A small test .\n1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_\n\n"
    semcor = '<corpus><text><sentence><wf lemma="a">A</wf><instance lemma="bank">bank_holiday</instance></sentence></text></corpus>'
    for gz in (False, True):
        root = tmp_path / ("gz" if gz else "plain")
        files = {**{f"ud_english_ewt/en_ewt-ud-{p}.conllu": conllu for p in ("train", "dev", "test")},
                 "wsd_raganato/Training_Corpora/SemCor/semcor.data.xml": semcor,
                 "wic/train.data.txt": "bank\tN\t0-0\tThe bank .\tA river bank .\n"}
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if gz and not name.startswith("wic/"):
                with gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8") as handle:
                    handle.write(text)
            else:
                path.write_text(text, encoding="utf-8")
        assert extra_text(["write", str(root), str(root / "extra"), str(root / "ud")]) == 0
        assert (root / "extra" / "semcor.txt").read_text() == "A bank holiday\n\n"
        assert (root / "ud" / "en_ewt_test.txt").read_text() == "A small test .\n\n"
    (tmp_path / "plain" / "wic" / "train.data.txt").unlink()
    result = subprocess.run([sys.executable, str(PROJECT / "scripts" / "extra_text.py"), "write", str(tmp_path / "plain"), str(tmp_path / "e"), str(tmp_path / "u")],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "spacy project assets" in result.stderr, result.stderr


def test_modern_sample_of_the_change_workflow(config):
    """The change workflow's corpora are in the clone: the modern sample matches its manifest (text
    SHA-256, words), stays under 1 MB of text and names its licences; the books it compares exist."""
    sample = SAMPLES / "modern_sample"
    rows = list(csv.DictReader(open(sample / "manifest.tsv", encoding="utf-8"), delimiter="\t"))
    total = 0
    for row in rows:
        text = gzip.open(sample / row["file"], "rb").read()
        assert hashlib.sha256(text).hexdigest() == row["sha256_text"] and len(text) == int(row["bytes"])
        assert len(text.decode("utf-8").split()) == int(row["words"]) and row["split"] == "train"
        total += len(text)
    assert total < 1_000_000
    source = (sample / "SOURCE.md").read_text(encoding="utf-8")
    assert "CC BY 2.5" in source and "CC BY-SA 3.0" in source and "contributors" in source
    for path in config["vars"]["change_a"].split(","):
        assert (PROJECT / path).is_file(), path
    assert config["workflows"]["change"] == ["prepare-change", "finetune-change", "change-report"]
