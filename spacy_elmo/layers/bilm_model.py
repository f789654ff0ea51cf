"""The biLM as a thinc model: ``List[Doc] -> List[Floats3d]`` (all layers ``[L+1, n_tokens, dim]``).

``spacy-elmo.BiLM.v1`` is what the ``elmo`` component owns (``[components.elmo.model]``) and what
``spacy-elmo.ElmoTok2Vec.v1`` embeds. The torch :class:`BiLM` lives in a :class:`BiLMShim`,
which starts in an explicit "not loaded yet" state: building a pipeline from its config never
reads the weights. The biLM then comes from the first of: ``from_bytes`` (``from_disk``), which
restores a saved one and never reads ``weights``; ``initialize`` (thinc's init, which
``nlp.initialize`` reaches), which loads it from ``weights`` eagerly; or the first use that needs
it (a forward pass, its shape, saving it), which loads it from ``weights`` once, under a lock.

Each Doc is cut into contexts (sentences or windows, see :mod:`.contexts`); contexts from all
Docs of a batch are sorted by length and packed under a token budget; whitespace tokens are not
fed to the biLM and get zero vectors. With ``frozen`` (the default) the biLM runs under
``torch.inference_mode`` and its backprop is a no-op; otherwise gradients from downstream
components flow into the biLM's torch parameters and the optimizer updates them in
``finish_update`` at ``grad_factor`` times its learning rate (a learning-rate factor, so that it
acts under Adam too, which would undo any scaling of the gradient itself).
"""

from __future__ import annotations

import copy
import io
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
import srsly
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, Optimizer
from thinc.shims import Shim
from thinc.types import Floats3d, FloatsXd
from thinc.util import to_numpy, torch2xp, xp2torch

from ..bilm import BiLM
from ..bilm.batching import pack_by_token_budget
from ..bilm.memory import release_free_memory
from ..bilm.model import AUTO_PRECISION, BiLMConfig
from ..bilm.weights import model_from_state
from ..hub.load import load_bilm, read_config
from ..hub.resolve import normalise_spec
from .contexts import Context, ContextGetter, SentenceContexts, is_run

PRECISIONS = (*BiLM.INFERENCE_PRECISIONS, AUTO_PRECISION)
BILM_NODE = "elmo-bilm"
SHIM_SETTINGS = ("weights", "frozen", "precision", "token_cache_size")  # what BiLMShim.from_bytes requires


def load_configured_bilm(weights: Optional[Union[str, List[str]]]) -> BiLM:
    """``weights`` = None: the embedded default English biLM; else any value :func:`load_bilm` takes."""
    return load_bilm(weights)


