"""Every code block of the README and of each ``docs/*.md`` page runs as written, in order.

Each page is its own sequence in its own scratch folder: its blocks run top to bottom, as a reader
following that page would run them.

``bash`` blocks run line by line (``&&`` chains split; ``pip install`` steps are left out, since
the test environment is the installed one, and so is the pytest command, which is this very run);
``python`` blocks are executed, and where a block shows what a ``print`` writes (a comment
``# ... -> OUTPUT`` on the print's line, or a comment line ``# -> OUTPUT`` right after it) the
printed line must match it: numbers to the decimals shown (``0.98...`` or ``0.98``: within 0.01),
a lone ``...`` standing for any text; an ``ini``/``cfg`` config must go through ``spacy init fill-config``
(an excerpt without ``[nlp]`` must parse and name only registered functions); other blocks
(plain text, tables) are not code. Each block may use files that the blocks before it wrote, so a
block that reads a file no earlier block or step makes fails here, as it would for a reader.

A command that needs hours or data outside the clone is shown as a ``text`` block (not code). A
``bash`` or ``python`` block that a reader should run but CI cannot is preceded by an HTML comment
``<!-- not-run: REASON -->``: it is skipped with that reason, and ``test_few_blocks_are_not_run``
counts them (use it sparingly).

Extras: a block runs as after ``pip install -e .`` plus only the extras it names, in a comment line
``# needs: pip install -e ".[hdf5]"`` (several: ``".[hdf5,train]"``) or in its own install step
``pip install -e ".[hdf5]"`` (not run here). ``bash`` and ``python``
blocks run in subprocesses whose ``PYTHONPATH`` starts with ``tests/docs_extras/``; its
``sitecustomize.py`` hides from every Python process of the block the optional packages (read
from setup.cfg's ``extras_require``) of every extra the block does not name (``import h5py``:
``No module named 'h5py'``, as without the extra), so an example that needs an extra it does not
name fails here as it would for a reader without it; the failure names the extra to add.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README] + sorted((REPO / "docs").glob("*.md"))
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.+?)\s*-->\s*$")
# what a reader has in the repository root, made visible in the scratch folder
LINKED = ("project", "spacy_elmo", "tests", "bench")
HIDER = REPO / "tests" / "docs_extras"  # its sitecustomize.py hides the extras a block does not name
NEEDS = re.compile(r"""^\s*(?:#\s*needs:\s*)?pip install -e\s*["']?\.\[([\w,\s-]+)\]["']?(?:\s.*)?$""", re.M)
MODULES = {"dask[distributed]": ("dask", "distributed")}  # requirement -> the modules it installs, where not its name


def extras_modules() -> Dict[str, Set[str]]:
    """Each extra of setup.cfg -> the top-level modules of its packages."""
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg", encoding="utf-8")
    out: Dict[str, Set[str]] = {}
    for extra, requirements in parser["options.extras_require"].items():
        for requirement in filter(None, (r.strip() for r in requirements.splitlines())):
            name = re.split(r"[<>=!~;\s]", requirement, maxsplit=1)[0]
            out.setdefault(extra, set()).update(MODULES.get(name, (name.lower().replace("-", "_"),)))
    return out


def needed_extras(code: str) -> Set[str]:
    """The extras a block names in its ``# needs: pip install -e ".[EXTRA,...]"`` lines."""
    return {extra.strip() for match in NEEDS.findall(code) for extra in match.split(",") if extra.strip()}


def hidden_modules(needs: Set[str]) -> Dict[str, List[str]]:
    """The optional modules a block that names ``needs`` must not see -> the extras that provide each."""
    extras = extras_modules()
    unknown = needs - set(extras)
    assert not unknown, f"# needs: names {sorted(unknown)}, which setup.cfg does not define (its extras: {sorted(extras)})"
    allowed = {module for extra in needs for module in extras[extra]}
    providers: Dict[str, List[str]] = {}
    for extra, modules in extras.items():
        for module in modules - allowed:
            providers.setdefault(module, []).append(extra)
    return providers


def block_env(code: str) -> Dict[str, str]:
    """The environment a block runs in: the repository importable, the extras it does not name hidden."""
    path = [str(HIDER), str(REPO), os.environ.get("PYTHONPATH", "")]
    hidden = ",".join(sorted(hidden_modules(needed_extras(code))))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)), SPACY_ELMO_DOCS_HIDDEN=hidden)


