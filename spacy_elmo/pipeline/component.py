"""The ``elmo`` pipeline component: runs the biLM over each Doc and stores ELMo vectors."""
from __future__ import annotations

import io
import os
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import srsly
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch

from ..bilm import BiLM, ScalarMix, load_bilm
from ..bilm.batching import pack_by_token_budget
from ..bilm.characters import TokenBatch
from ..bilm.memory import release_free_memory
from ..bilm.model import BiLMConfig
from ..bilm.weights import load_native, model_from_state, save_native
from .contexts import Context, ContextGetter
from .extensions import install_extensions, set_hooks

DEFAULT_CONFIG: Dict[str, Any] = {
    "weights": None,
    "mix": "average",
    "gamma": 1.0,
    "layer_norm": False,
    "contexts": {"@misc": "spacy-elmo.sentence_contexts.v1", "max_length": 200, "overlap": 40},
    "max_batch_tokens": 4096,
    "token_cache_size": 20000,
    "precision": "float32",
    "store_layers": True,
    "set_hooks": True,
    "set_doc_tensor": None,
}


@Language.factory("elmo", default_config=DEFAULT_CONFIG)
def make_elmo(
    nlp: Language,
    name: str,
    weights: Optional[str],
    mix: Union[str, List[float]],
    gamma: float,
    layer_norm: bool,
    contexts: ContextGetter,
    max_batch_tokens: int,
    token_cache_size: int,
    precision: str,
    store_layers: bool,
    set_hooks: bool,
    set_doc_tensor: Optional[bool],
) -> "Elmo":
    """Create the ``elmo`` component (see the README's configuration table)."""
    return Elmo(
        nlp,
        name,
        weights=weights,
        mix=mix,
        gamma=gamma,
        layer_norm=layer_norm,
        contexts=contexts,
        max_batch_tokens=max_batch_tokens,
        token_cache_size=token_cache_size,
        precision=precision,
        store_layers=store_layers,
        set_hooks=set_hooks,
        set_doc_tensor=set_doc_tensor,
    )


PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Elmo(Pipe):
    """Adds ELMo vectors to Docs: ``doc.tensor``, ``._.elmo*`` attributes and similarity hooks.

    The biLM is frozen here (downstream models learn their own mix through the registered
    architectures). Contexts from all Docs of a batch are sorted by length and packed so that
    ``rows * (longest + 2) <= max_batch_tokens``: memory depends on that budget, not on the
    length of any Doc. Every context starts from a zero LSTM state, so outputs do not depend on
    batch composition.
    """

    def __init__(
        self,
        nlp: Optional[Language],
        name: str = "elmo",
        *,
        weights: Optional[str] = None,
        mix: Union[str, Sequence[float]] = "average",
        gamma: float = 1.0,
        layer_norm: bool = False,
        contexts: ContextGetter,
        max_batch_tokens: int = 4096,
        token_cache_size: int = 20000,
        precision: str = "float32",
        store_layers: bool = True,
        set_hooks: bool = True,
        set_doc_tensor: Optional[bool] = None,
        model: Optional[BiLM] = None,
    ) -> None:
        install_extensions()
        max_length = getattr(contexts, "max_length", None)
        if max_batch_tokens < 3 or (max_length is not None and max_length + 2 > max_batch_tokens):
            raise ValueError(
                f"elmo: max_batch_tokens={max_batch_tokens} must be at least the context max_length + 2"
                f" ({max_length} + 2)"
            )
        self.name = name
        self.weights = weights
        self.mix_spec = mix if isinstance(mix, str) else [float(w) for w in mix]
        self.gamma, self.layer_norm = float(gamma), bool(layer_norm)
        self.get_contexts = contexts
        self.max_batch_tokens = int(max_batch_tokens)
        if token_cache_size < 0:
            raise ValueError(f"elmo: token_cache_size must be >= 0, got {token_cache_size}")
        self.token_cache_size = int(token_cache_size)
        if precision not in PRECISIONS:
            raise ValueError(f"elmo: precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        self.precision = precision
        self.store_layers, self.set_hooks = bool(store_layers), bool(set_hooks)
        self.set_doc_tensor = set_doc_tensor
        self._nlp_ref = weakref.ref(nlp) if nlp is not None else None
        self._tensor_decision: Optional[Tuple[Tuple[str, ...], bool]] = None
        self._bilm: Optional[BiLM] = None
        self._pid = os.getpid()
        self.mixer: Optional[ScalarMix] = None
        if model is not None:
            self._set_model(model)

    # ---------------------------------------------------------------- model

    @property
    def bilm(self) -> BiLM:
        """The biLM, loaded from ``weights`` on first use."""
        if self._bilm is None:
            self._set_model(self._load_configured())
        assert self._bilm is not None
        return self._bilm

    def _load_configured(self) -> BiLM:
        if self.weights is None:
            from ..models import default_model_path

            return load_bilm(default_model_path())
        return load_bilm(self.weights)

    def _set_model(self, model: BiLM) -> None:
        model.eval()
        model.to(PRECISIONS[self.precision])
        model.set_token_cache(self.token_cache_size)
        self._bilm = model
        self.mixer = ScalarMix(
            model.n_output_layers, self.mix_spec, gamma=self.gamma, layer_norm=self.layer_norm, trainable=False
        ).eval()

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the weights (if not loaded yet); no training data is needed."""
        if nlp is not None:
            self._nlp_ref = weakref.ref(nlp)
        self.bilm  # noqa: B018 - loads

    # ---------------------------------------------------------------- processing

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc], self.predict([doc]))
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    def predict(self, docs: Sequence[Doc]) -> List[Tuple[np.ndarray, Optional[np.ndarray]]]:
        """Per Doc: (mixed vectors ``[n, dim]``, all layers ``[L+1, n, dim]`` or None)."""
        if os.getpid() != self._pid:
            # A forked worker (nlp.pipe(n_process=N)): the parent's OpenMP pool does not survive
            # fork, and N workers already fill the cores, so each worker computes on one thread.
            torch.set_num_threads(1)
            self._pid = os.getpid()
        bilm, mixer = self.bilm, self.mixer
        assert mixer is not None
        n_layers, dim = bilm.n_output_layers, bilm.output_dim
        vectors = [np.zeros((len(doc), dim), dtype=np.float32) for doc in docs]
        layers = [np.zeros((n_layers, len(doc), dim), dtype=np.float32) if self.store_layers else None for doc in docs]
        jobs: List[Tuple[int, Context, List[str]]] = []
        for d, doc in enumerate(docs):
            words = [t.text for t in doc]
            for context in self.get_contexts(doc):
                jobs.append((d, context, [words[i] for i in context.indices]))
        jobs.sort(key=lambda job: len(job[1]))
        with torch.inference_mode():
            lengths = [len(job[1]) for job in jobs]
            for chosen in pack_by_token_budget(range(len(jobs)), lengths, self.max_batch_tokens):
                batch = [jobs[i] for i in chosen]
                output = bilm(TokenBatch.from_sentences([job[2] for job in batch]), boundaries=False).float()  # [L+1, B, T, dim]
                mixed = mixer(output).float().cpu().numpy()
                raw = output.cpu().numpy() if self.store_layers else None
                for row, (d, context, _) in enumerate(batch):
                    keep = slice(context.keep_start, context.keep_end)
                    target = context.indices[keep]
                    vectors[d][target] = mixed[row, keep]
                    if raw is not None:
                        layers[d][:, target] = raw[:, row, keep]  # type: ignore[index]
                del output, mixed, raw
                release_free_memory()
        return list(zip(vectors, layers))

    def set_annotations(self, docs: Sequence[Doc], predictions: Sequence[Tuple[np.ndarray, Optional[np.ndarray]]]) -> None:
        write_tensor = self._should_set_doc_tensor()
        for doc, (vectors, layers) in zip(docs, predictions):
            doc._.elmo_vectors = vectors
            doc._.elmo_layers = layers
            if write_tensor:
                doc.tensor = vectors
            if self.set_hooks:
                set_hooks(doc)

    # ---------------------------------------------------------------- doc.tensor and listeners

    def _should_set_doc_tensor(self) -> bool:
        nlp = self._nlp_ref() if self._nlp_ref is not None else None
        if nlp is None:
            return self.set_doc_tensor is not False
        key = tuple(nlp.pipe_names)
        if self._tensor_decision is None or self._tensor_decision[0] != key:
            conflict = find_tensor_conflict(nlp, self.name)
            decision = self.set_doc_tensor if self.set_doc_tensor is not None else conflict is None
            if conflict is not None:
                action = "overwrites" if decision else "leaves"
                warnings.warn(
                    f"elmo: '{conflict[0]}' writes doc.tensor before '{self.name}' and '{conflict[1]}' reads it after "
                    f"(a tok2vec listener). '{self.name}' {action} doc.tensor"
                    + (", so that listener would read ELMo vectors instead of its tok2vec output" if decision else "")
                    + f". ELMo vectors stay in doc._.elmo_vectors. Fix: add '{self.name}' before '{conflict[0]}' "
                    "(nlp.add_pipe('elmo', first=True)), or set config set_doc_tensor=false to silence this.",
                    UserWarning,
                    stacklevel=3,
                )
            self._tensor_decision = (key, bool(decision))
        return self._tensor_decision[1]

    # ---------------------------------------------------------------- serialisation

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_native(self.bilm, path / "model")

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "Elmo":
        path = Path(path)
        self._set_model(load_native(path / "model"))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        buffer = io.BytesIO()
        torch.save({k: v.detach().cpu().float() for k, v in self.bilm.state_dict().items()}, buffer)
        return srsly.msgpack_dumps({"options": self.bilm.config.to_options(), "weights": buffer.getvalue()})

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        msg = srsly.msgpack_loads(bytes_data)
        config = BiLMConfig.from_options(msg["options"], source="serialised elmo component")
        state = torch.load(io.BytesIO(msg["weights"]), map_location="cpu", weights_only=True)
        self._set_model(model_from_state(config, state, "serialised elmo component"))
        return self

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_nlp_ref"] = None  # weak references do not pickle
        return state


def find_tensor_conflict(nlp: Language, name: str) -> Optional[Tuple[str, str]]:
    """(tok2vec, listener) when a component before ``name`` writes doc.tensor for a listener after it."""
    names = nlp.pipe_names
    if name not in names:
        return None
    position = names.index(name)
    for upstream in names[:position]:
        pipe = nlp.get_pipe(upstream)
        listeners = getattr(pipe, "listening_components", None)
        if not listeners or not _writes_doc_tensor(pipe):
            continue
        for listener in listeners:
            if listener in names and names.index(listener) > position:
                return upstream, listener
    return None


def _writes_doc_tensor(pipe: Any) -> bool:
    from spacy.pipeline import Tok2Vec

    return isinstance(pipe, Tok2Vec)
