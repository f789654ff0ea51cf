"""Make this fixture: a tiny pipeline saved by the release before `bilm_carried` (commit 15fb19d).

Run with that commit's package first on the path, from a scratch folder, e.g.::

    git archive 15fb19d | tar -x -C OLD
    cd SCRATCH && PYTHONPATH=OLD python OLD_OR_NEW/tests/data/pipeline-previous-release/make_fixture.py OUT

It writes random biLM weights (a tiny shape, seed 0) into ``weights-removed-after-save`` (a path
relative to the scratch folder), builds ``spacy.blank("en")`` + ``elmo`` on them, saves the
pipeline to ``OUT/pipeline`` and the vectors of one sentence to ``OUT/expected.json``. The weights
folder is not kept: the saved pipeline's config names a folder that exists nowhere else.
"""

import json
import sys
from pathlib import Path

import numpy as np
import spacy

import spacy_elmo
from spacy_elmo.hub.random_weights import write_random_weights

WEIGHTS = "weights-removed-after-save"
SENTENCE = "The bank raised its rates. We sat on the bank of the river."
OPTIONS = {
    "lstm": {"cell_clip": 3, "use_skip_connections": True, "n_layers": 2, "proj_clip": 3, "projection_dim": 8, "dim": 16},
    "char_cnn": {
        "embedding": {"dim": 4},
        "filters": [[1, 4], [2, 8]],
        "n_highway": 1,
        "n_characters": 262,
        "max_characters_per_token": 50,
        "activation": "relu",
    },
}


def main(out: Path) -> None:
    print(f"spacy_elmo from {spacy_elmo.__file__}", file=sys.stderr)
    weights = Path(WEIGHTS)
    weights.mkdir()
    (weights / "options.json").write_text(json.dumps(OPTIONS))
    write_random_weights(str(weights / "options.json"), weights, seed=0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": WEIGHTS, "mix": [1.0, 2.0, 3.0]})
    doc = nlp(SENTENCE)
    nlp.to_disk(out / "pipeline")
    expected = {
        "text": SENTENCE,
        "tokens": [t.text for t in doc],
        "elmo_vectors": np.asarray(doc._.elmo_vectors, dtype=np.float32).tolist(),
        "elmo_layers": np.asarray(doc._.elmo_layers, dtype=np.float32).tolist(),
    }
    (out / "expected.json").write_text(json.dumps(expected) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
