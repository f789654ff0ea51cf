"""A release: ``python -m build`` makes an sdist and a wheel that install in a fresh virtualenv and
work there, and a ``spacy package`` pipeline installs beside the spacy-elmo wheel and loads offline.

Each test virtualenv is isolated (no ``--system-site-packages``, which would show the *base*
interpreter's packages, not those of a virtualenv that runs the tests) and sees the running
interpreter's own site directories through a ``.pth`` file, for torch, spaCy and the rest; spacy-elmo
itself and the pipeline are installed into it from the wheels just built, and every check runs
outside the repository, so the copy under test is the installed one.
"""
from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

import spacy_elmo

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(args, cwd, *, both: bool = False, **kwargs):
    """The command's stdout (with ``both``, stdout and stderr), after checking that it succeeded."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr if both else result.stdout


def source_copy(dest: Path) -> Path:
    """The files a clone holds (git's list when available), without build outputs."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
        names = [n for n in names if n and (REPO / n).is_file()]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file() and "__pycache__" not in p.parts and ".git" not in p.parts]
    for name in names:
        if name.startswith(("spacy_elmo/", "setup.cfg", "pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in")):
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    work = tmp_path_factory.mktemp("release")
    src = source_copy(work / "src")
    out = work / "dist"
    log = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src], cwd=work, both=True)  # sdist, then the wheel from it
    (work / "build.log").write_text(log, encoding="utf-8")
    return out


def test_the_build_declares_every_package_it_ships(dist):
    """The data folders (the embedded model, the kernels' C source) are declared packages: the
    build ships them without its "Package would be ignored" warnings."""
    log = (dist.parent / "build.log").read_text(encoding="utf-8")
    assert "would be ignored" not in log and "is absent from the `packages` configuration" not in log, log[-3000:]


def outer_site_dirs() -> list:
    """The site directories the running interpreter imports from (a virtualenv's own among them)."""
    dirs = [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]
    dirs += [p for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]) if Path(p).is_dir()]
    return list(dict.fromkeys(str(Path(p).resolve()) for p in dirs))


def fresh_venv(path: Path) -> Path:
    """An isolated virtualenv whose packages come after those of the running interpreter's site
    directories (listed in a ``.pth`` file, so that their own ``.pth`` files, an editable install of
    spacy-elmo among them, are not run: the copy under test is the one installed into the venv)."""
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "_outer_site_packages.pth").write_text("".join(f"{d}\n" for d in outer_site_dirs()), encoding="utf-8")
    return python


