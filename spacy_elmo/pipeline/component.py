"""The ``elmo`` pipeline component: runs the biLM over each Doc and stores ELMo vectors."""

from __future__ import annotations

import copy
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats3d

from ..bilm import BiLM, ScalarMix
from ..bilm.scalar_mix import FixedMix, check_mix_spec, mix_logits, spec_weights
from ..bilm.weights import WeightsError, load_native, save_native
from ..extensions import attach_hooks, install_extensions
from ..hub.load import read_config
from ..hub.resolve import check_weights_spec, normalise_spec
from ..layers.bilm_model import bilm_from_bytes, bilm_to_bytes, build_bilm_model, configure_bilm_model, get_bilm, get_shim
from ..layers.contexts import ContextGetter
from ..layers.listener import ElmoListener
from ..roundtrip import keep_hooks_across_processes, silence_worker_hook_warning
from ..threads import check_component_threads, resolve_threads, using_threads
from .listeners import ListenerRegistry
from .policy import find_tensor_conflict, trains_without_elmo

DEFAULT_MODEL: Dict[str, Any] = {
    "@architectures": "spacy-elmo.BiLM.v1",
    "weights": None,
    "contexts": {"@misc": "spacy-elmo.sentence_contexts.v1", "max_length": 200, "overlap": 40},
    "max_batch_tokens": 4096,
    "token_cache_size": 20000,
    "precision": "float32",
}

DEFAULT_CONFIG: Dict[str, Any] = {
    "model": DEFAULT_MODEL,
    # shortcuts for the model block's keys (null = take the model block's value)
    "weights": None,
    "contexts": None,
    "max_batch_tokens": None,
    "token_cache_size": None,
    "precision": None,
    # the mix written to doc.tensor / doc._.elmo_vectors
    "mix": "average",
    "gamma": 1.0,
    "layer_norm": False,
    "store_layers": True,
    "set_hooks": True,
    # the vectors .similarity compares (null = the mix above; else a mix spec of its own)
    "similarity": None,
    "set_doc_tensor": None,
    # compute threads for the biLM (0 = one per core)
    "threads": 1,
    # training
    "frozen": True,
    "grad_factor": 1.0,
    # set to true by the component itself once it holds a biLM: `weights` then records where it
    # came from and is not checked when the pipeline is built from this config (for from_bytes).
    # spacy.load does not need it: a component restored from a saved folder defers the check, and
    # from_disk decides from the folder's own files (see Elmo.from_disk)
    "bilm_carried": False,
}


@Language.factory("elmo", default_config=DEFAULT_CONFIG)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats3d]],
    weights: Optional[Union[str, List[str]]],
    contexts: Optional[ContextGetter],
    max_batch_tokens: Optional[int],
    token_cache_size: Optional[int],
    precision: Optional[str],
    mix: Union[str, List[float]],
    gamma: float,
    layer_norm: bool,
    store_layers: bool,
    set_hooks: bool,
    set_doc_tensor: Optional[bool],
    similarity: Optional[Union[str, List[float]]],
    threads: int,
    frozen: bool,
    grad_factor: float,
    bilm_carried: bool,
) -> "Elmo":
    """Create the ``elmo`` component (see the README's configuration table)."""
    return Elmo(
        nlp,
        model,
        name,
        weights=weights,
        contexts=contexts,
        max_batch_tokens=max_batch_tokens,
        token_cache_size=token_cache_size,
        precision=precision,
        mix=mix,
        gamma=gamma,
        layer_norm=layer_norm,
        store_layers=store_layers,
        set_hooks=set_hooks,
        set_doc_tensor=set_doc_tensor,
        similarity=similarity,
        threads=threads,
        frozen=frozen,
        grad_factor=grad_factor,
        bilm_carried=bilm_carried,
        restoring=_built_to_restore(nlp, name),
    )


def _built_to_restore(nlp: Language, name: str) -> bool:
    """Whether ``nlp`` is being built to be restored from a saved pipeline that holds the component
    ``name``: ``spacy.load`` hands the saved ``meta.json`` to the new ``Language`` before it creates
    the components (``from_disk`` follows), and its ``components`` list names every component saved.
    Read from the meta as given: the ``meta`` property would rewrite that list from the components
    built so far. A blank pipeline's meta has no such list until something reads ``nlp.meta``, and
    a pipeline already restored has its ``path`` (a component added to it is checked as usual)."""
    given = getattr(nlp, "_meta", None)
    saved = given.get("components") if isinstance(given, dict) else None
    return isinstance(saved, list) and name in saved and nlp.path is None


