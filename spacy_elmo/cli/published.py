"""Commands ``download`` and ``models``: the published ELMo models and the local cache."""

from __future__ import annotations

import json

from ._util import PROG, Arg, Opt, UserError, app, msg, user_errors


@app.command("download")
@user_errors
def download_cli(
    # fmt: off
    name: str = Arg(..., help="Published model: elmo-small, elmo-medium, elmo-original, elmo-original-5.5b or elmo-pubmed"),
    force: bool = Opt(False, "--force", "-f", help="Download again even when a verified copy is cached. Default: off"),
    # fmt: on
) -> None:
    """Download a published ELMo model into the cache (SPACY_ELMO_CACHE), resuming an interrupted transfer, and verify it."""
    from ..hub.download import download
    from ..hub.published import PUBLISHED

    if name not in PUBLISHED:
        raise UserError(f"unknown model {name!r}: choose one of {', '.join(PUBLISHED)} (see `{PROG} models`).")
    folder = download(name, force=force)
    msg.good(f"{name} is ready in {folder}: use weights={name!r} (or the folder) to load it")


@app.command("models")
@user_errors
def models_cli(
    # fmt: off
    as_json: bool = Opt(False, "--json", help="Print the table as JSON. Default: off"),
    # fmt: on
) -> None:
    """List the published ELMo models: shape, parameters, size on disk and whether each is cached."""
    from ..hub.download import describe
    from ..hub.published import cache_root

    rows = describe()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    msg.info(f"cache: {cache_root()}")
    msg.text(f"{'name':<20} {'shape':<30} {'parameters':>12} {'on disk':>10}  cached")
    for row in rows:
        size = f"{row['size_on_disk'] / 1e6:.1f} MB" if row["size_on_disk"] else "-"
        msg.text(f"{row['name']:<20} {row['shape']:<30} {row['parameters']:>12,} {size:>10}  {'yes' if row['cached'] else 'no'}")