def test_fresh_venv_sees_the_packages_of_a_virtualenv_that_runs_the_tests(tmp_path):
    """Run from inside a virtualenv (isolated, as ``python -m venv`` makes it) that holds a package
    of its own, ``fresh_venv`` gives a virtualenv that imports it: the base interpreter lacks it."""
    outer = tmp_path / "outer"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(outer)
    outer_python = outer / "bin" / "python"
    purelib = Path(subprocess.run([str(outer_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "only_in_outer_venv.py").write_text("VALUE = 7\n", encoding="utf-8")
    # the packages the outer venv "installed": the current interpreter's, placed on its path
    (purelib / "_installed.pth").write_text("".join(f"{d}\n" for d in outer_site_dirs()), encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import subprocess, sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.test_packaging import fresh_venv
        inner = fresh_venv(__import__("pathlib").Path({str(tmp_path / "inner")!r}))
        out = subprocess.run([str(inner), "-c", "import only_in_outer_venv, spacy; print(only_in_outer_venv.VALUE)"], capture_output=True, text=True)
        print(out.returncode, out.stdout.strip(), out.stderr.strip()[-300:])
        """
    )
    result = subprocess.run([str(outer_python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[:2] == ["0", "7"], result.stdout


def test_package_without_an_extra_says_so_in_one_line(tmp_path):
    """``package`` of an .hdf5 model without h5py: one line that names the extra, exit status 2,
    no traceback."""
    missing = "h5py"
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / f"{missing}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{missing}'\", name='{missing}')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(REPO)])}
    fixture = REPO / "tests" / "data" / "elmo-fixture" / "allennlp"
    result = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "package", fixture, tmp_path / "out"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert missing in lines[0] and "spacy-elmo[" in lines[0], lines[0]


def test_version_in_one_place():
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    assert parser["metadata"]["version"] == "attr: spacy_elmo.__version__"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {spacy_elmo.__version__}" in changelog, "CHANGELOG.md has no section for the current version"


def test_sdist_and_wheel_install_and_run_in_a_fresh_virtualenv(dist, tmp_path):
    version = spacy_elmo.__version__
    wheel = dist / f"spacy_elmo-{version}-py3-none-any.whl"
    sdist = dist / f"spacy_elmo-{version}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(p.name for p in dist.iterdir())
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"spacy_elmo-{version}.dist-info/entry_points.txt").decode()
    assert {"spacy_elmo/models/en_default/weights.pt", "spacy_elmo/models/en_default/config.json", "spacy_elmo/hub/published.py", "spacy_elmo/hub/download.py", "spacy_elmo/kernels/csrc/train_kernels.c", "spacy_elmo/lang/irregular_forms.tsv"} <= names
    assert not any(n.startswith("tests/") for n in names)
    assert "elmo = spacy_elmo.pipeline.component:make_elmo" in entry_points and "elmo = spacy_elmo.spacy_command:app" in entry_points
    assert "spacy_elmo/layers/architectures.py" in names and "spacy-elmo.ElmoListener.v1 = spacy_elmo.layers.architectures:ElmoListener_v1" in entry_points
    python = fresh_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", wheel], cwd=tmp_path)
    smoke = (
        "import spacy, spacy_elmo, sys; "
        "assert spacy_elmo.__file__.startswith(sys.prefix), spacy_elmo.__file__; "
        "nlp = spacy.blank('en'); nlp.add_pipe('elmo'); doc = nlp('The bank lends money.'); "
        "print(spacy_elmo.__version__, doc.tensor.shape)"
    )
    assert run([python, "-c", smoke], cwd=tmp_path).split() == [version, "(5,", "256)"]
    assert "download" in run([python, "-m", "spacy_elmo", "--help"], cwd=tmp_path)
    kernels = "from spacy_elmo.kernels import native; assert native.SOURCE.is_file(), native.SOURCE; print('ok')"  # bf16 training compiles it
    assert run([python, "-c", kernels], cwd=tmp_path).split() == ["ok"]
    assert "elmo-original" in run([python, "-m", "spacy", "elmo", "models"], cwd=tmp_path)


def test_spacy_package_pipeline_installs_beside_the_wheel(dist, tmp_path):
    version = spacy_elmo.__version__
    wheel = dist / f"spacy_elmo-{version}-py3-none-any.whl"
    pipeline = tmp_path / "pipeline"
    run([sys.executable, "-m", "spacy_elmo", "package", "en_default", pipeline, "--name", "elmo_demo"], cwd=tmp_path)
    packages = tmp_path / "packages"
    packages.mkdir()
    run([sys.executable, "-m", "spacy", "package", pipeline, packages, "--name", "elmo_demo", "--version", "1.0.0", "--build", "none"], cwd=tmp_path)
    package_dir = packages / "en_elmo_demo-1.0.0"
    meta = json.loads((package_dir / "meta.json").read_text())
    assert any(r.startswith("spacy-elmo") for r in meta["requirements"]), meta["requirements"]
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", packages, package_dir], cwd=tmp_path)
    pipeline_wheel = next(packages.glob("en_elmo_demo-1.0.0-*.whl"))
    python = fresh_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", wheel, pipeline_wheel], cwd=tmp_path)
    check = (
        "import spacy, spacy_elmo, sys; from importlib.metadata import requires; "
        "assert spacy_elmo.__file__.startswith(sys.prefix); "
        "nlp = spacy.load('en_elmo_demo'); print(nlp('A river bank.').tensor.shape); "
        "print([r for r in requires('en_elmo_demo') if r.startswith('spacy-elmo')][0])"
    )
    out = run([python, "-c", check], cwd=tmp_path)
    shape, requirement = out.strip().splitlines()
    assert shape == "(4, 256)"
    from packaging.requirements import Requirement

    assert Requirement(requirement).specifier.contains(version), requirement