def extra_hint(code: str, output: str) -> str:
    """For a block that failed on a hidden module: which extra to name in it."""
    size = {extra: len(modules) for extra, modules in extras_modules().items()}
    hidden = hidden_modules(needed_extras(code))
    for module in re.findall(r"No module named '([\w.]+)'", output):
        extras = sorted(hidden.get(module.partition(".")[0], []), key=lambda e: (e == "test", size[e], e))  # smallest first
        if extras:
            return (f"\n-> {module!r} comes with the extra {' or '.join(f'[{e}]' for e in extras)}, which this block does not name: "
                    f'if it needs it, add the line  # needs: pip install -e ".[{extras[0]}]"')
    return ""


# runs a python block: records what each print on a line of the block writes (line -> text) into a JSON file
RUNNER = """
import builtins, json, runpy, sys
script, record = sys.argv[1], sys.argv[2]
printed, real_print = {}, builtins.print
def recording_print(*args, sep=" ", end="\\n", file=None, flush=False):
    frame = sys._getframe(1)
    if file is None and frame.f_code.co_filename == script:
        printed.setdefault(frame.f_lineno, sep.join(str(a) for a in args))
    real_print(*args, sep=sep, end=end, file=file, flush=flush)
builtins.print = recording_print
sys.argv = [script]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(record, "w", encoding="utf-8") as handle:
        json.dump(printed, handle)
"""


def code_blocks(text: str) -> List[Tuple[int, str, str]]:
    """(first line number, language, code) of every fenced block."""
    return [(line, lang, code) for line, lang, code, _ in marked_blocks(text)]


def marked_blocks(text: str) -> List[Tuple[int, str, str, Optional[str]]]:
    """(first line number, language, code, not-run reason or None) of every fenced block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if match:
            previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
            reason = NOT_RUN.match(previous.strip())
            start, lang, body = i + 1, match.group(1).lower(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((start, lang, "\n".join(body) + "\n", reason.group(1) if reason else None))
        i += 1
    return blocks


def shell_commands(code: str) -> List[str]:
    """The commands of a bash block to run: continuations joined, comments, pip and pytest left out."""
    commands, joined = [], code.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for part in line.split(" && "):
            words = shlex.split(part, comments=True)
            if not words or words[0] == "pip" or words[:3] == ["python", "-m", "pip"]:
                continue
            if "pytest" in words:
                continue
            commands.append(shlex.join(words))
    return commands


def check_config_fragment(code: str) -> None:
    """A config excerpt: with its parent sections implied it parses, and every registered function it names exists."""
    import spacy
    from thinc.api import Config

    sections = re.findall(r"^\[([^\]]+)\]\s*$", code, flags=re.M)
    parents = {".".join(name.split(".")[:i]) for name in sections for i in range(1, name.count(".") + 1)}
    header = "".join(f"[{name}]\n\n" for name in sorted(parents - set(sections), key=lambda n: n.count(".")))
    Config().from_str(header + code, interpolate=False)
    for kind, name in re.findall(r'^@(\w+)\s*=\s*"([^"]+)"', code, flags=re.M):
        assert spacy.registry.has(kind, name), f"{kind} {name!r} is not registered"


_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_SHOWN_PIECE = re.compile(rf"(?P<number>{_NUMBER})(?P<ellipsis>\.\.\.)?|(?P<any>\.\.\.)|(?P<space>\s+)")


def shown_outputs(code: str) -> Dict[int, str]:
    """Line (1-based, in the block) of each ``print`` whose output the block shows -> that output."""
    lines, shown = code.splitlines(), {}
    for number, line in enumerate(lines, 1):
        match = re.search(r"#(?:[^#]*?\s)?->\s+(.+?)\s*$", line)
        if not match:
            continue
        target = number - 1 if line.lstrip().startswith("#") else number
        if target >= 1 and re.match(r"\s*print\(", lines[target - 1]):
            shown[target] = match.group(1)
    return shown


def output_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` says (see the module docstring for the tolerance)."""
    pattern, checks, pos = "", [], 0
    for piece in _SHOWN_PIECE.finditer(shown):
        pattern += re.escape(shown[pos : piece.start()])
        pos = piece.end()
        if piece.group("number"):
            text = piece.group("number")
            decimals = len(text.split(".")[1].split("e")[0].split("E")[0]) if "." in text else 0
            tolerance = 10.0**-decimals if (decimals or piece.group("ellipsis")) else 0.0
            checks.append((float(text), tolerance))
            pattern += f"({_NUMBER})" + (r"\d*" if piece.group("ellipsis") and decimals == 0 else "")
        elif piece.group("any"):
            pattern += ".*?"
        else:
            pattern += r"\s+"
    pattern += re.escape(shown[pos:])
    match = re.fullmatch(pattern, printed.strip(), flags=re.S)
    if not match:
        return False
    return all(abs(float(got) - want) <= tolerance + 1e-9 for got, (want, tolerance) in zip(match.groups(), checks))


