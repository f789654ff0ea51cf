"""``python -m spacy_elmo.cli COMMAND``: the same commands as ``python -m spacy_elmo COMMAND``."""

import sys

from .main import main

sys.exit(main())
