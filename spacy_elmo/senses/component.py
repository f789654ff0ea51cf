"""The ``elmo_senses`` component: nearest-centroid word senses for tokens whose lemma it knows.

Put it after ``elmo`` (and after whatever sets lemmas, unless ``key = "lower"``). For each token
whose key (see :func:`~spacy_elmo.senses.inventory.token_key`) the inventory knows, it sets
``token._.elmo_sense`` (the sense), ``token._.elmo_sense_score`` (cosine to that sense's centroid,
None if it has none) and ``token._.elmo_sense_method`` (``"centroid"``, or ``"most_frequent"``
for the back-off) and ``token._.elmo_sense_name`` (the sense's name, for an inventory that has
names: induced senses); other tokens get None. The inventory is saved and loaded with the pipeline.
"""

# no ``from __future__ import annotations``: spaCy validates the initialize settings with pydantic,
# which needs the annotations of ``initialize`` as real types
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Union, cast

import srsly
from spacy.language import Language
from spacy.tokens import Doc, Token

from .inventory import SenseInventory, token_key

INVENTORY_FILE = "inventory.bin"
CFG_FILE = "cfg"  # written last by to_disk: it says whether an inventory belongs with it


def install_sense_extensions() -> None:
    """Register ``token._.elmo_sense``, ``elmo_sense_score``, ``elmo_sense_method`` and ``elmo_sense_name`` (idempotent)."""
    for name in ("elmo_sense", "elmo_sense_score", "elmo_sense_method", "elmo_sense_name"):
        if not Token.has_extension(name):
            Token.set_extension(name, default=None)


