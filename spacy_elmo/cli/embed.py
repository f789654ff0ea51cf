"""Commands ``embed``, ``convert`` and ``export``: a text through the component, and biLM weights between formats."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional

from ._util import (
    COMPONENT_PRECISION_OPT,
    DEFAULT_THREADS,
    PROG,
    Arg,
    Opt,
    UserError,
    app,
    apply_threads,
    check_mix,
    lang_code,
    mix_spec,
    model_path,
    msg,
    user_errors,
)


@app.command("embed")
@user_errors
def embed_cli(
    # fmt: off
    text: Optional[str] = Arg(None, help="Text to embed. Default: read standard input"),
    weights: Path = Opt(
        Path("en_default"),
        "--weights",
        "-w",
        help="Model folder (ours, options.json + .hdf5, ELMoForManyLangs) or published name (efml-de, ...); en_default: the embedded one",
    ),
    mix: str = Opt(
        "average",
        "--mix",
        "-m",
        help="How to combine the biLM layers: average, top, layer:N (0 = context-free layer) or one weight per layer, e.g. 1,1,2",
    ),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the tokenizer"),
    threads: int = Opt(
        DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core); more than the free cores slows it down"
    ),
    precision: str = COMPONENT_PRECISION_OPT,
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write vectors, layers and tokens to this .npz file. Default: none"),
    # fmt: on
) -> None:
    """Run the `elmo` component over a text and summarise each token's vector."""
    import numpy as np
    import spacy

    spec = mix_spec(mix)
    path = model_path(weights)
    check_mix(spec, path)
    apply_threads(threads)
    if output is not None and output.parent != Path("") and not output.parent.is_dir():
        raise UserError(f"--output {output}: folder {output.parent} does not exist; create it or write elsewhere.")
    if text is None:
        if sys.stdin.isatty():
            raise UserError(f'no text: pass it as an argument ({PROG} embed "Some text.") or on standard input.')
        text = sys.stdin.read()
    nlp = spacy.blank(lang_code(lang))
    config: Dict[str, Any] = {"weights": str(path), "mix": spec, "precision": precision}
    if "threads" in (nlp.get_factory_meta("elmo").default_config or {}):  # the component's own setting, where it has one
        config["threads"] = threads
    nlp.add_pipe("elmo", config=config)
    doc = nlp(text)
    msg.info(f"{len(doc)} tokens, ELMo vectors {doc.tensor.shape}, biLM layers {doc._.elmo_layers.shape}")
    seen: Dict[str, Any] = {}
    for token in doc:
        if token.is_space:
            continue
        line = f"{token.i:>5}  {token.text[:20]:<20} |v|={np.linalg.norm(token._.elmo):7.3f}"
        first = seen.setdefault(token.lower_, token)
        if first is not token:
            line += f"  cos(with token {first.i}, same word)={token.similarity(first):.3f}"
        print(line)
    if output is not None:
        from ..files import write_atomic

        if output.suffix != ".npz":  # what numpy.savez does with a path
            output = output.with_name(output.name + ".npz")
        arrays = {"vectors": doc.tensor, "layers": doc._.elmo_layers, "tokens": np.array([t.text for t in doc])}
        write_atomic(output, lambda handle: np.savez(handle, **arrays))
        msg.good(f"wrote {output}")


@app.command("convert")
@user_errors
def convert_cli(
    # fmt: off
    options: Path = Arg(..., help="options.json of the original (published) model"),
    weights: Path = Arg(..., help="The model's .hdf5 weights file"),
    out_dir: Path = Arg(..., help="Folder to write (config.json + weights.pt)"),
    # fmt: on
) -> None:
    """Convert original ELMo weights (options.json + .hdf5) to the native format: faster to load, no h5py."""
    from ..bilm.weights import load_original, save_native

    for path, what in ((options, "options file"), (weights, "weights file")):
        if not path.is_file():
            raise UserError(f"{what} not found: {path}. Pass the published model's options.json and its .hdf5 file.")
    model = load_original(options, weights)
    out = save_native(model, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    msg.good(f"wrote {out} ({n_params:,} parameters, {model.n_output_layers} layers of width {model.output_dim})")


@app.command("export")
@user_errors
def export_cli(
    # fmt: off
    model: Path = Arg(..., help="biLM folder (or en_default)"),
    out_dir: Path = Arg(
        ..., help="Folder for options.json + weights.hdf5; a transformer's: AllenNLP's archive folder (.tar.gz: the archive)"
    ),
    # fmt: on
) -> None:
    """Write a biLM in the original options.json + weights.hdf5 format (readable by AllenNLP and bilm-tf);
    a transformer biLM in AllenNLP's transformer ELMo archive format, with its LM head where the folder has one."""
    from ..bilm import save_original
    from ..bilm.transformer import TransformerBiLM
    from ..bilm.trf_export import write_trf_archive
    from ..hub.lm_head import NATIVE_SOFTMAX, read_native_head
    from ..hub.load import load_bilm

    folder = model_path(model)
    bilm = load_bilm(folder)
    if isinstance(bilm, TransformerBiLM):
        head = read_native_head(folder) if (folder / NATIVE_SOFTMAX).is_file() else None
        written = write_trf_archive(bilm, out_dir, None if head is None else tuple(head))
        msg.good(f"wrote {written} (AllenNLP's transformer ELMo format{', with the LM head' if head is not None else ''})")
        return
    options, weights = save_original(bilm, out_dir)
    msg.good(f"wrote {options} and {weights}")
