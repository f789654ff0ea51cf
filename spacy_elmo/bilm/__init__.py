"""The biLM in pure PyTorch (no spaCy import): characters, token encoder, LSTMs, mix, weights."""

from .characters import TokenBatch, batch_to_char_ids, token_char_ids
from .model import BiLM, BiLMConfig, FloatWeightsReleased, OptionsError
from .scalar_mix import ScalarMix, mix_logits
from .weights import WeightsError, load_native, load_original, save_native, save_original

__all__ = [
    "BiLM",
    "BiLMConfig",
    "FloatWeightsReleased",
    "OptionsError",
    "ScalarMix",
    "TokenBatch",
    "WeightsError",
    "batch_to_char_ids",
    "load_bilm",
    "load_native",
    "load_original",
    "mix_logits",
    "save_native",
    "save_original",
    "token_char_ids",
]
