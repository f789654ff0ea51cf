"""spacy-elmo: ELMo deep contextualized word representations for spaCy v3."""
from .bilm import BiLM, BiLMConfig, ScalarMix, WeightsError, load_bilm, save_native, save_original

__version__ = "0.1.0"

__all__ = ["BiLM", "BiLMConfig", "ScalarMix", "WeightsError", "load_bilm", "save_native", "save_original", "__version__"]
