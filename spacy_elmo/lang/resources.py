"""What the package knows of a language, for a spaCy language code: :func:`language` gives a :class:`Language`.

- its tokenizer and sentence splitter: ``spacy.blank(code)`` (plus spaCy's rule-based
  ``sentencizer`` for reading a corpus); Chinese gets spaCy's default, one token per character;
- its stop words: spaCy's (``spacy.blank(code).Defaults.stop_words``);
- the forms of a word (:meth:`Language.bases`, :meth:`Language.irregular_forms`): English keeps
  its own rules (regular endings and WordNet's irregular forms, :mod:`.english`); another language
  uses spaCy's lookup lemmas when spacy-lookups-data is installed (``pip install
  'spacy-elmo[lookups]'``) and otherwise matches a word as typed, which :meth:`Language.forms_rule`
  says;
- what a word of running text is (:meth:`Language.words`): English, ASCII letters as before; any
  other language, Unicode letters with their combining marks, a Chinese or Japanese character
  being a word of its own;
- its word for "and" (:attr:`Language.conjunction`), the word of the symmetric pattern that sense
  induction reads the LM through.

An unknown code is a :class:`LanguageError` of one line that names it.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass, field
from typing import Any, FrozenSet, List, Mapping, Optional

from . import english

#: the word for "and" in the languages whose one is known (the symmetric pattern's default word)
CONJUNCTIONS = {
    "af": "en", "ar": "و", "bg": "и", "ca": "i", "cs": "a", "da": "og", "de": "und", "el": "και", "en": "and", "es": "y",
    "et": "ja", "eu": "eta", "fa": "و", "fi": "ja", "fr": "et", "ga": "agus", "hi": "और", "hr": "i", "hu": "és", "id": "dan",
    "is": "og", "it": "e", "ja": "と", "la": "et", "lt": "ir", "lv": "un", "mk": "и", "ms": "dan", "nb": "og", "nl": "en",
    "pl": "i", "pt": "e", "ro": "și", "ru": "и", "sk": "a", "sl": "in", "sq": "dhe", "sv": "och", "tl": "at", "tr": "ve",
    "uk": "і", "ur": "اور", "zh": "和",
}  # fmt: skip
#: the languages written without spaces between words, where one character is a word (spaCy's Chinese default)
CHARACTER_WORDS = frozenset({"zh", "ja"})
#: the languages written without spaces between words: a target word may span a run of tokens
WITHOUT_SPACES = frozenset({"zh", "ja", "th"})
#: zero-width non-joiner and joiner: inside a word (Persian کتاب‌ها, Indic conjuncts) they are part of it
JOINERS = "\u200c\u200d"
EXAMPLES = "e.g. en, de, ru, zh, ar; xx is spaCy's multi-language tokenizer"


class LanguageError(ValueError):
    """A language code spaCy does not know, or whose tokenizer needs a package that is not installed."""


def _is_cjk(char: str) -> bool:
    """A Han character, Hiragana or Katakana: a word of its own in running text."""
    point = ord(char)
    return (
        0x3040 <= point <= 0x30FF
        or 0x3400 <= point <= 0x4DBF
        or 0x4E00 <= point <= 0x9FFF
        or 0xF900 <= point <= 0xFAFF
        or 0x20000 <= point <= 0x2FA1F
    )


def _is_mark(char: str) -> bool:
    """A combining mark (Arabic vowel signs, Devanagari matras, accents typed apart): part of the letter before it."""
    return unicodedata.category(char).startswith("M")


def unicode_words(text: str) -> List[str]:
    """The words of ``text``: runs of letters (and the marks that follow them), one inner apostrophe
    allowed (l'homme), a zero-width (non-)joiner between two letters kept inside the word, each
    Chinese or Japanese character a word of its own."""
    out: List[str] = []
    word: List[str] = []
    for i, char in enumerate(text):
        if _is_cjk(char):
            if word:
                out.append("".join(word))
                word = []
            out.append(char)
        elif char.isalpha() or (word and _is_mark(char)):
            word.append(char)
        elif char in JOINERS and word and text[i + 1 : i + 2].isalpha():
            word.append(char)
        elif char in "'\u2019" and word and "'" not in word and "\u2019" not in word and text[i + 1 : i + 2].isalpha():
            word.append(char)
        elif word:
            out.append("".join(word))
            word = []
    if word:
        out.append("".join(word))
    return out


def _lookup_table(code: str) -> Optional[Mapping[str, str]]:
    """spaCy's ``lemma_lookup`` table for ``code`` (form -> lemma), or ``None`` where spacy-lookups-data
    is not installed or has none for the language."""
    from spacy.lookups import load_lookups

    try:
        lookups = load_lookups(code, ["lemma_lookup"])
    except ValueError:  # E955: the package is not installed, or it has no such table for the language
        return None
    table = lookups.get_table("lemma_lookup")
    return table if len(table) else None


@dataclass(frozen=True)
class Language:
    """One language's resources (see the module docstring); build it with :func:`language`."""

    code: str
    name: str
    stop_words: FrozenSet[str] = field(repr=False)
    conjunction: Optional[str] = None
    lemmas: Optional[Mapping[str, str]] = field(default=None, repr=False, compare=False)

    @property
    def english(self) -> bool:
        return self.code == "en"

    @property
    def without_spaces(self) -> bool:
        """Whether the language is written without spaces between words (Chinese, Japanese, Thai):
        a target word of several characters may span several tokens."""
        return self.code in WITHOUT_SPACES

    @property
    def character_words(self) -> bool:
        """Whether one character is a word (Chinese and Japanese): a one-character word counts as a content word."""
        return self.code in CHARACTER_WORDS

    @functools.cached_property
    def unnamed(self) -> FrozenSet[str]:
        """Words that never name a sense: the stop words, and in English also book apparatus (chapter, vol.) and archaic function words."""
        return self.stop_words | english.APPARATUS if self.english else self.stop_words

    def blank(self, sentencizer: bool = False) -> Any:
        """A new ``spacy.blank(code)`` pipeline (with spaCy's ``sentencizer`` when asked); a tokenizer
        that needs a package not installed (Japanese, Korean, Thai, Vietnamese) is one line."""
        import spacy

        try:
            nlp = spacy.blank(self.code)
        except ImportError as err:
            first = " ".join(str(err).split()).split(". ")[0]
            raise LanguageError(
                f"spaCy's tokenizer for {self.code!r} ({self.name}) needs a package that is not installed: {first}"
            ) from None
        if sentencizer:
            nlp.add_pipe("sentencizer")
        return nlp

    def words(self, text: str) -> List[str]:
        """The words of running text, as written (what the context of an occurrence is made of)."""
        return english.WORD.findall(text) if self.english else unicode_words(text)

    def is_word(self, token: str) -> bool:
        """Whether ``token`` is letters only (in another language than English, letters and their combining marks)."""
        if self.english:
            return token.isalpha()
        inner = token[1:-1]
        return (
            any(c.isalpha() for c in token)
            and all(c.isalpha() or _is_mark(c) or (c in JOINERS and c in inner) for c in token)
            and token[:1] not in JOINERS
            and token[-1:] not in JOINERS
        )

    def long_enough(self, word: str, n: int) -> bool:
        """Whether ``word`` has at least ``n`` characters; in Chinese and Japanese one character is enough."""
        return len(word) >= n or (self.character_words and len(word) >= 1 and all(_is_cjk(c) for c in word))

    def bases(self, word: str) -> List[str]:
        """Candidate bases of an inflected ``word`` (lower case), likeliest first: English, its regular
        endings (:func:`.english.inflection_bases`); another language, its lemma in spaCy's lookup
        table (tried as typed and capitalised), none without one."""
        if self.english:
            return english.inflection_bases(word)
        if self.lemmas is None:
            return []
        lemma = self.lemmas.get(word) or self.lemmas.get(word.capitalize())
        return [lemma.lower()] if lemma and lemma.lower() != word.lower() else []

    def irregular_forms(self, word: str) -> List[str]:
        """Forms of ``word`` matched without being listed that :meth:`bases` does not reach (English: WordNet's)."""
        return english.irregular_forms(word) if self.english else []

    def shared_forms(self, word: str) -> List[str]:
        """Forms of ``word`` that are words of their own too, matched only when listed (English: WordNet's, ``find`` -> ``found``)."""
        return english.shared_forms(word) if self.english else []

    def forms_rule(self) -> str:
        """How a target word's forms are matched, in words, for the line the commands print."""
        if self.english:
            return "forms are matched as typed, by regular endings and by WordNet's irregular forms (mice, went)"
        if self.lemmas is not None:
            return f"forms are matched as typed and by spaCy's lookup lemmas for {self.name}"
        return (
            f"forms are matched as typed only: no lemma table for {self.name} here "
            "(pip install 'spacy-elmo[lookups]' adds spaCy's, where it has one)"
        )


def _load(code: str) -> Language:
    """The :class:`Language` of ``code`` (spaCy's language class, its stop words, its lookup lemmas),
    under the class's own code (``eng`` is ``en``)."""
    import spacy

    if not isinstance(code, str) or not code.strip() or code != code.strip():
        raise LanguageError(f"language code {code!r}: give a spaCy language code ({EXAMPLES})")
    if not code.replace("_", "").replace("-", "").isalnum():  # a module path (en.stop_words) is not a code
        raise LanguageError(f"unknown language code {code!r}: spaCy has no language by that code ({EXAMPLES})")
    try:
        cls = spacy.util.get_lang_class(code)
    except Exception:  # ImportError for most, but a name spaCy half-finds can raise anything
        raise LanguageError(f"unknown language code {code!r}: spaCy has no language by that code ({EXAMPLES})") from None
    code = str(getattr(cls, "lang", None) or code)  # the class's own code: every rule below is keyed by it
    stop_words = frozenset(w.lower() for w in cls.Defaults.stop_words)
    lemmas = None if code == "en" else _lookup_table(code)  # English keeps its own rules (module docstring)
    name = "multi-language" if code == "xx" else cls.__name__
    return Language(code, name, stop_words, CONJUNCTIONS.get(code), lemmas)


@functools.lru_cache(maxsize=None)
def language(code: str) -> Language:
    """The resources of the spaCy language ``code`` (cached); :class:`LanguageError` for an unknown code."""
    return _load(code)


def check_language(code: str) -> str:
    """The language class's own code for ``code`` (``eng`` -> ``en``) when spaCy knows it and its
    tokenizer can be built here; else :class:`LanguageError` (one line)."""
    resources = language(code)
    resources.blank()
    return resources.code
