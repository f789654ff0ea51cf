"""Commands ``download`` and ``models``: the published ELMo models and the local cache."""

from __future__ import annotations

import json
from typing import Dict, List, Optional

from ._util import PROG, Arg, Opt, UserError, app, msg, user_errors


@app.command("download")
@user_errors
def download_cli(
    # fmt: off
    name: str = Arg(
        ..., help="Published model: elmo-small, elmo-original, ..., efml-de (ELMoForManyLangs, by language code), ...; see `models`"
    ),
    force: bool = Opt(False, "--force", "-f", help="Download again even when a checked copy is cached. Default: off"),
    lm_head: bool = Opt(
        False, "--lm-head", help="Also download the model's LM head (softmax + vocabulary; elmo-original only). Default: off"
    ),
    sha256: Optional[List[str]] = Opt(None, "--sha256", help="FILE=HEX: the SHA-256 a file must have (repeatable). Default: none"),
    # fmt: on
) -> None:
    """Download a published ELMo model into the cache (SPACY_ELMO_CACHE), resuming an interrupted transfer, check it, and convert an ELMoForManyLangs archive once."""
    from ..hub.download import download
    from ..hub.lm_head import download_lm_head
    from ..hub.published import PUBLISHED, names_hint

    if name not in PUBLISHED:
        raise UserError(f"unknown model {name!r}: choose one of {names_hint()} (see `{PROG} models`).")
    pins = parse_pins(sha256 or [])
    model = PUBLISHED[name]
    if lm_head and not model.lm_head:
        with_head = ", ".join(n for n, m in PUBLISHED.items() if m.lm_head)
        raise UserError(f"{name} has no published LM head: --lm-head works with {with_head}.")
    unknown = sorted(set(pins) - set(model.files) - set(model.head_files if lm_head else ()))
    if unknown:
        raise UserError(f"--sha256 names {', '.join(unknown)}, not a file of {name}{' (with --lm-head)' if lm_head else ''}.")
    folder = download(model, force=force, sha256={k: v for k, v in pins.items() if k in model.files})
    if lm_head:
        download_lm_head(model, force=force, sha256={k: v for k, v in pins.items() if k in model.head_files})
    what = " and its LM head" if lm_head else ""
    msg.good(f"{name}{what} ready in {folder}: use weights={name!r} (or the folder) to load it")


def parse_pins(values: List[str]) -> Dict[str, str]:
    """``FILE=HEX`` options as a mapping (the digests are checked by the download)."""
    pins: Dict[str, str] = {}
    for value in values:
        file_name, sep, digest = value.partition("=")
        if not sep or not file_name.strip() or not digest.strip():
            raise UserError(f"--sha256 {value!r}: expected FILE=HEX, e.g. --sha256 NAME_weights.hdf5=<64 hex digits>.")
        pins[file_name.strip()] = digest.strip()
    return pins


@app.command("models")
@user_errors
def models_cli(
    # fmt: off
    as_json: bool = Opt(False, "--json", help="Print the table as JSON. Default: off"),
    # fmt: on
) -> None:
    """List the published ELMo models: language, format, shape, parameters, download size, size on disk and whether each is cached."""
    from ..hub.download import describe
    from ..hub.published import cache_root

    rows = describe()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    msg.info(f"cache: {cache_root()}")
    msg.text(f"{'name':<20} {'lang':<5} {'format':<9} {'shape':<34} {'parameters':>11} {'download':>12} {'on disk':>10}  cached")
    for row in rows:
        on_disk = f"{row['size_on_disk'] / 1e6:.1f} MB" if row["size_on_disk"] else "-"
        download_size = f"{row['download_size'] / 1e6:.1f} MB" if row["download_size"] else "not stated"
        parameters = f"{row['parameters']:,}" if row["parameters"] else "-"
        shape = row["shape"] or "not stated"
        msg.text(
            f"{row['name']:<20} {row['language']:<5} {row['format']:<9} {shape:<34} {parameters:>11} {download_size:>12} "
            f"{on_disk:>10}  {'yes' if row['cached'] else 'no'}"
        )
    msg.text("download: the size its publisher states (none do); the SHA-256 of each file is recorded at its first download")