class Elmo(ListenerRegistry, TrainablePipe):
    """Adds ELMo vectors to Docs and feeds the biLM layers to downstream listeners.

    Prediction: ``doc._.elmo_layers`` (all layers), ``doc._.elmo_vectors`` and ``doc.tensor`` (a
    fixed mix), ``._.elmo`` getters and similarity hooks. Training: ``update`` runs the biLM once
    per batch and hands the layers to every ``spacy-elmo.ElmoListener.v1`` that listens to this
    component (each learns its own mix). ``frozen`` (default) keeps the biLM's weights fixed: no
    gradients, no optimizer step. Contexts from all Docs of a batch are sorted by length and
    packed under a token budget, and every context starts from a zero LSTM state, so outputs do
    not depend on batch composition.
    """

    def __init__(
        self,
        nlp: Optional[Language],
        model: Optional[Model[List[Doc], List[Floats3d]]] = None,
        name: str = "elmo",
        *,
        weights: Optional[Union[str, List[str]]] = None,
        contexts: Optional[ContextGetter] = None,
        max_batch_tokens: Optional[int] = None,
        token_cache_size: Optional[int] = None,
        precision: Optional[str] = None,
        mix: Union[str, Sequence[float]] = "average",
        gamma: float = 1.0,
        layer_norm: bool = False,
        store_layers: bool = True,
        set_hooks: bool = True,
        set_doc_tensor: Optional[bool] = None,
        similarity: Optional[Union[str, Sequence[float]]] = None,
        threads: Optional[int] = 1,
        frozen: bool = True,
        grad_factor: float = 1.0,
        bilm_carried: bool = False,
        restoring: bool = False,
    ) -> None:
        install_extensions()
        silence_worker_hook_warning()
        self.vocab = nlp.vocab if nlp is not None else Vocab()
        self.model = model if model is not None else build_bilm_model()
        self.name = name
        self.listener_map: Dict[str, List[ElmoListener]] = {}
        self.overrides: Dict[str, Any] = {
            "weights": None if weights is None else normalise_spec(weights),
            "contexts": contexts,
            "max_batch_tokens": max_batch_tokens,
            "token_cache_size": token_cache_size,
            "precision": precision,
        }
        configure_bilm_model(self.model, frozen=bool(frozen), grad_factor=grad_factor, **self.overrides)
        self.model.attrs["replace_listener"] = self._replace_listener
        self.model.attrs["replace_listener_cfg"] = self._replace_listener_cfg
        self.mix_spec = mix if isinstance(mix, str) else [float(w) for w in mix]
        self.gamma, self.layer_norm = float(gamma), bool(layer_norm)
        self.store_layers, self.set_hooks = bool(store_layers), bool(set_hooks)
        self.set_doc_tensor = set_doc_tensor
        self.similarity = similarity if similarity is None or isinstance(similarity, str) else [float(w) for w in similarity]
        self._check_config(against_weights=not (restoring or bilm_carried))
        self.frozen, self.grad_factor = bool(frozen), float(grad_factor)
        self.threads = resolve_threads(threads)
        self.cfg: Dict[str, Any] = {}
        self._nlp_ref = weakref.ref(nlp) if nlp is not None else None
        if nlp is not None:
            keep_hooks_across_processes(nlp)
        self._tensor_decision: Optional[Tuple[Tuple[str, ...], bool]] = None
        self._unused_warned = False
        self._last_update: Optional[Tuple[List[Doc], List[Floats3d]]] = None
        self.mixer: Optional[ScalarMix] = None
        # a `weights` that names no biLM: kept, not raised, while a restore is to come (`restoring`:
        # built by spacy.load from a saved pipeline), since the saved folder may carry the biLM;
        # from_disk raises it when the folder does not, and a use before any restore loads from
        # `weights` and fails with the same message
        self._weights_error: Optional[WeightsError] = None
        if not bilm_carried:
            try:
                self._check_weights()
            except WeightsError as error:
                if not restoring:
                    raise
                self._weights_error = error

    def _check_weights(self) -> None:
        """``weights`` must name a biLM that exists (a folder with the right files, a published name,
        ``en_default``): checked at creation, loading and downloading nothing."""
        try:
            check_weights_spec(get_shim(self.model).weights)
        except WeightsError as error:
            raise WeightsError(f"elmo: config weights: {error}") from None

    def _mark_carried(self) -> None:
        """Record in the pipeline's config that it now carries the biLM (see ``bilm_carried``)."""
        nlp = self._nlp_ref() if self._nlp_ref is not None else None
        if nlp is not None and self.name in nlp.component_names and nlp.get_pipe(self.name) is self:
            nlp.get_pipe_config(self.name)["bilm_carried"] = True

    def _check_config(self, against_weights: bool = True) -> None:
        """Validate the settings at construction, not at the first Doc. Every mix must fit the
        biLM's layer count: checked now where the configured weights' options can be read (no
        weights are loaded), and again whenever a biLM is loaded or restored. A component built
        to be restored (``from_disk``/``from_bytes``; ``against_weights`` false) is checked only
        against the biLM it restores: its configured weights may be gone, or hold another model."""
        for key, spec in (("mix", self.mix_spec), ("similarity", self.similarity)):
            if spec is not None:
                try:
                    check_mix_spec(spec)
                except ValueError as error:
                    raise ValueError(f"elmo: config {key}: {error}") from None
        shim = get_shim(self.model)
        if shim.loaded:
            self._check_mixes(shim.bilm.n_output_layers)
            return
        if not against_weights:
            return
        try:
            n_layers = read_config(shim.weights).n_layers + 1
        except WeightsError:
            return  # loading them (initialize or first use) says what is wrong; from_disk/from_bytes need them not
        self._check_mixes(n_layers)

    def _check_mixes(self, n_layers: int) -> None:
        """Every mix fits a biLM of ``n_layers`` output layers."""
        for key, spec in (("mix", self.mix_spec), ("similarity", self.similarity)):
            if spec is not None:
                try:
                    mix_logits(spec, n_layers)
                except ValueError as error:
                    raise ValueError(f"elmo: config {key}: {error}") from None

    @property
    def is_trainable(self) -> bool:
        """False while the biLM is frozen: it has no weights to train, so spaCy neither steps it
        nor logs a loss for it (``spacy train`` shows no "LOSS ELMO" column that stays 0.00).
        ``update`` still runs it and feeds its listeners."""
        return not self.frozen

    # ---------------------------------------------------------------- model

    @property
    def bilm(self) -> BiLM:
        """The torch biLM: restored by :meth:`from_disk`/:meth:`from_bytes`, or loaded from
        ``weights`` by :meth:`initialize` or, failing both, here on first use (once)."""
        return self._ensure_loaded()

    @property
    def loaded(self) -> bool:
        """Whether the biLM is there yet (loaded from ``weights``, or restored by ``from_disk``/``from_bytes``)."""
        return get_shim(self.model).loaded

    def _ensure_loaded(self) -> BiLM:
        """The biLM, loaded from ``weights`` now if nothing has provided one yet: once, however many
        threads ask at the same time. A ``weights`` value that names no biLM is one error naming the
        setting, and a biLM whose layers do not fit ``mix``/``similarity`` is rejected, not kept."""
        shim = get_shim(self.model)
        if shim.loaded:
            return get_bilm(self.model)
        try:
            bilm = shim.load(check=lambda bilm: self._check_mixes(bilm.n_output_layers))
        except WeightsError as error:
            raise WeightsError(f"elmo: config weights: {error}") from None
        self._mark_carried()
        return bilm

    def layer_shape(self) -> Tuple[int, int]:
        """(number of output layers, width) of the biLM, read from its options when it is not loaded yet."""
        try:
            return get_shim(self.model).layer_shape()
        except WeightsError as error:
            raise WeightsError(f"elmo: config weights: {error}") from None

    @property
    def weights(self) -> Optional[Union[str, List[str]]]:
        return get_shim(self.model).weights

    def _mixer(self) -> ScalarMix:
        if self.mixer is None:
            self.mixer = ScalarMix(
                self.bilm.n_output_layers, self.mix_spec, gamma=self.gamma, layer_norm=self.layer_norm, trainable=False
            ).eval()
        return self.mixer

    def _set_bilm(self, bilm: BiLM) -> None:
        """Restore a saved biLM (from_disk/from_bytes); the mixes must fit it."""
        self._check_mixes(bilm.n_output_layers)
        get_shim(self.model).set_bilm(bilm)
        self.mixer = None
        self._last_update = None
        self._weights_error = None
        self._mark_carried()

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the biLM from the ``weights`` setting now (eagerly, rather than on first use), unless
        one is loaded or restored (``from_disk``/``from_bytes``) already; no training data is needed."""
        if nlp is not None:
            self._nlp_ref = weakref.ref(nlp)
            keep_hooks_across_processes(nlp)
        self._ensure_loaded()
        self._mixer()
        self._warn_if_unused()

    def _replace_listener(self, copied: Model, listener: ElmoListener, upstream: "Elmo") -> Model:
        """``nlp.replace_listeners``: the listener node becomes a copy of this biLM model."""
        shim = get_shim(copied)
        shim.set_bilm(copy.deepcopy(upstream.bilm))
        return copied

    def _replace_listener_cfg(self, model_cfg: Dict[str, Any], listener_cfg: Dict[str, Any]) -> Dict[str, Any]:
        bilm_cfg = dict(model_cfg)
        for key, value in self.overrides.items():
            if value is None:
                continue
            if key == "contexts":
                if hasattr(value, "to_config"):
                    bilm_cfg[key] = value.to_config()
            else:
                bilm_cfg[key] = value
        result = {"@architectures": "spacy-elmo.ElmoTok2Vec.v1", "bilm": bilm_cfg, "frozen": self.frozen, "grad_factor": self.grad_factor}
        for key in ("width", "mix", "embed", "encode", "output_mix"):
            if key in listener_cfg:
                result[key] = listener_cfg[key]
        return result

    # ---------------------------------------------------------------- processing

    def predict(self, docs: Sequence[Doc]) -> List[Floats3d]:
        """All biLM layers per Doc, float32 ``[L+1, len(doc), dim]``."""
        docs = list(docs)
        self._ensure_loaded()  # the first use of a component that nothing has loaded yet
        last, self._last_update = self._last_update, None
        if last is not None and len(last[0]) == len(docs) and all(a is b for a, b in zip(last[0], docs)):
            return last[1]  # the very Docs update() just ran (an annotating component): reuse
        check_component_threads(self.threads)
        with using_threads(self.threads):  # one thread in forked nlp.pipe workers (see spacy_elmo.threads)
            return self.model.predict(docs)

    def set_annotations(self, docs: Sequence[Doc], layers: Sequence[Floats3d]) -> None:
        write_tensor = self._should_set_doc_tensor()
        keep_layers = self.store_layers or bool(self.listener_map)
        mixer = self._mixer()
        mix = mixer.fixed()  # weights and gamma set up once per batch, not once per Doc
        similarity = None if self.similarity is None else FixedMix(spec_weights(self.similarity, mixer.n_layers))
        # the mixes are torch products too: on the component's threads, not on torch's default
        # (all cores), which made these small products 3-4x slower than the biLM's own setting
        with using_threads(self.threads):
            for doc, doc_layers in zip(docs, layers):
                array = np.asarray(doc_layers, dtype=np.float32)
                vectors = mix(array) if array.shape[1] else np.zeros(array.shape[1:], dtype=np.float32)
                ext = doc._  # one accessor for every attribute below
                ext.elmo_vectors = vectors
                ext.elmo_layers = array if keep_layers else None
                ext.elmo_similarity_vectors = None if similarity is None else similarity(array)
                if write_tensor:
                    doc.tensor = vectors  # type: ignore[assignment]  # spaCy's stub says float64; doc.tensor is float32 throughout spaCy
                if self.set_hooks:
                    attach_hooks(doc)

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Run the biLM once on the batch and hand its layers to every listener."""
        if losses is None:
            losses = {}
        if not self.frozen:  # a frozen biLM has no loss (see is_trainable)
            losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "Elmo.update")
        docs = [eg.predicted for eg in examples]
        self._last_update = None
        self._warn_if_unused()
        if not self.listeners:
            return losses
        self._ensure_loaded()
        check_component_threads(self.threads)
        with using_threads(self.threads):
            layers, bp_layers = self.model.begin_update(docs)
        batch_id = ElmoListener.get_batch_id(docs)
        # frozen: the outputs equal what predict() would give for these Doc objects (kept alive here)
        self._last_update = (docs, layers) if self.frozen else None
        if self.frozen:
            for listener in self.listeners:
                listener.receive(batch_id, layers, _frozen_backprop)
            return losses
        d_layers = [self.model.ops.alloc3f(*a.shape) for a in layers]

        def accumulate_gradient(one_d_layers: List[Floats3d]) -> List:
            for total, d in zip(d_layers, one_d_layers):
                total += d
                losses[self.name] += float(self.model.ops.xp.square(d).sum())
            return []

        def backprop(one_d_layers: List[Floats3d]) -> List:
            accumulate_gradient(one_d_layers)
            bp_layers(d_layers)
            if sgd is not None:
                self.finish_update(sgd)
            return []

        for listener in self.listeners[:-1]:
            listener.receive(batch_id, layers, accumulate_gradient)
        self.listeners[-1].receive(batch_id, layers, backprop)
        return losses

    def get_loss(self, examples: Iterable[Example], scores: Any) -> None:
        return None

    def add_label(self, label: str) -> int:
        raise NotImplementedError("elmo has no labels")

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
                    + f". ELMo vectors stay in doc._.elmo_vectors. To train '{conflict[1]}' on ELMo, give it a "
                    "spacy-elmo.ElmoListener.v1 tok2vec instead (README: Training components on ELMo); to keep "
                    f"it on '{conflict[0]}' and silence this, set config set_doc_tensor=false.",
                    UserWarning,
                    stacklevel=3,
                )
            self._tensor_decision = (key, bool(decision))
        return self._tensor_decision[1]

    def _warn_if_unused(self) -> None:
        """In training: say so when trainable components could read ELMo but none does."""
        if self._unused_warned or self.listener_map:
            return
        nlp = self._nlp_ref() if self._nlp_ref is not None else None
        if nlp is None:
            return
        names = nlp.pipe_names
        if self.name not in names:
            return
        later = [n for n in names[names.index(self.name) + 1 :] if trains_without_elmo(nlp.get_pipe(n))]
        if later:
            self._unused_warned = True
            warnings.warn(
                f"elmo: no component reads '{self.name}': {', '.join(repr(n) for n in later)} train without ELMo. "
                "Use spacy-elmo.ElmoListener.v1 as their tok2vec (README: Training components on ELMo).",
                UserWarning,
                stacklevel=3,
            )

    # ---------------------------------------------------------------- serialisation

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_native(self.bilm, path / "model")

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "Elmo":
        """Restore the biLM that :meth:`to_disk` saved in ``path/model``. Whether the saved folder
        carries it is decided here, from its files: ``config.json`` (written last) and
        ``weights.pt`` there, of the size that ``config.json`` records. ``weights`` is then not
        needed, whatever the saved config says (``bilm_carried`` false, or absent in a pipeline
        saved by an earlier release). A folder that does not carry it is one error that names the
        folder, and ``weights`` too where that names no biLM either."""
        folder = Path(path) / "model"
        try:
            bilm = load_native(folder)
        except WeightsError as error:
            if self._weights_error is None:
                raise
            raise WeightsError(
                f"elmo: the saved pipeline does not carry its biLM ({error}), and config weights: {self._weights_error}"
            ) from None
        self._set_bilm(bilm)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return bilm_to_bytes(self.bilm)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        self._set_bilm(bilm_from_bytes(bytes_data, "serialised elmo component"))
        return self

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        if self.set_doc_tensor is None and self._nlp_ref is not None and self._nlp_ref() is not None:
            # the pipeline stays behind (weak references do not pickle): keep its doc.tensor
            # decision, so a spawned worker still leaves a tok2vec listener's tensor alone
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                state["set_doc_tensor"] = self._should_set_doc_tensor()
        state["_nlp_ref"] = None
        state["_last_update"] = None
        # attributes of spaCy's (compiled) base class live outside __dict__
        state.update(vocab=self.vocab, model=self.model, name=self.name, cfg=self.cfg)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        self.vocab, self.model, self.name, self.cfg = state.pop("vocab"), state.pop("model"), state.pop("name"), state.pop("cfg")
        self.__dict__.update(state)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_unpickle_elmo, (self.__getstate__(),))


def _unpickle_elmo(state: Dict[str, Any]) -> "Elmo":
    silence_worker_hook_warning()
    component = Elmo.__new__(Elmo)
    component.__setstate__(state)
    return component


def _frozen_backprop(d_layers: Any) -> List:
    return []
