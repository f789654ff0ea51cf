"""Every code block of the README runs as written, in order, in one scratch folder.

``bash`` blocks run line by line (``&&`` chains split; ``pip install`` steps are left out, since
the test environment is the installed one, and so is the pytest command, which is this very run);
``python`` blocks are executed, and where a block shows what a ``print`` writes (a comment
``# ... -> OUTPUT`` on the print's line, or a comment line ``# -> OUTPUT`` right after it) the
printed line must match it: numbers to the decimals shown (``0.98...`` or ``0.98``: within 0.01),
a lone ``...`` standing for any text; an ``ini``/``cfg`` config must go through ``spacy init fill-config``
(an excerpt without ``[nlp]`` must parse and name only registered functions); other blocks
(plain text, tables) are not code. Each block may use files that the blocks before it wrote, so a
block that reads a file no earlier block or step makes fails here, as it would for a reader.
"""
from __future__ import annotations

import builtins
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
# what a reader has in the repository root, made visible in the scratch folder
LINKED = ("project", "spacy_elmo", "tests", "bench")


def code_blocks(text: str) -> List[Tuple[int, str, str]]:
    """(first line number, language, code) of every fenced block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if match:
            start, lang, body = i + 1, match.group(1).lower(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((start, lang, "\n".join(body) + "\n"))
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


BLOCKS = code_blocks(README.read_text(encoding="utf-8"))


def test_the_readme_has_the_blocks_we_expect():
    langs = [lang for _, lang, _ in BLOCKS]
    assert langs.count("python") >= 3 and langs.count("bash") >= 4
    assert all(lang for lang in langs), "a code block without a language: say bash, python, ini or text"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    for name in LINKED:
        (folder / name).symlink_to(REPO / name, target_is_directory=True)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("line, lang, code", BLOCKS, ids=[f"README.md:{line}-{lang}" for line, lang, _ in BLOCKS])
def test_readme_block(scratch, monkeypatch, line, lang, code):
    monkeypatch.chdir(scratch)
    if lang in ("bash", "sh", "shell", "console"):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        for command in shell_commands(code):
            command = re.sub(r"^python(3)?\b", shlex.quote(sys.executable), command)
            result = subprocess.run(command, shell=True, cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, f"README.md:{line}: `{command}` failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    elif lang == "python":
        script = scratch / f"readme_{line}.py"
        script.write_text(code, encoding="utf-8")
        printed: Dict[int, str] = {}
        real_print = builtins.print

        def recording_print(*args, sep=" ", end="\n", file=None, flush=False):
            frame = sys._getframe(1)
            if file is None and frame.f_code.co_filename == str(script):
                printed.setdefault(frame.f_lineno, sep.join(str(a) for a in args))
            real_print(*args, sep=sep, end=end, file=file, flush=flush)

        monkeypatch.setattr(builtins, "print", recording_print)
        runpy.run_path(str(script), run_name="__main__")
        monkeypatch.setattr(builtins, "print", real_print)
        for number, shown in shown_outputs(code).items():
            assert number in printed, f"README.md:{line + number}: the print whose output the README shows printed nothing"
            assert output_matches(shown, printed[number]), \
                f"README.md:{line + number}: the README shows {shown!r}, the code prints {printed[number]!r}"
    elif lang in ("ini", "cfg") and "[nlp]" not in code:  # a fragment: it parses, its functions exist
        check_config_fragment(code)
    elif lang in ("ini", "cfg"):  # a config: `spacy init fill-config` must complete it, as the README says
        config = scratch / f"readme_{line}.cfg"
        config.write_text(code, encoding="utf-8")
        cmd = [sys.executable, "-m", "spacy", "init", "fill-config", str(config), str(scratch / f"readme_{line}.full.cfg")]
        result = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"README.md:{line}: the config does not fill:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    else:  # text, tables, output samples: nothing to run
        pytest.skip(f"a {lang or 'plain'} block is not code")
