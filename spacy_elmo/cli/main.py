"""``main``: runs a command of the app, with usage errors reported in one line like any user error."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

# each command module registers its commands on ``app`` when imported; the order is the order of --help
from . import embed, training, published, random_weights, mixes, embed_corpus, senses, induce, explore, change  # noqa: F401  isort: skip
from ._util import PROG, app, msg


def _click_exceptions() -> Any:
    try:  # typer >= 0.20 carries its own copy of click
        return importlib.import_module("typer._click.exceptions")
    except ImportError:  # pragma: no cover - older typer runs on click itself
        return importlib.import_module("click.exceptions")


def main(argv: Optional[List[str]] = None, prog_name: Optional[str] = None) -> int:
    """Run a command; returns its exit status. Usage errors are one line, like every other user error."""
    exceptions = _click_exceptions()
    command = typer.main.get_command(app)
    if prog_name is None:
        prog_name = "spacy-elmo" if Path(sys.argv[0]).name == "spacy-elmo" else PROG
    try:
        result = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except exceptions.UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # a bare command shows its help
            err.show()
            return 0
        where = err.ctx.command_path if err.ctx is not None else prog_name
        msg.fail(f"{err.format_message()} (see '{where} --help')")
        return 2
    except exceptions.ClickException as err:
        msg.fail(err.format_message())
        return err.exit_code
    except (typer.Abort, getattr(exceptions, "Abort", typer.Abort)):
        msg.fail("aborted")
        return 1
    return int(result) if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