def test_output_matching_has_a_tolerance_but_no_slack():
    assert output_matches("(3, 5, 256) (3, 9, 256)", "(3, 5, 256) (3, 9, 256)")
    assert not output_matches("(3, 5, 256) (3, 9, 256)", "(3, 5, 256) (3, 8, 256)")
    assert output_matches("money 0.967...", "money 0.9671234")
    assert output_matches("money 0.967...", "money 0.9665")
    assert not output_matches("money 0.967...", "money 0.951")
    assert not output_matches("money 0.967...", "river 0.967")
    assert output_matches("SensePrediction(sense='river', score=0.98..., method='centroid')",
                          "SensePrediction(sense='river', score=0.9812, method='centroid')")
    assert output_matches("[...] done", "['NN', 'VB'] done") and not output_matches("[...] done", "['NN'] failed")
    assert shown_outputs("x = 1  # a -> b\nprint(x)  # the shape -> (3, 3)\nprint(y)\n# -> 7\n") == {2: "(3, 3)", 3: "7"}


def test_the_readme_shows_outputs_that_are_checked():
    shown = [text for _, lang, code in code_blocks(README.read_text(encoding="utf-8")) if lang == "python" for text in shown_outputs(code).values()]
    assert len(shown) >= 4, shown


def test_a_block_sees_only_the_extras_it_names(tmp_path):
    assert needed_extras('x = 1\n# needs: pip install -e ".[hdf5, train]"\n') == {"hdf5", "train"}
    assert needed_extras('# needs: pip install -e ".[hdf5,cluster]"   (h5py, Dask)\n') == {"hdf5", "cluster"}
    assert needed_extras("python -m spacy_elmo embed x  # needs h5py\n") == set()  # only the marker line counts
    assert needed_extras('pip install -e ".[train]"   # matplotlib\n') == {"train"}  # a reader's install step names it too
    hidden = hidden_modules({"hdf5"})
    assert "h5py" not in hidden and hidden["hnswlib"] == ["ann", "test"] and "plotly" in hidden
    assert {"dask", "distributed"} <= set(hidden_modules(set()))
    with pytest.raises(AssertionError, match="setup.cfg does not define"):
        hidden_modules({"hfd5"})
    probe = ("import importlib, importlib.util\nfor m in ('h5py', 'json'):\n    try:\n        importlib.import_module(m); print(m, 'ok')\n"
             "    except ImportError as e:\n        print(m, 'refused:', e, importlib.util.find_spec(m))\n")
    for needs, expected in (("", "h5py refused: No module named 'h5py' None"), ("# needs: pip install -e '.[hdf5]'\n", "h5py ok")):
        code = needs + probe
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=block_env(code), capture_output=True, text=True, check=True).stdout
        assert out.splitlines() == [expected, "json ok"], out
    assert '# needs: pip install -e ".[hdf5]"' in extra_hint("", "ModuleNotFoundError: No module named 'h5py'")
    assert extra_hint("", "ModuleNotFoundError: No module named 'nothing_optional'") == ""


def test_the_readme_extras_table_names_every_extra():
    rows = re.findall(r"^\| `\[(\w+)\]` \| ([^|]+) \| ([^|]+) \|$", README.read_text(encoding="utf-8"), flags=re.M)
    assert sorted(extra for extra, _, _ in rows) == sorted(extras_modules()), "README's extras table and setup.cfg's extras differ"
    assert all(installs.strip() and needed.strip() for _, installs, needed in rows)


def test_a_not_run_marker_is_recognised():
    text = "# t\n\n<!-- not-run: needs a GPU -->\n\n```bash\nnvidia-smi\n```\n\n```bash\nls\n```\n"
    assert [(lang, reason) for _, lang, _, reason in marked_blocks(text)] == [("bash", "needs a GPU"), ("bash", None)]


def _page_name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


BLOCKS = code_blocks(README.read_text(encoding="utf-8"))
PAGE_BLOCKS = [(page, *block) for page in PAGES for block in marked_blocks(page.read_text(encoding="utf-8"))]
RUNNABLE = ("bash", "sh", "shell", "console", "python", "ini", "cfg")


def test_the_readme_has_the_blocks_we_expect():
    langs = [lang for _, lang, _ in BLOCKS]
    assert langs.count("python") >= 3 and langs.count("bash") >= 4
    assert len(PAGES) >= 6, "the docs/ pages are missing"
    unnamed = [f"{_page_name(page)}:{line}" for page, line, lang, _, _ in PAGE_BLOCKS if not lang]
    assert not unnamed, f"code blocks without a language (say bash, python, ini or text): {unnamed}"


