"""SemEval-2010 Task 14 (word sense induction) test instances: each target word's sentences, the target located.

The task's release (``test_data/{nouns,verbs}/WORD.POS.xml``) holds each instance's few sentences,
the one with the target wrapped in ``<TargetSentence>``; the target itself is not marked.
:func:`read_semeval2010` reads the target sentences (already tokenised: tokens are separated by
spaces) and finds the target's inflected form in it (:func:`find_target`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..induction.substitutes import inflection_bases

# forms a suffix rule cannot reach (the irregular verbs among the task's targets, and a few more)
IRREGULAR = {
    "lay": ("laid",),
    "lie": ("lay", "lain", "lying", "lied"),
    "swear": ("swore", "sworn"),
    "swim": ("swam", "swum"),
    "stick": ("stuck",),
    "figure": ("figuring",),
    "bow": ("bowed",),
    "shave": ("shaven",),
    "hang": ("hung",),
    "win": ("won",),
    "strike": ("struck",),
    "draw": ("drew", "drawn"),
    "ring": ("rang", "rung"),
}


@dataclass(frozen=True)
class WsiInstance:
    """One instance: ``tokens[position]`` is the target; ``before`` / ``after`` the tokens of the sentences around it."""

    id: str
    word: str  # the lemma.POS key, e.g. "access.n"
    tokens: List[str]
    position: int
    before: Tuple[str, ...] = ()
    after: Tuple[str, ...] = ()

    def window(self, n: int) -> Tuple[List[str], int]:
        """The target sentence with up to ``n`` context tokens on each side, and the target's index in it."""
        before = list(self.before[len(self.before) - n :]) if n > 0 else []
        after = list(self.after[:n]) if n > 0 else []
        return before + self.tokens + after, self.position + len(before)


def find_target(tokens: Sequence[str], lemma: str) -> Optional[int]:
    """The index of ``lemma``'s first (possibly inflected) form in ``tokens``; ``None`` if none is there."""
    lemma = lemma.lower()
    forms = {lemma, *IRREGULAR.get(lemma, ())}
    lowered = [t.lower() for t in tokens]
    for i, token in enumerate(lowered):
        if token in forms or lemma in inflection_bases(token):
            return i
    for i, token in enumerate(lowered):  # a hyphenated or otherwise glued form: "cash-access", "accessed."
        parts = re.split(r"[^a-z]+", token)
        if any(p in forms or lemma in inflection_bases(p) for p in parts if p):
            return i
    return None


def _text(node: ET.Element) -> str:
    return " ".join("".join(node.itertext()).split())


def read_semeval2010(folder: Union[str, Path], words: Optional[Sequence[str]] = None) -> Dict[str, List[WsiInstance]]:
    """``{lemma.POS: instances}`` from the task's ``test_data`` folder (or the folder above it).

    An instance whose target sentence has no form of the lemma is skipped: the scorer then
    counts it as unclustered (none is, in the release: every target is found).
    """
    folder = Path(folder)
    if (folder / "test_data").is_dir():
        folder = folder / "test_data"
    files = sorted(folder.glob("*/*.xml")) or sorted(folder.glob("*.xml"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no SemEval-2010 instance files (nouns/*.xml, verbs/*.xml)")
    out: Dict[str, List[WsiInstance]] = {}
    for path in files:
        word = path.name[: -len(".xml")]
        if words is not None and word not in words:
            continue
        lemma = word.rsplit(".", 1)[0]
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as error:
            raise ValueError(f"{path}: not well-formed XML ({error})") from None
        instances: List[WsiInstance] = []
        for node in root:
            target = node.find("TargetSentence")
            if target is None:
                continue
            tokens = _text(target).split()
            position = find_target(tokens, lemma)
            if position is None:
                continue
            before, after = tuple((node.text or "").split()), tuple((target.tail or "").split())
            instances.append(WsiInstance(node.tag, word, tokens, position, before, after))
        out[word] = instances
    return out
