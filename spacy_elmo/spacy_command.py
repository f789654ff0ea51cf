"""``spacy elmo COMMAND``: spaCy loads this module through its ``spacy_cli`` entry point.

Importing it adds spacy-elmo's commands (:mod:`spacy_elmo.cli`) to spaCy's own command line as
the ``elmo`` group, the way spaCy's CLI plugins do.
"""

from spacy.cli._util import app as spacy_app

from .cli import HELP, app

spacy_app.add_typer(app, name="elmo", help=HELP, no_args_is_help=True)
