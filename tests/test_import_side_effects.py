"""Importing the package changes no process-wide state; its process-wide caches and the
allocator trimming are documented and can be sized or switched off."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from spacy_elmo.bilm import characters, memory

# Runs in a fresh interpreter: the libraries we build on are imported first, so that only what
# importing MODULE itself does is measured.
PROBE = r"""
import importlib, json, logging, random, sys, warnings
import numpy as np, torch, spacy, thinc.api
from spacy.tokens import Doc

def snapshot():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    return {
        "torch": torch.rand(3).tolist(),
        "numpy": np.random.rand(3).tolist(),
        "random": [random.random() for _ in range(3)],
        "threads": torch.get_num_threads(),
        "dtype": str(torch.get_default_dtype()),
        "grad": torch.is_grad_enabled(),
        "warning_filters": len(warnings.filters),
        "log_handlers": len(logging.getLogger().handlers),
        "doc_extension": Doc.has_extension("elmo_layers"),
    }

before = snapshot()
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
importlib.import_module(sys.argv[1])
after = {
    "torch": torch.rand(3).tolist(),
    "numpy": np.random.rand(3).tolist(),
    "random": [random.random() for _ in range(3)],
    "threads": torch.get_num_threads(),
    "dtype": str(torch.get_default_dtype()),
    "grad": torch.is_grad_enabled(),
    "warning_filters": len(warnings.filters),
    "log_handlers": len(logging.getLogger().handlers),
    "doc_extension": Doc.has_extension("elmo_layers"),
}
print(json.dumps({"before": before, "after": after}))
"""


@pytest.mark.parametrize("module", ["spacy_elmo", "spacy_elmo.pipeline", "spacy_elmo.layers"])
def test_import_leaves_random_streams_and_torch_settings_alone(module):
    result = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    states = json.loads(result.stdout.strip().splitlines()[-1])
    assert states["after"] == states["before"]


def test_char_cache_size_is_configurable():
    default = characters.char_cache_size()
    assert default == characters.DEFAULT_CHAR_CACHE_SIZE == 200_000
    try:
        characters.set_char_cache_size(3)
        for word in ["a", "b", "c", "d", "e"]:
            characters.token_char_ids(word)
        assert characters.char_cache_info().currsize == 3 and characters.char_cache_info().maxsize == 3
        assert characters.token_char_ids("a").tolist() == characters.token_char_ids("a").tolist()
        characters.set_char_cache_size(0)  # off: still correct
        assert characters.char_cache_info().currsize == 0
        assert characters.token_char_ids("The")[:5].tolist() == [259, 85, 105, 102, 260]
        with pytest.raises(ValueError, match="char cache size"):
            characters.set_char_cache_size(-1)
    finally:
        characters.set_char_cache_size(default)
    assert characters.char_cache_size() == default


def test_char_cache_size_from_the_environment():
    code = "from spacy_elmo.bilm import characters; print(characters.char_cache_info().maxsize)"
    env = {"SPACY_ELMO_CHAR_CACHE_SIZE": "123"}
    import os

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "123"
    bad = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "SPACY_ELMO_CHAR_CACHE_SIZE": "lots"}, timeout=120
    )
    assert bad.returncode != 0 and "SPACY_ELMO_CHAR_CACHE_SIZE" in bad.stderr


def test_freed_memory_trimming_can_be_switched_off(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_trim_function", lambda: (lambda pad: calls.append(pad) or 1))
    monkeypatch.setattr(memory, "_resident_mb", iter([100.0, 100.0 + 2 * memory.GROWTH_MB, 100.0] * 10).__next__)
    monkeypatch.setattr(memory, "_baseline_mb", None)
    previous = memory.trimming_enabled()
    try:
        memory.set_release_free_memory(True)
        memory.release_free_memory()  # sets the baseline
        memory.release_free_memory()  # grown by 2 * GROWTH_MB: trims
        assert calls == [0]
        memory.set_release_free_memory(False)
        assert not memory.trimming_enabled()
        for _ in range(4):
            memory.release_free_memory()
        assert calls == [0]
    finally:
        memory.set_release_free_memory(previous)


def test_docstrings_document_the_process_wide_knobs_and_the_knobs_act():
    # the docstrings name the very variables and functions the code reads ...
    assert characters.CHAR_CACHE_ENV in characters.__doc__ and "set_char_cache_size" in characters.__doc__
    assert memory.KEEP_FREED_MEMORY_ENV in memory.__doc__ and "set_release_free_memory" in memory.__doc__ and "malloc_trim" in memory.__doc__
    # ... and setting them does what the docstrings say, in a fresh interpreter
    probe = "from spacy_elmo.bilm import characters, memory; print(characters.char_cache_size(), memory.trimming_enabled())"
    env = {k: v for k, v in os.environ.items() if k not in (characters.CHAR_CACHE_ENV, memory.KEEP_FREED_MEMORY_ENV)}
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert plain == [str(characters.DEFAULT_CHAR_CACHE_SIZE), "True"]
    env.update({characters.CHAR_CACHE_ENV: "7", memory.KEEP_FREED_MEMORY_ENV: "1"})
    knobs = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert knobs == ["7", "False"]
    previous = characters.char_cache_size()
    try:
        characters.set_char_cache_size(3)
        for token in ("a1", "b2", "c3", "d4", "e5"):
            characters.token_char_ids(token)
        assert characters.char_cache_info().currsize == 3 and characters.char_cache_info().maxsize == 3
        characters.set_char_cache_size(0)  # 0 = no cache
        characters.token_char_ids("f6")
        assert characters.char_cache_info().currsize == 0
    finally:
        characters.set_char_cache_size(previous)