def bilm_to_bytes(bilm: BiLM) -> bytes:
    """Self-describing bytes: the architecture (options) and a float32 state dict."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().float() for k, v in bilm.state_dict().items()}, buffer)
    return srsly.msgpack_dumps({"options": bilm.config.to_options(), "weights": buffer.getvalue()})


def bilm_from_bytes(data: bytes, source: str = "serialised elmo biLM") -> BiLM:
    msg = srsly.msgpack_loads(data)
    config = BiLMConfig.from_options(msg["options"], source=source)
    state = torch.load(io.BytesIO(msg["weights"]), map_location="cpu", weights_only=True)
    return model_from_state(config, state, source)


class BiLMShim(Shim):
    """Holds the torch :class:`BiLM` for thinc: an explicit load state (:attr:`loaded`; loaded from
    ``weights`` by :meth:`load`, eagerly or on first use, or restored by :meth:`from_bytes`),
    self-describing bytes, and an optimizer step that is skipped entirely while the biLM is frozen
    (no weight decay either)."""

    def __init__(self, weights: Optional[Union[str, List[str]]] = None, bilm: Optional[BiLM] = None) -> None:
        super().__init__(bilm)
        self._load_lock = threading.Lock()
        self.weights: Optional[Union[str, List[str]]] = weights
        self.frozen = True
        self.precision = "float32"
        self.token_cache_size = 0
        self.grad_factor = 1.0

    @property
    def bilm(self) -> BiLM:
        """The biLM: the loaded or restored one, else loaded from ``weights`` now (:meth:`load`)."""
        model = self._model
        return model if model is not None else self.load()

    def load(self, check: Optional[Callable[[BiLM], None]] = None) -> BiLM:
        """Load the biLM from ``weights``, unless one is loaded or restored already; ``check`` may
        reject the freshly loaded one (raising) before it is kept. Concurrent first calls load once."""
        with self._load_lock:
            if self._model is None:
                bilm = load_configured_bilm(self.weights)
                if check is not None:
                    check(bilm)
                self.set_bilm(bilm)
            return self._model

    def layer_shape(self) -> Tuple[int, int]:
        """(number of output layers, width) of the biLM: the loaded one's, else read from the
        configured weights' options (no weights are loaded)."""
        if self._model is not None:
            return self._model.n_output_layers, self._model.output_dim
        config = read_config(self.weights)
        return config.n_layers + 1, config.output_dim

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_load_lock", None)  # locks neither pickle nor deep-copy
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._load_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def set_bilm(self, bilm: BiLM) -> None:
        bilm.eval()
        bilm.float()  # weights stay float32; "bfloat16" runs the products in bfloat16 (see BiLM)
        bilm.set_inference_precision(self.precision)
        bilm.set_token_cache(self.token_cache_size if self.frozen else 0)
        for param in bilm.parameters():
            param.requires_grad_(not self.frozen)
        self._model = bilm

    def configure(
        self,
        *,
        frozen: Optional[bool] = None,
        precision: Optional[str] = None,
        token_cache_size: Optional[int] = None,
        grad_factor: Optional[float] = None,
    ) -> None:
        """Change settings; an already loaded biLM is updated in place."""
        if frozen is not None:
            self.frozen = bool(frozen)
        if grad_factor is not None:
            if isinstance(grad_factor, bool) or not isinstance(grad_factor, (int, float)) or not 0 <= grad_factor < float("inf"):
                raise ValueError(f"elmo: grad_factor must be a finite number >= 0, got {grad_factor!r}")
            self.grad_factor = float(grad_factor)
        if precision is not None:
            if precision not in PRECISIONS:
                raise ValueError(f"elmo: precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
            if precision != "float32" and not self.frozen:
                raise ValueError("elmo: fine-tuning the biLM (frozen = false) needs precision = 'float32'")
            self.precision = precision
        if token_cache_size is not None:
            if token_cache_size < 0:
                raise ValueError(f"elmo: token_cache_size must be >= 0, got {token_cache_size}")
            self.token_cache_size = int(token_cache_size)
        if self._model is not None:
            self.set_bilm(self._model)

    # thinc's Shim interface ---------------------------------------------------------------

    def finish_update(self, optimizer: Optimizer) -> None:
        """One optimizer step for the biLM's parameters, at ``grad_factor`` times the optimizer's
        learning rate (its weight decay scales with it); nothing at all while frozen."""
        if self.frozen or self._model is None:
            return
        for name, param in self._model.named_parameters():
            if param.grad is None:
                continue
            # torch2xp: NumPy for CPU tensors, CuPy (zero-copy) for GPU ones; never .numpy() on a GPU tensor
            weights, grads = cast(FloatsXd, torch2xp(param.data)), cast(FloatsXd, torch2xp(param.grad))  # float tensors
            data, grad = optimizer((self.id, name), weights, grads, lr_scale=self.grad_factor)
            param.data = xp2torch(data, device=param.device).to(param.dtype)
            param.grad.zero_()
        cache = self._model.token_cache
        if cache is not None:
            cache.clear()

    def to_device(self, device_type: str, device_id: int) -> None:  # pragma: no cover - no GPU in CI
        if self._model is not None:
            self._model.to("cpu" if device_type == "cpu" else f"cuda:{device_id}")

    def to_bytes(self) -> bytes:
        """The biLM (architecture and weights) and every setting of this shim."""
        settings = {
            "weights": self.weights,
            "frozen": self.frozen,
            "precision": self.precision,
            "token_cache_size": self.token_cache_size,
            "grad_factor": self.grad_factor,
        }
        return srsly.msgpack_dumps({"settings": settings, "bilm": bilm_to_bytes(self.bilm)})

    def from_bytes(self, data: bytes) -> "BiLMShim":
        """Load what :meth:`to_bytes` wrote: the biLM and its settings (frozen, precision, cache
        size, grad_factor, the weights it came from). Raises ``ValueError`` naming anything missing."""
        try:
            msg = srsly.msgpack_loads(data)
        except Exception as error:  # msgpack raises several types for bytes that are not its own
            raise ValueError(f"spacy-elmo biLM bytes cannot be read ({error}); were they written by BiLMShim.to_bytes?") from None
        if not isinstance(msg, dict):
            raise ValueError("spacy-elmo biLM bytes hold no 'settings' and 'bilm': were they written by BiLMShim.to_bytes?")
        missing = [key for key in ("settings", "bilm") if key not in msg]
        settings: Dict[str, Any] = msg["settings"] if isinstance(msg.get("settings"), dict) else {}
        missing += [f"settings.{key}" for key in SHIM_SETTINGS if "settings" in msg and key not in settings]
        if missing:
            raise ValueError(f"spacy-elmo biLM bytes lack {', '.join(missing)}: were they written by BiLMShim.to_bytes?")
        bilm = bilm_from_bytes(msg["bilm"])
        self.weights = settings["weights"]
        # the precision check needs the frozen setting first; grad_factor came later (default 1.0)
        self.frozen = bool(settings["frozen"])
        self.configure(
            precision=settings["precision"], token_cache_size=settings["token_cache_size"], grad_factor=settings.get("grad_factor", 1.0)
        )
        self.set_bilm(bilm)
        return self

    def copy(self) -> "BiLMShim":
        return copy.deepcopy(self)


@registry.architectures("spacy-elmo.BiLM.v1")
def build_bilm_model(
    weights: Optional[Union[str, List[str]]] = None,
    contexts: Optional[ContextGetter] = None,
    max_batch_tokens: int = 4096,
    token_cache_size: int = 20000,
    precision: str = "float32",
) -> Model[List[Doc], List[Floats3d]]:
    """The biLM over Docs: one float32 array ``[L+1, len(doc), 2·proj]`` per Doc.

    weights: ``null`` = the embedded default English biLM, or what ``load_bilm`` accepts: a published
        model's name (``elmo-original``, ...), a folder, or a list of the options and .hdf5 files.
    contexts: what the biLM reads at once (default: sentences, windows of 200 overlapping by 40).
    max_batch_tokens: token budget per biLM batch (rows x (longest + 2)).
    token_cache_size: context-free token vectors kept in an LRU cache (frozen biLM only).
    precision: "float32" or "bfloat16" (frozen biLM only): bfloat16 matrix products with float32
        state and outputs, about 2x faster on CPUs with bf16 matrix instructions.
    """
    shim = BiLMShim(None if weights is None else normalise_spec(weights))
    model: Model[List[Doc], List[Floats3d]] = Model(
        BILM_NODE,
        bilm_forward,
        init=bilm_init,
        shims=[shim],
        attrs={"contexts": contexts if contexts is not None else SentenceContexts()},
    )
    configure_bilm_model(model, max_batch_tokens=max_batch_tokens, token_cache_size=token_cache_size, precision=precision, frozen=True)
    return model


def configure_bilm_model(
    model: Model,
    *,
    weights: Optional[Union[str, List[str]]] = None,
    contexts: Optional[ContextGetter] = None,
    max_batch_tokens: Optional[int] = None,
    token_cache_size: Optional[int] = None,
    precision: Optional[str] = None,
    frozen: Optional[bool] = None,
    grad_factor: Optional[float] = None,
) -> None:
    """Set the biLM model's settings (``None`` leaves one unchanged), validating each."""
    shim = get_shim(model)
    if weights is not None:
        if shim.loaded and normalise_spec(weights) != shim.weights:
            raise ValueError("elmo: the biLM is already loaded; set weights before first use")
        shim.weights = normalise_spec(weights)
    if contexts is not None:
        model.attrs["contexts"] = contexts
    if max_batch_tokens is not None:
        model.attrs["max_batch_tokens"] = int(max_batch_tokens)
    shim.configure(frozen=frozen, precision=precision, token_cache_size=token_cache_size, grad_factor=grad_factor)
    max_length = getattr(model.attrs["contexts"], "max_length", None)
    budget = model.attrs["max_batch_tokens"]
    if budget < 3 or (max_length is not None and max_length + 2 > budget):
        raise ValueError(f"elmo: max_batch_tokens={budget} must be at least the context max_length + 2 ({max_length} + 2)")


def get_shim(model: Model) -> BiLMShim:
    for node in model.walk():
        if node.name == BILM_NODE and isinstance(node.shims[0], BiLMShim):
            return node.shims[0]
    raise ValueError(f"{model.name} holds no spacy-elmo biLM")


def get_bilm(model: Model) -> BiLM:
    """The torch biLM inside a ``spacy-elmo.BiLM.v1`` model (loaded from ``weights`` on first use
    when neither ``initialize`` nor ``from_bytes`` has provided one)."""
    return get_shim(model).bilm


def bilm_init(model: Model, X: Optional[List[Doc]] = None, Y: Any = None) -> None:
    """thinc's init: load the biLM from ``weights`` (kept when one is loaded or restored already)."""
    get_shim(model).load()


Job = Tuple[int, Context]


def _plan(model: Model, docs: Sequence[Doc]) -> Tuple[List[Job], List[List[str]], List[List[int]]]:
    """Contexts of all Docs sorted by length, their token strings, and the packed batches."""
    get_contexts = model.attrs["contexts"]
    jobs: List[Job] = []
    words = [[t.text for t in doc] for doc in docs]
    for d, doc in enumerate(docs):
        jobs.extend((d, context) for context in get_contexts(doc))
    jobs.sort(key=lambda job: len(job[1]))
    strings = [[words[d][i] for i in context.indices] for d, context in jobs]
    batches = pack_by_token_budget(range(len(jobs)), [len(job[1]) for job in jobs], model.attrs["max_batch_tokens"])
    return jobs, strings, batches


def bilm_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    shim = get_shim(model)
    bilm = shim.bilm
    n_layers, dim = bilm.n_output_layers, bilm.output_dim
    jobs, strings, batches = _plan(model, docs)
    if not is_train or shim.frozen:
        return _predict(bilm, docs, jobs, strings, batches), _no_input_gradient

    outputs = [np.zeros((n_layers, len(doc), dim), dtype=np.float32) for doc in docs]
    kept: List[Tuple[torch.Tensor, List[Job]]] = []
    for chosen in batches:
        output = bilm(bilm.token_batch([strings[i] for i in chosen]), boundaries=False)
        _scatter(output.detach().cpu().numpy(), [jobs[i] for i in chosen], outputs)
        kept.append((output, [jobs[i] for i in chosen]))

    def backprop(d_outputs: List[Floats3d]) -> List:
        d_outputs = [to_numpy(d) for d in d_outputs]  # CuPy arrays when spaCy runs on a GPU
        tensors, grads = [], []
        for output, batch in kept:
            grad = np.zeros(output.shape, dtype=np.float32)
            for row, (d, context) in enumerate(batch):
                keep = slice(context.keep_start, context.keep_end)
                grad[:, row, keep] = d_outputs[d][:, context.indices[keep]]
            tensors.append(output)
            grads.append(torch.from_numpy(grad).to(device=output.device, dtype=output.dtype))
        if tensors:
            torch.autograd.backward(tensors, grads)
        kept.clear()
        return []

    return cast(List[Floats3d], outputs), backprop


def _predict(bilm: BiLM, docs: Sequence[Doc], jobs: List[Job], strings: List[List[str]], batches: List[List[int]]) -> List[Floats3d]:
    """Inference: one float32 ``[L+1, len(doc), dim]`` array per Doc, each written once.

    A Doc read as one whole context (a single sentence without whitespace tokens, the common
    case) gets a contiguous copy of its batch row, as :meth:`BiLM.embed_batch` gives; only Docs
    with several contexts, whitespace tokens or no tokens start from zeros and are filled in."""
    n_layers, dim = bilm.n_output_layers, bilm.output_dim
    contexts_per_doc = [0] * len(docs)
    for d, _ in jobs:
        contexts_per_doc[d] += 1
    outputs: List[Optional[np.ndarray]] = [None] * len(docs)
    for d, doc in enumerate(docs):
        if contexts_per_doc[d] != 1 or len(doc) == 0:
            outputs[d] = np.zeros((n_layers, len(doc), dim), dtype=np.float32)
    with torch.inference_mode():
        for chosen in batches:
            output = bilm(bilm.token_batch([strings[i] for i in chosen]), boundaries=False)
            values = output.float().cpu().numpy()
            for row, i in enumerate(chosen):
                d, context = jobs[i]
                target = outputs[d]
                if target is None and context.whole(len(docs[d])):
                    outputs[d] = np.ascontiguousarray(values[:, row, : len(context)])
                    continue
                if target is None:  # one context that leaves tokens out (whitespace): zeros around it
                    target = outputs[d] = np.zeros((n_layers, len(docs[d]), dim), dtype=np.float32)
                _scatter_row(values, row, context, target)
            del output, values
            release_free_memory()
    return cast(List[Floats3d], outputs)  # every Doc has its array: one per context or zeros


def _scatter_row(values: np.ndarray, row: int, context: Context, target: np.ndarray) -> None:
    """Copy the kept positions of batch row ``row`` of ``values`` ``[L+1, B, T, dim]`` into ``target``."""
    keep = slice(context.keep_start, context.keep_end)
    kept = context.indices[keep]
    if kept and is_run(kept, kept[0], len(kept)):  # consecutive tokens: a slice, not a gather
        target[:, kept[0] : kept[0] + len(kept)] = values[:, row, keep]
    else:
        target[:, kept] = values[:, row, keep]


def _scatter(values: np.ndarray, batch: List[Job], outputs: List[np.ndarray]) -> None:
    """Copy each context's kept positions of ``values`` ``[L+1, B, T, dim]`` into its Doc's array."""
    for row, (d, context) in enumerate(batch):
        keep = slice(context.keep_start, context.keep_end)
        outputs[d][:, context.indices[keep]] = values[:, row, keep]


def _no_input_gradient(d_outputs: Any) -> List:
    return []


__all__ = [
    "BiLMShim",
    "build_bilm_model",
    "configure_bilm_model",
    "get_bilm",
    "get_shim",
    "bilm_to_bytes",
    "bilm_from_bytes",
]
