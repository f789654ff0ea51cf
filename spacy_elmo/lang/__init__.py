"""Language resources in one place: a spaCy language code -> its tokenizer, stop words, word forms
and word for "and" (:func:`language`); English's own forms in :mod:`.english`.

    >>> from spacy_elmo.lang import language
    >>> "und" in language("de").stop_words
    True
"""

from .resources import Language, LanguageError, check_language, language

__all__ = ["Language", "LanguageError", "check_language", "language"]
