"""What every command shares: the typer app, the printer, Arg/Opt, UserError and the checks of common arguments.

Three ways in, the same commands: ``python -m spacy_elmo COMMAND``, ``spacy elmo COMMAND`` (through
spaCy's ``spacy_cli`` entry point) and ``spacy-elmo COMMAND``. Every option shows its default in
``--help``. A user error (a missing file, a bad ``--mix``, a model without a softmax, ...) ends the
command with one line on stderr that names the problem and the fix, and exit status 2.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, TextIO, TypeVar

import typer
from wasabi.util import ICONS, color, locale_escape, supports_ansi

from ..bilm.weights import WeightsError
from ..gzipped import GzipError
from ..hub.resolve import resolve_weights
from ..threads import DEFAULT_THREADS, first_oversubscription_message

__all__ = ["DEFAULT_THREADS", "PROG", "HELP", "app", "msg", "Arg", "Opt", "UserError", "fail", "user_errors"]

PROG = "python -m spacy_elmo"
HELP = (
    "ELMo for spaCy: embed text with the `elmo` component, convert and export weights, and train "
    "or adapt your own biLM (prepare -> pretrain -> evaluate -> finetune -> package)."
)

app = typer.Typer(
    name="elmo",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# What a terminal acts on rather than shows: C0 controls but tab and newline (ESC starts the sequences that
# retitle a window, move the cursor or rewrite the screen), DEL, C1 controls, and the bidirectional
# embeddings, overrides and isolates (which reorder the text around them)
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` without the control characters of :data:`CONTROLS` (tabs and newlines stay): corpus
    text and file names reach the terminal as text, never as commands to it."""
    return CONTROLS.sub("", text)


class _Messages:
    """wasabi's icons and colours, one unwrapped line per message (colour only on a terminal); every
    message is :func:`printable`."""

    def _line(self, kind: str, text: str, stream: TextIO) -> None:
        line = locale_escape(f"{ICONS[kind]} {' '.join(printable(str(text)).split())}")
        if stream.isatty() and supports_ansi() and not os.environ.get("NO_COLOR"):
            line = color(line, fg=COLORS[kind])
        print(line, file=stream, flush=True)

    def good(self, text: str) -> None:
        self._line("good", text, sys.stdout)

    def info(self, text: str) -> None:
        self._line("info", text, sys.stdout)

    def text(self, text: str) -> None:
        print(printable(str(text)), flush=True)

    def warn(self, text: str) -> None:
        self._line("warn", text, sys.stderr)

    def fail(self, text: str) -> None:
        self._line("fail", text, sys.stderr)


COLORS = {"good": "green", "info": "blue", "warn": "yellow", "fail": "red"}
msg = _Messages()

F = TypeVar("F", bound=Callable[..., Any])


def Arg(*args: Any, **kwargs: Any) -> Any:
    """A positional argument (spaCy's convention: help text, default shown)."""
    return typer.Argument(*args, show_default=True, **kwargs)


def Opt(*args: Any, **kwargs: Any) -> Any:
    """An option (spaCy's convention: help text, default shown)."""
    return typer.Option(*args, show_default=True, **kwargs)


# the biLM's inference precision, one option for every command that reads vectors
PRECISION_OPT = Opt(
    "float32", "--precision", help="The biLM's inference precision: float32, bfloat16 or int8 (x86 CPUs with AVX2 or better)"
)
# ... and where the component reads them (embed), also auto: the fastest within cosine 0.99 of float32
COMPONENT_PRECISION_OPT = Opt(
    "float32",
    "--precision",
    help="The biLM's inference precision: float32, bfloat16, int8 (x86 CPUs with AVX2 or better) or auto "
    "(the fastest of them this CPU runs that keeps the vectors within cosine 0.99 of float32's)",
)


class UserError(Exception):
    """A problem with the command's input: reported as one line, never a traceback."""


def fail(message: str) -> None:
    """Print one error line on stderr and end the command with exit status 2."""
    msg.fail(message)
    raise typer.Exit(2)


# the optional modules a command may need, and the extra (setup.cfg) that installs each
OPTIONAL_MODULES = {
    "h5py": "hdf5",
    "matplotlib": "train",
    "hnswlib": "ann",
    "dask": "cluster",
    "distributed": "cluster",
    "build": "package",
}


def missing_extra(err: ImportError) -> str:
    """One line for a missing optional module (the extra that installs it), or "" when ``err`` is
    not about one (a broken install, a bug: those keep their traceback)."""
    name = (err.name or "").split(".")[0]
    if isinstance(err, ModuleNotFoundError) and name in OPTIONAL_MODULES:
        return f"this command needs {name}, which is not installed: pip install 'spacy-elmo[{OPTIONAL_MODULES[name]}]'"
    text = str(err)
    return text if "pip install" in text and "spacy-elmo[" in text else ""


