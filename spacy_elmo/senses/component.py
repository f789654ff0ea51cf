"""The ``elmo_senses`` component: nearest-centroid word senses for tokens whose lemma it knows.

Put it after ``elmo`` (and after whatever sets lemmas, unless ``key = "lower"``). For each token
whose key (see :func:`~spacy_elmo.senses.inventory.token_key`) the inventory knows, it sets
``token._.elmo_sense`` (the sense), ``token._.elmo_sense_score`` (cosine to that sense's centroid,
None if it has none) and ``token._.elmo_sense_method`` (``"centroid"``, or ``"most_frequent"``
for the back-off); other tokens get None. The inventory is saved and loaded with the pipeline.
"""
# no ``from __future__ import annotations``: spaCy validates the initialize settings with pydantic,
# which needs the annotations of ``initialize`` as real types
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

import srsly
from spacy.language import Language
from spacy.tokens import Doc, Token

from .inventory import SenseInventory, token_key

INVENTORY_FILE = "inventory.bin"


def install_sense_extensions() -> None:
    """Register ``token._.elmo_sense``, ``elmo_sense_score`` and ``elmo_sense_method`` (idempotent)."""
    for name in ("elmo_sense", "elmo_sense_score", "elmo_sense_method"):
        if not Token.has_extension(name):
            Token.set_extension(name, default=None)


@Language.factory(
    "elmo_senses",
    default_config={"min_score": None, "backoff": True, "prior_weight": None},
    assigns=["token._.elmo_sense", "token._.elmo_sense_score", "token._.elmo_sense_method"],
    requires=["doc._.elmo_vectors"],
)
def make_elmo_senses(nlp: Language, name: str, min_score: Optional[float], backoff: bool, prior_weight: Optional[float]) -> "ElmoSenses":
    """Create the ``elmo_senses`` component (the inventory comes from ``initialize`` or ``set_inventory``)."""
    return ElmoSenses(nlp, name, min_score=min_score, backoff=backoff, prior_weight=prior_weight)


class ElmoSenses:
    """Sets each known token's sense from a :class:`SenseInventory`.

    ``min_score``: below this cosine to the nearest centroid, take the lemma's most frequent sense
    instead. ``backoff``: use that most frequent sense when the nearest centroid cannot be computed
    (or is below ``min_score``); with ``False`` such tokens get no sense. ``prior_weight``
    (lambda): choose the sense maximising ``cosine + lambda * log p(sense | lemma)`` (the
    inventory's sense frequencies) rather than the cosine alone; ``python -m spacy_elmo wsd``
    chooses it on a dev set.
    """

    def __init__(self, nlp: Optional[Language], name: str = "elmo_senses", *, min_score: Optional[float] = None, backoff: bool = True,
                 inventory: Optional[SenseInventory] = None, prior_weight: Optional[float] = None) -> None:
        install_sense_extensions()
        self.name = name
        if prior_weight is not None and not (isinstance(prior_weight, (int, float)) and 0 <= prior_weight < float("inf")):
            raise ValueError(f"'{name}': prior_weight must be a number >= 0 (or null), got {prior_weight!r}")
        self.prior_weight = None if prior_weight is None else float(prior_weight)
        self.min_score = None if min_score is None else float(min_score)
        self.backoff = bool(backoff)
        self.inventory = inventory

    def set_inventory(self, inventory: SenseInventory) -> None:
        if not isinstance(inventory, SenseInventory):
            raise TypeError(f"set_inventory expects a SenseInventory, got {type(inventory).__name__}")
        self.inventory = inventory

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Optional[Language] = None,
                   inventory: Optional[Union[str, Path, SenseInventory]] = None) -> None:
        """Load the inventory (a file written by ``SenseInventory.to_disk``, or the object itself);
        from a config: ``[initialize.components.elmo_senses] inventory = "senses.bin"``."""
        if inventory is None:
            if self.inventory is None:
                raise ValueError(f"'{self.name}' needs a sense inventory: initialize it with inventory=PATH or call set_inventory()")
            return
        self.set_inventory(inventory if isinstance(inventory, SenseInventory) else SenseInventory.from_disk(inventory))

    def __call__(self, doc: Doc) -> Doc:
        inventory = self.inventory
        if inventory is None:
            raise ValueError(f"'{self.name}' has no sense inventory: call set_inventory(), or initialize it with inventory=PATH")
        if inventory.key in ("lemma", "lemma_pos") and len(doc) and not doc.has_annotation("LEMMA"):
            raise ValueError(
                f"'{self.name}': the Doc has no lemmas, but the sense inventory is keyed by {inventory.key!r}: add a "
                "lemmatizer before it (spaCy's needs a tagger/attribute_ruler), or build the inventory with key='lower'"
            )
        if doc._.elmo_vectors is None:
            raise ValueError(f"'{self.name}': the Doc has no ELMo vectors; put it after the 'elmo' component")
        tokens, keys = [], []
        for token in doc:
            token._.elmo_sense = token._.elmo_sense_score = token._.elmo_sense_method = None
            if token.is_space or not token.lemma_ and inventory.key != "lower":
                continue
            key = token_key(token, inventory.key)
            if key in inventory:
                tokens.append(token)
                keys.append(key)
        if not tokens:
            return doc
        from .vectors import doc_vectors

        vectors = doc_vectors(doc, inventory.layer)[[t.i for t in tokens]]
        for token, prediction in zip(tokens, inventory.predict(keys, vectors, min_score=self.min_score, prior_weight=self.prior_weight)):
            if prediction is None or (prediction.method != "centroid" and not self.backoff):
                continue
            token._.elmo_sense, token._.elmo_sense_score, token._.elmo_sense_method = prediction.sense, prediction.score, prediction.method
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterable[Doc]:
        for doc in stream:
            yield self(doc)

    # ------------------------------------------------------------------ serialisation

    def _cfg(self) -> dict:
        return {"min_score": self.min_score, "backoff": self.backoff, "prior_weight": self.prior_weight, "has_inventory": self.inventory is not None}

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.msgpack_dumps({"cfg": self._cfg(), "inventory": self.inventory.to_bytes() if self.inventory is not None else None})

    def from_bytes(self, data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoSenses":
        msg = srsly.msgpack_loads(data)
        if msg.get("inventory") is not None:
            self.inventory = SenseInventory.from_bytes(msg["inventory"])
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path / "cfg", self._cfg())
        if self.inventory is not None:
            self.inventory.to_disk(path / INVENTORY_FILE)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ElmoSenses":
        path = Path(path)
        if (path / INVENTORY_FILE).exists():
            self.inventory = SenseInventory.from_disk(path / INVENTORY_FILE)
        return self