@Language.factory(
    "elmo_senses",
    default_config={"min_score": None, "backoff": True, "prior_weight": None},
    assigns=["token._.elmo_sense", "token._.elmo_sense_score", "token._.elmo_sense_method", "token._.elmo_sense_name"],
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
    chooses it on a dev set. An inventory that records its biLM's fingerprint is checked against
    the pipeline's ``elmo`` biLM once (at ``initialize`` or the first Doc): another biLM is an
    error, not a silent wrong sense.
    """

    def __init__(
        self,
        nlp: Optional[Language],
        name: str = "elmo_senses",
        *,
        min_score: Optional[float] = None,
        backoff: bool = True,
        inventory: Optional[SenseInventory] = None,
        prior_weight: Optional[float] = None,
    ) -> None:
        install_sense_extensions()
        self.name = name
        if prior_weight is not None and not (isinstance(prior_weight, (int, float)) and 0 <= prior_weight < float("inf")):
            raise ValueError(f"'{name}': prior_weight must be a number >= 0 (or null), got {prior_weight!r}")
        self.prior_weight = None if prior_weight is None else float(prior_weight)
        self.min_score = None if min_score is None else float(min_score)
        self.backoff = bool(backoff)
        self.inventory = inventory
        self._nlp_ref = weakref.ref(nlp) if nlp is not None else None
        self._checked = False

    def set_inventory(self, inventory: SenseInventory) -> None:
        if not isinstance(inventory, SenseInventory):
            raise TypeError(f"set_inventory expects a SenseInventory, got {type(inventory).__name__}")
        self.inventory = inventory
        self._checked = False

    def _check_fingerprint(self) -> None:
        """Compare the inventory's biLM with the pipeline's ``elmo`` biLM (once per inventory)."""
        nlp = self._nlp_ref() if self._nlp_ref is not None else None
        if self._checked or self.inventory is None or self.inventory.fingerprint is None or nlp is None:
            return
        for name, component in nlp.pipeline:
            if nlp.get_pipe_meta(name).factory == "elmo":
                from ..bilm.fingerprint import bilm_fingerprint
                from ..pipeline.component import Elmo

                component = cast(Elmo, component)

                self.inventory.check_fingerprint(bilm_fingerprint(component.bilm), f"the biLM of the pipeline's {name!r} component")
                break
        self._checked = True

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_nlp_ref"] = None  # weak references do not pickle; a worker's copy was checked here or is checked by its parent
        return state

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Any]]] = None,
        *,
        nlp: Optional[Language] = None,
        inventory: Optional[Union[str, Path, SenseInventory]] = None,
    ) -> None:
        """Load the inventory (a file written by ``SenseInventory.to_disk``, or the object itself);
        from a config: ``[initialize.components.elmo_senses] inventory = "senses.bin"``."""
        if inventory is None:
            if self.inventory is None:
                raise ValueError(f"'{self.name}' needs a sense inventory: initialize it with inventory=PATH or call set_inventory()")
            return
        self.set_inventory(inventory if isinstance(inventory, SenseInventory) else SenseInventory.from_disk(inventory))
        self._check_fingerprint()

    def __call__(self, doc: Doc) -> Doc:
        inventory = self.inventory
        if inventory is None:
            raise ValueError(f"'{self.name}' has no sense inventory: call set_inventory(), or initialize it with inventory=PATH")
        if not self._checked:
            self._check_fingerprint()
        if inventory.key in ("lemma", "lemma_pos") and len(doc) and not doc.has_annotation("LEMMA"):
            raise ValueError(
                f"'{self.name}': the Doc has no lemmas, but the sense inventory is keyed by {inventory.key!r}: add a "
                "lemmatizer before it (spaCy's needs a tagger/attribute_ruler), or build the inventory with key='lower'"
            )
        if doc._.elmo_vectors is None:
            raise ValueError(f"'{self.name}': the Doc has no ELMo vectors; put it after the 'elmo' component")
        tokens, keys = [], []
        for token in doc:
            token._.elmo_sense = token._.elmo_sense_score = token._.elmo_sense_method = token._.elmo_sense_name = None
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
            token._.elmo_sense_name = inventory.names.get(prediction.sense)
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterable[Doc]:
        for doc in stream:
            yield self(doc)

    # ------------------------------------------------------------------ serialisation

    def _cfg(self) -> dict:
        return {
            "min_score": self.min_score,
            "backoff": self.backoff,
            "prior_weight": self.prior_weight,
            "has_inventory": self.inventory is not None,
        }

    def _apply_cfg(self, cfg: Any, source: str) -> bool:
        """Take the saved settings; returns whether an inventory was saved with them."""
        if not isinstance(cfg, dict) or not {"min_score", "backoff", "has_inventory"} <= set(cfg):
            raise ValueError(f"{source}: not the settings of a saved elmo_senses component")
        self.min_score = None if cfg["min_score"] is None else float(cfg["min_score"])
        self.backoff = bool(cfg["backoff"])
        prior_weight = cfg.get("prior_weight")  # absent in components saved before it existed
        self.prior_weight = None if prior_weight is None else float(prior_weight)
        return bool(cfg["has_inventory"])

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.msgpack_dumps({"cfg": self._cfg(), "inventory": self.inventory.to_bytes() if self.inventory is not None else None})

    def from_bytes(self, data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoSenses":
        msg = srsly.msgpack_loads(data)
        if not isinstance(msg, dict):
            raise ValueError(f"'{self.name}': not a serialised elmo_senses component")
        if self._apply_cfg(msg.get("cfg"), f"'{self.name}' bytes"):
            if msg.get("inventory") is None:
                raise ValueError(f"'{self.name}' bytes: the settings say a sense inventory was saved, but it is missing")
            self.set_inventory(SenseInventory.from_bytes(msg["inventory"]))
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """The inventory first, then ``cfg`` (written last: a folder without it is an interrupted save)."""
        from .. import files

        folder = files.start_folder(path, CFG_FILE)
        if self.inventory is not None:
            self.inventory.to_disk(folder / INVENTORY_FILE)
        elif (folder / INVENTORY_FILE).exists():
            (folder / INVENTORY_FILE).unlink()
        files.write_json(folder / CFG_FILE, self._cfg())

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ElmoSenses":
        """Load what :meth:`to_disk` saved; a missing ``cfg`` or inventory file is an error naming it."""
        path = Path(path)
        if not (path / CFG_FILE).is_file():
            raise FileNotFoundError(
                f"{path / CFG_FILE} is missing: {path} is not a saved elmo_senses component, or its save was interrupted"
            )
        if self._apply_cfg(srsly.read_json(path / CFG_FILE), str(path / CFG_FILE)):
            if not (path / INVENTORY_FILE).is_file():
                raise FileNotFoundError(
                    f"{path / INVENTORY_FILE} is missing: '{self.name}' was saved with a sense inventory; restore the file or save the pipeline again"
                )
            self.set_inventory(SenseInventory.from_disk(path / INVENTORY_FILE))
        return self