def test_few_blocks_are_not_run():
    """Count what the docs test cannot run: not-run blocks (skipped, with their reason) and text blocks."""
    skipped = [f"{_page_name(page)}:{line} ({reason})" for page, line, lang, _, reason in PAGE_BLOCKS
               if reason and lang in RUNNABLE]
    shown = sum(1 for *_, lang, _, reason in PAGE_BLOCKS if lang not in RUNNABLE)
    runs = sum(1 for *_, lang, _, reason in PAGE_BLOCKS if lang in RUNNABLE and not reason)
    print(f"\ndocs blocks: {runs} run, {len(skipped)} marked not-run, {shown} text (not code)")
    for entry in skipped:
        print("  not run:", entry)
    assert runs >= 15, runs
    assert len(skipped) <= 3, f"more than 3 blocks are marked not-run: {skipped}"


_SCRATCH: Dict[Path, Path] = {}


@pytest.fixture
def scratch(tmp_path_factory, request):
    """One scratch folder per page, shared by that page's blocks in order."""
    page = request.node.callspec.params["page"]
    if page not in _SCRATCH:
        folder = tmp_path_factory.mktemp(page.stem)
        for name in LINKED:
            (folder / name).symlink_to(REPO / name, target_is_directory=True)
        _SCRATCH[page] = folder
    return _SCRATCH[page]


@pytest.mark.slow
@pytest.mark.parametrize("page, line, lang, code, not_run", PAGE_BLOCKS,
                         ids=[f"{_page_name(page)}:{line}-{lang}" for page, line, lang, _, _ in PAGE_BLOCKS])
def test_docs_block(scratch, monkeypatch, page, line, lang, code, not_run):
    where = f"{_page_name(page)}:{line}"
    if not_run and lang in RUNNABLE:
        pytest.skip(f"{where}: not-run: {not_run}")
    monkeypatch.chdir(scratch)
    env = block_env(code)
    if lang in ("bash", "sh", "shell", "console"):
        for command in shell_commands(code):
            command = re.sub(r"^python(3)?\b", shlex.quote(sys.executable), command)
            result = subprocess.run(command, shell=True, cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, (
                f"{where}: `{command}` failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}{extra_hint(code, result.stdout + result.stderr)}"
            )
    elif lang == "python":
        script, record = scratch / f"{page.stem}_{line}.py", scratch / "out" / f".{page.stem}_{line}.printed.json"
        script.write_text(code, encoding="utf-8")
        record.parent.mkdir(exist_ok=True)
        result = subprocess.run([sys.executable, "-c", RUNNER, str(script), str(record)], cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (
            f"{where}: the block failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}{extra_hint(code, result.stdout + result.stderr)}"
        )
        printed = {int(k): v for k, v in json.loads(record.read_text(encoding="utf-8")).items()}
        for number, shown in shown_outputs(code).items():
            assert number in printed, f"{_page_name(page)}:{line + number}: the print whose output the page shows printed nothing"
            assert output_matches(shown, printed[number]), \
                f"{_page_name(page)}:{line + number}: the page shows {shown!r}, the code prints {printed[number]!r}"
    elif lang in ("ini", "cfg") and "[nlp]" not in code:  # a fragment: it parses, its functions exist
        check_config_fragment(code)
    elif lang in ("ini", "cfg"):  # a config: `spacy init fill-config` must complete it, as the page says
        config = scratch / f"{page.stem}_{line}.cfg"
        config.write_text(code, encoding="utf-8")
        cmd = [sys.executable, "-m", "spacy", "init", "fill-config", str(config), str(scratch / f"{page.stem}_{line}.full.cfg")]
        result = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{where}: the config does not fill:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    else:  # text, tables, output samples: nothing to run
        pytest.skip(f"a {lang or 'plain'} block is not code")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[_page_name(page) for page in PAGES])
def test_docs_blocks_write_only_under_out(page):
    """What a page's blocks write goes under ``out/`` (ignored by git), never into the clone's root.
    Runs after that page's blocks (skipped when they did not run in this session)."""
    if page not in _SCRATCH:
        pytest.skip(f"{_page_name(page)}: its blocks did not run in this session")
    scratch = _SCRATCH[page]
    own = re.compile(rf"^{re.escape(page.stem)}_\d+(\.full)?\.(py|cfg)$")  # the scripts and configs this test writes
    allowed = {"out", ".venv"}  # the examples' outputs; the README's setup virtualenv (both git-ignored)
    stray = sorted(p.name for p in scratch.iterdir() if p.name not in LINKED and p.name not in allowed and not own.match(p.name))
    assert not stray, f"{_page_name(page)}: its examples write into the clone's root: {stray} (write under out/ instead)"
