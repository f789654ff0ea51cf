"""spacy-elmo's command line, in spaCy's style (typer, wasabi): one module per command group.

``_util`` holds what the commands share (the app, the printer, Arg/Opt, UserError, checks);
``embed`` (embed, convert, export), ``training`` (prepare, pretrain, finetune, evaluate, ship,
package), ``published`` (download, models), ``mixes``, ``embed_corpus``, ``senses`` (wic, wsd,
index, neighbours), ``explore`` and ``change`` (change, change-eval) register their commands on the app; ``main`` runs one. Nothing else in the
package imports this one: it sits on top.
"""

from ._util import (
    DEFAULT_THREADS,
    HELP,
    PROG,
    Arg,
    Opt,
    UserError,
    app,
    apply_threads,
    check_mix,
    mix_spec,
    model_path,
    msg,
    user_errors,
)
from .main import main

__all__ = [
    "DEFAULT_THREADS",
    "HELP",
    "PROG",
    "Arg",
    "Opt",
    "UserError",
    "app",
    "apply_threads",
    "check_mix",
    "mix_spec",
    "model_path",
    "msg",
    "user_errors",
    "main",
]
