"""Weight formats: round trips, the convert command, and a clear error for every bad input."""
import json
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from spacy_elmo import WeightsError, load_bilm, save_native, save_original
from spacy_elmo.bilm.weights import load_native

from .conftest import ALLENNLP, BILMTF

SENTENCES = [["The", "bank", "of", "the", "river", "."], ["\u4e2d\u6587", "caf\u00e9", "\U0001F600"], []]


def same_outputs(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a.embed_sentences(SENTENCES), b.embed_sentences(SENTENCES)))


@pytest.fixture()
def original_copy(tmp_path):
    """A writable copy of the allennlp fixture model under a non-default weights file name."""
    target = tmp_path / "model"
    target.mkdir()
    shutil.copy(ALLENNLP / "options.json", target / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", target / "lm_weights.hdf5")
    return target


def test_native_round_trip(allennlp_bilm, tmp_path):
    save_native(allennlp_bilm, tmp_path / "native")
    assert same_outputs(allennlp_bilm, load_bilm(tmp_path / "native"))


@pytest.mark.parametrize("folder", [ALLENNLP, BILMTF])
def test_original_export_round_trip(folder, tmp_path):
    model = load_bilm(folder)
    options, weights = save_original(model, tmp_path / "orig")
    assert same_outputs(model, load_bilm(options_file=options, weight_file=weights))
    with h5py.File(weights, "r") as ours, h5py.File(folder / "lm_weights.hdf5", "r") as theirs:
        names = []
        theirs.visit(lambda n: names.append(n) if isinstance(theirs[n], h5py.Dataset) else None)
        for name in names:
            assert np.allclose(ours[name][...], theirs[name][...], atol=1e-7), name


def test_convert_command(tmp_path):
    out = tmp_path / "converted"
    cmd = [sys.executable, "-m", "spacy_elmo", "convert", str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5"), str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (out / "config.json").is_file() and (out / "weights.pt").is_file()
    assert same_outputs(load_bilm(ALLENNLP), load_bilm(out))
    bad = subprocess.run(cmd[:5] + [str(tmp_path / "nope.hdf5"), str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope.hdf5" in bad.stderr


def test_any_weights_file_name_and_explicit_files(original_copy):
    assert same_outputs(load_bilm(ALLENNLP), load_bilm(original_copy))


def test_261_row_char_embedding_with_training_options(original_copy):
    options = json.loads((original_copy / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 261
    (original_copy / "options.json").write_text(json.dumps(options))
    assert same_outputs(load_bilm(ALLENNLP), load_bilm(original_copy))


# ------------------------------------------------------------------------------------- errors


def test_missing_path(tmp_path):
    with pytest.raises(WeightsError, match="does not exist"):
        load_bilm(tmp_path / "absent")


def test_missing_weights_file(tmp_path):
    with pytest.raises(WeightsError, match="weights file not found: .*absent.hdf5"):
        load_bilm(options_file=ALLENNLP / "options.json", weight_file=tmp_path / "absent.hdf5")


def test_directory_without_a_model(tmp_path):
    with pytest.raises(WeightsError, match="neither config.json .* nor options.json"):
        load_bilm(tmp_path)


def test_options_without_weights(original_copy):
    (original_copy / "lm_weights.hdf5").unlink()
    with pytest.raises(WeightsError, match="no .hdf5 weights file"):
        load_bilm(original_copy)


def test_several_hdf5_files_are_ambiguous(original_copy):
    shutil.copy(original_copy / "lm_weights.hdf5", original_copy / "other_weights.hdf5")
    with pytest.raises(WeightsError, match="several .hdf5 files"):
        load_bilm(original_copy)


def test_truncated_hdf5(original_copy):
    path = original_copy / "lm_weights.hdf5"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(WeightsError, match="lm_weights.hdf5"):
        load_bilm(original_copy)


def test_not_hdf5(original_copy):
    (original_copy / "lm_weights.hdf5").write_text("these are not weights\n")
    with pytest.raises(WeightsError, match="lm_weights.hdf5 is not a readable HDF5 file"):
        load_bilm(original_copy)


def test_dataset_missing(original_copy):
    with h5py.File(original_copy / "lm_weights.hdf5", "a") as f:
        del f["CNN_high_1/W_carry"]
    with pytest.raises(WeightsError, match="dataset 'CNN_high_1/W_carry' is missing"):
        load_bilm(original_copy)


def test_shape_disagrees_with_options(original_copy):
    options = json.loads((original_copy / "options.json").read_text())
    options["lstm"]["dim"] = 32
    (original_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match=r"LSTMCell/W_0' has shape \(32, 256\), but the options imply \(32, 128\)"):
        load_bilm(original_copy)


@pytest.mark.parametrize("section,key", [("lstm", "dim"), ("lstm", "projection_dim"), ("char_cnn", "filters")])
def test_options_missing_a_key(original_copy, section, key):
    options = json.loads((original_copy / "options.json").read_text())
    del options[section][key]
    (original_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match=f"options.json: missing required key '{section}.{key}'"):
        load_bilm(original_copy)


def test_options_not_json(original_copy):
    (original_copy / "options.json").write_text("{lstm: ")
    with pytest.raises(WeightsError, match="options.json is not valid JSON"):
        load_bilm(original_copy)


def test_nan_weights(original_copy):
    with h5py.File(original_copy / "lm_weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] = np.nan
    with pytest.raises(WeightsError, match="'CNN_proj/b_proj' holds NaN"):
        load_bilm(original_copy)


def test_native_truncated_and_mismatched(allennlp_bilm, tmp_path):
    folder = save_native(allennlp_bilm, tmp_path / "native")
    weights = folder / "weights.pt"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="weights.pt cannot be read"):
        load_native(folder)
    weights.write_bytes(data)
    meta = json.loads((folder / "config.json").read_text())
    meta["options"]["lstm"]["projection_dim"] = 8
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match="has shape"):
        load_bilm(folder)
    (folder / "config.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(WeightsError, match="not a spacy-elmo biLM config"):
        load_bilm(folder)


# ------------------------------------------------------------ corrupt and malformed inputs


def test_native_nan_weights_name_the_file_and_tensor(allennlp_bilm, tmp_path):
    import torch

    folder = save_native(allennlp_bilm, tmp_path / "native")
    state = torch.load(folder / "weights.pt", weights_only=True)
    state["lstm.layers.0.w_proj"][0, 1, 2] = float("nan")
    state["token_encoder.projection.bias"][0] = float("inf")
    torch.save(state, folder / "weights.pt")
    with pytest.raises(WeightsError, match="not its SHA-256"):  # changed after the save: its recorded digest says so
        load_bilm(folder)
    meta = json.loads((folder / "config.json").read_text())
    del meta["sha256"]  # as a folder saved before the digest was recorded: the tensors' own check names them
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match=r"weights.pt: .*'token_encoder.projection.bias'.* NaN or infinite"):
        load_bilm(folder)


@pytest.mark.parametrize(
    "filters",
    [[[1, 4], [2]], 5, [[1, "four"]], [1, 4], [[1, 4, 5]], [[0, 4]], [[1, -2]], "[[1, 4]]", [None], [[1.5, 4]]],
)
def test_malformed_filters_name_the_key_and_the_expected_shape(original_copy, filters):
    options = json.loads((original_copy / "options.json").read_text())
    options["char_cnn"]["filters"] = filters
    (original_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match=r"options.json: char_cnn.filters must be .*\[\[width, n\], \.\.\.\]"):
        load_bilm(original_copy)


@pytest.mark.parametrize(
    "section,key,value", [("lstm", "dim", "big"), ("lstm", "n_layers", [2]), ("char_cnn", "n_highway", "two"), ("lstm", "cell_clip", "x")]
)
def test_options_values_of_the_wrong_type_name_the_key(original_copy, section, key, value):
    options = json.loads((original_copy / "options.json").read_text())
    options[section][key] = value
    (original_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match=f"options.json: {section}.{key} must be a number"):
        load_bilm(original_copy)


def test_native_config_not_json_or_without_options(allennlp_bilm, tmp_path):
    folder = save_native(allennlp_bilm, tmp_path / "native")
    config = folder / "config.json"
    good = config.read_text()
    config.write_text(good[: len(good) // 2])
    with pytest.raises(WeightsError, match="config.json is not valid JSON"):
        load_bilm(folder)
    config.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WeightsError, match="config.json is not valid JSON"):
        load_bilm(folder)
    meta = json.loads(good)
    del meta["options"]["lstm"]["n_layers"]
    config.write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match="config.json: missing required key 'lstm.n_layers'"):
        load_bilm(folder)
    meta = json.loads(good)
    del meta["options"]
    config.write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match="config.json: .*'options'"):
        load_bilm(folder)


@pytest.mark.parametrize("keep", [0, 100, 0.9])
def test_native_weights_truncated_or_empty_name_the_file(allennlp_bilm, tmp_path, keep):
    folder = save_native(allennlp_bilm, tmp_path / "native")
    weights = folder / "weights.pt"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(WeightsError, match=r"weights.pt cannot be read \(truncated or not a torch state dict\)"):
        load_bilm(folder)


@pytest.mark.parametrize("keep", [0, 0.1, 0.99])
def test_original_weights_truncated_name_the_file(original_copy, keep):
    path = original_copy / "lm_weights.hdf5"
    data = path.read_bytes()
    path.write_bytes(data[: int(keep * len(data))])
    with pytest.raises(WeightsError, match="lm_weights.hdf5"):
        load_bilm(original_copy)


def test_options_json_missing_sections_or_empty(original_copy):
    options = json.loads((original_copy / "options.json").read_text())
    del options["lstm"]
    (original_copy / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightsError, match="options.json: missing required key 'lstm.dim'"):
        load_bilm(original_copy)
    (original_copy / "options.json").write_text("")
    with pytest.raises(WeightsError, match="options.json is not valid JSON"):
        load_bilm(original_copy)
    (original_copy / "options.json").write_text("[1, 2]")
    with pytest.raises(WeightsError, match="options.json must hold a JSON object"):
        load_bilm(original_copy)


def test_nan_weights_in_serialised_pipeline_bytes_are_refused():
    import torch

    from spacy_elmo.layers.bilm_model import bilm_from_bytes, bilm_to_bytes

    model = load_bilm(ALLENNLP)
    with torch.no_grad():
        model.lstm.layers[0].bias[0, 0] = float("nan")
    with pytest.raises(WeightsError, match=r"serialised elmo biLM: 'lstm.layers.0.bias' holds NaN or infinite"):
        bilm_from_bytes(bilm_to_bytes(model))
