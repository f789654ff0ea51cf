"""biLM pretraining and domain adaptation: corpus preparation, the LM objective, the training loop."""

from .corpus import prepare_corpus
from .data import Vocabulary
from .lm import BiLMLanguageModel
from .trainer import TrainConfig, export_model, load_language_model, perplexity, train

__all__ = ["BiLMLanguageModel", "TrainConfig", "Vocabulary", "export_model", "load_language_model", "perplexity", "prepare_corpus", "train"]