def user_errors(func: F) -> F:
    """Report the errors a user can cause (and fix) as one line instead of a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ImportError as err:  # an optional extra is missing (h5py for the .hdf5 format, ...)
            line = missing_extra(err)
            if not line:
                raise
            fail(line)
        except (UserError, WeightsError) as err:
            fail(str(err))
        except GzipError as err:  # a corrupt or truncated .gz input (its message names the file)
            fail(f"{err}: the file is damaged or not gzip; fix or remove it")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as err:
            fail(str(err))
        except ValueError as err:  # the training stack reports bad data and settings as ValueError
            fail(str(err))

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# checks shared by the commands


def model_path(value: Path, what: str = "biLM") -> Path:
    """The folder of a biLM argument, through :func:`resolve_weights`: a model folder, en_default
    (the embedded default), or a published model's name (downloaded on first use); one line naming
    the argument when it holds no biLM."""
    try:
        location = resolve_weights(str(value))
    except WeightsError as error:
        raise UserError(f"{what} {value}: {error}") from None
    if location.folder is None:
        raise UserError(f"{what} {value}: pass the folder that holds the {what}")
    return location.folder


LANG_HELP = "spaCy language code of the text (en, de, ru, zh, ar, ...): its tokenizer"


def lang_code(value: str, what: str = "--lang") -> str:
    """A ``--lang`` value spaCy knows and can tokenize with here; else one line naming it."""
    from ..lang import LanguageError, check_language

    try:
        return check_language(value)
    except LanguageError as err:
        raise UserError(f"{what}: {err}") from None


def prepared_dir(value: Path) -> Path:
    """The output folder of ``prepare`` (it holds vocab.txt and one folder per split)."""
    if not (value / "vocab.txt").is_file():
        where = "does not exist" if not value.exists() else "has no vocab.txt"
        raise UserError(f"{value} {where}: it must be the output of `{PROG} prepare TEXT --out-dir {value}`; run that first.")
    return value


def mix_spec(value: str) -> Any:
    """``average``, ``top``, ``layer:N`` or comma-separated weights (``0.2,0.3,0.5``)."""
    text = value.strip()
    if text in ("average", "top") or text.startswith("layer:"):
        if text.startswith("layer:") and not text[6:].strip().lstrip("-").isdigit():
            raise UserError(f"--mix {value!r}: expected layer:N with a whole number N, e.g. --mix layer:0 (the context-free layer).")
        return text
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise UserError(
            f"--mix {value!r} is not a mix: use average, top, layer:N (0 = context-free layer) or one weight per layer, e.g. 1,1,2."
        ) from None
    return weights


def model_layers(path: Path) -> int:
    """Number of output layers (L+1) of a model folder, read from its config without loading weights."""
    import srsly

    from ..bilm.layout import read_options
    from ..bilm.weights import CONFIG_NAME
    from ..hub.load import find_original_files

    if (path / CONFIG_NAME).is_file():
        options = srsly.read_json(path / CONFIG_NAME)["options"]
    else:
        options = read_options(find_original_files(path)[0])
    return int(options["lstm"]["n_layers"]) + 1


def check_mix(spec: Any, path: Path) -> None:
    """Validate a mix against the model's layers (a layer index out of range, wrong number of weights)."""
    from ..bilm.scalar_mix import mix_logits

    n_layers = model_layers(path)
    try:
        mix_logits(spec, n_layers)
    except ValueError as err:
        raise UserError(
            f"--mix does not fit this model: {err}. Use average, top, layer:0 to layer:{n_layers - 1}, "
            f"or {n_layers} comma-separated weights."
        ) from None


def apply_threads(threads: int, what: str = "--threads") -> int:
    """Set torch's thread count for this process (0 = one per core); warn in one line if it oversubscribes."""
    from ..threads import set_threads

    if threads < 0:
        raise UserError(f"{what} {threads}: use a whole number >= 1, or 0 for one thread per CPU core.")
    set_threads(threads)
    import torch

    warning = first_oversubscription_message(torch.get_num_threads())
    if warning:
        msg.warn(warning)
    return torch.get_num_threads()


def use_line_progress() -> None:
    """In logs (not a terminal), the training stack's tqdm bars print periodic lines instead."""
    from .. import progress

    if progress.is_terminal():
        return
    from ..training import corpus, trainer

    for module in (corpus, trainer):
        if getattr(module, "tqdm", None) is progress.tqdm:
            module.tqdm = progress.LineProgress  # type: ignore[attr-defined]


def refuse_overwrite(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        raise UserError(f"{out_dir} already exists and is not empty: choose another folder, or add --force to overwrite it.")
