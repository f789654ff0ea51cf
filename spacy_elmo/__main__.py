"""``python -m spacy_elmo COMMAND``: the same commands as ``spacy elmo COMMAND``."""

import sys

from .cli import main

sys.exit(main(prog_name="python -m spacy_elmo"))
