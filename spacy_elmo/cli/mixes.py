"""Command ``mixes``: the layer weights that a trained pipeline's components learned."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ._util import Arg, Opt, UserError, app, msg, user_errors


@app.command("mixes")
@user_errors
def mixes_cli(
    # fmt: off
    pipeline: Path = Arg(..., help="A trained spaCy pipeline folder (e.g. spacy train's model-best)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the weights as JSON to this file (default: print only)"),
    # fmt: on
) -> None:
    """Print the layer weights (softmax of s) and gamma that each component learned over the biLM layers."""
    import spacy

    from ..layers import learned_mixes

    if not (pipeline / "config.cfg").is_file():
        raise UserError(f"{pipeline} is not a spaCy pipeline folder (no config.cfg): pass e.g. training/model-best")
    found = learned_mixes(spacy.load(pipeline))
    if not found:
        raise UserError(f"{pipeline}: no component has a spacy-elmo ScalarMix (ElmoListener.v1 / ElmoTok2Vec.v1) to report")
    for component, mixes in found.items():
        for mix in mixes:
            weights = ", ".join(f"layer {i}: {w:.3f}" for i, w in enumerate(mix["weights"] or []))
            msg.text(f"{component} ({mix['role']}): {weights}; gamma {mix['gamma']}")
    if output is not None:
        from ..files import write_json

        write_json(output, found, indent=2)
        msg.good(f"wrote {output}")
