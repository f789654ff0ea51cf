"""The biLM: shared token encoder + forward/backward LSTM stacks -> L+1 layers per token."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..kernels import bf16, int8
from ..kernels.int8 import FloatWeightsReleased
from .batching import plan_batches
from .characters import MAX_CHARS, N_CHARACTERS, TokenBatch, batch_to_char_ids
from .lstm import BiLstmStack, LstmState
from .memory import release_free_memory
from .token_cache import TokenVectorCache
from .token_encoder import CharCnnEncoder


class OptionsError(ValueError):
    """options.json (or our config.json) lacks a key or holds an impossible value."""


@dataclass(frozen=True)
class BiLMConfig:
    """Architecture of a biLM, in the vocabulary of the original ``options.json``."""

    lstm_dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: Optional[float] = 3.0
    proj_clip: Optional[float] = 3.0
    use_skip_connections: bool = True
    char_dim: int = 16
    filters: Tuple[Tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
    n_highway: int = 2
    activation: str = "relu"
    n_characters: int = N_CHARACTERS
    max_characters_per_token: int = MAX_CHARS
    extra: Dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_options(cls, options: Optional[Dict[str, Any]], source: str = "options") -> "BiLMConfig":
        """Read the original options.json layout; unknown keys are ignored (kept in ``extra``); a
        missing required key (or no options at all) is an :class:`OptionsError`."""

        def get(section: str, key: str, default: Any = KeyError) -> Any:
            try:
                return (options or {})[section][key]
            except (KeyError, TypeError):
                if default is KeyError:
                    raise OptionsError(f"{source}: missing required key '{section}.{key}'") from None
                return default

        def whole(name: str, value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or int(value) != value:
                raise OptionsError(f"{source}: {name} must be a number (a whole number), got {value!r}")
            return int(value)

        def integer(section: str, key: str, default: Any = KeyError) -> int:
            return whole(f"{section}.{key}", get(section, key, default))

        def clip(section: str, key: str) -> Optional[float]:
            value = get(section, key, None)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise OptionsError(f"{source}: {section}.{key} must be a number or null, got {value!r}")
            return _clip(value)

        if not isinstance(options, dict) or not options:
            raise OptionsError(f"{source}: the 'options' object (with 'lstm' and 'char_cnn' sections) is missing or empty")
        try:
            embedding = options["char_cnn"]["embedding"]["dim"]
        except (KeyError, TypeError):
            raise OptionsError(f"{source}: missing required key 'char_cnn.embedding.dim'") from None
        filters = _filters(get("char_cnn", "filters"), source)
        n_chars = integer("char_cnn", "n_characters", N_CHARACTERS)
        if n_chars not in (261, 262):
            raise OptionsError(f"{source}: char_cnn.n_characters must be 261 (training) or 262, got {n_chars}")
        max_chars = integer("char_cnn", "max_characters_per_token", MAX_CHARS)
        if max_chars != MAX_CHARS:
            raise OptionsError(f"{source}: char_cnn.max_characters_per_token must be {MAX_CHARS}, got {max_chars}")
        config = cls(
            lstm_dim=integer("lstm", "dim"),
            projection_dim=integer("lstm", "projection_dim"),
            n_layers=integer("lstm", "n_layers"),
            cell_clip=clip("lstm", "cell_clip"),
            proj_clip=clip("lstm", "proj_clip"),
            use_skip_connections=bool(get("lstm", "use_skip_connections", False)),
            char_dim=whole("char_cnn.embedding.dim", embedding),
            filters=filters,
            n_highway=integer("char_cnn", "n_highway", 0) if get("char_cnn", "n_highway", None) is not None else 0,
            activation=str(get("char_cnn", "activation", "relu")),
            n_characters=N_CHARACTERS,
            max_characters_per_token=max_chars,
            extra={k: v for k, v in options.items() if k not in ("lstm", "char_cnn")},
        )
        if config.n_layers < 1 or config.projection_dim < 1 or config.lstm_dim < 1 or config.char_dim < 1 or config.n_highway < 0:
            raise OptionsError(
                f"{source}: lstm.dim, lstm.projection_dim, lstm.n_layers and char_cnn.embedding.dim must be positive "
                "and char_cnn.n_highway >= 0"
            )
        if config.activation not in ("relu", "tanh"):
            raise OptionsError(f"{source}: char_cnn.activation must be 'relu' or 'tanh', got {config.activation!r}")
        return config

    def to_options(self) -> Dict[str, Any]:
        """The original ``options.json`` layout."""
        options = dict(self.extra)
        options["lstm"] = {
            "dim": self.lstm_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "use_skip_connections": self.use_skip_connections,
        }
        options["char_cnn"] = {
            "embedding": {"dim": self.char_dim},
            "filters": [list(f) for f in self.filters],
            "n_highway": self.n_highway,
            "n_characters": self.n_characters,
            "max_characters_per_token": self.max_characters_per_token,
            "activation": self.activation,
        }
        return options

    @property
    def output_dim(self) -> int:
        """Width of every output layer: ``2 * projection_dim``."""
        return 2 * self.projection_dim

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)


AUTO_PRECISION = "auto"  # set_inference_precision: the fastest precision within a stated error (bilm/auto_precision.py)
# sentences sorted by length together by iter_embeddings: the most outputs it holds at once
ORDER_WINDOW = 2048

FILTERS_SHAPE = "a non-empty list [[width, n], ...] of positive whole numbers (convolution width, number of filters)"


def _filters(value: Any, source: str) -> Tuple[Tuple[int, int], ...]:
    """``char_cnn.filters`` checked: ``[[width, n], ...]`` with positive whole numbers."""

    def positive(x: Any) -> bool:
        return not isinstance(x, bool) and isinstance(x, (int, float)) and x == x and int(x) == x and x >= 1

    ok = isinstance(value, (list, tuple)) and len(value) > 0
    ok = ok and all(isinstance(f, (list, tuple)) and len(f) == 2 and positive(f[0]) and positive(f[1]) for f in value)
    if not ok:
        raise OptionsError(f"{source}: char_cnn.filters must be {FILTERS_SHAPE}, got {value!r}")
    return tuple((int(w), int(n)) for w, n in value)


def _clip(value: Any) -> Optional[float]:
    return float(value) if value not in (None, 0, False) else None


def _clear_token_cache_after_load(module: "BiLM", incompatible_keys: Any) -> None:
    module.clear_token_cache()


class BiLM(nn.Module):
    """ELMo's bidirectional language model (inference side).

    ``forward`` maps a :class:`TokenBatch` to ``[L+1, B, T, 2P]``: layer 0 is the token
    encoder's output duplicated (``[x; x]``), layer ``k`` is ``[forward_k; backward_k]``.
    Every context starts from a zero LSTM state, so a token's vectors depend only on its own
    context. With ``stateful=True`` each batch row instead starts from the final state of the
    same row in the previous call (the original implementations' behaviour).
    """

    def __init__(self, config: BiLMConfig, stateful: bool = False, token_cache_size: int = 0) -> None:
        super().__init__()
        self.config = config
        self.token_encoder = self._build_token_encoder(config)
        self._build_context(config)
        self.stateful = stateful
        self._state: Optional[LstmState] = None
        self.token_cache: Optional[TokenVectorCache] = None
        self.set_token_cache(token_cache_size)
        self._bf16: Optional[bf16.Bf16Products] = None
        self._int8: Optional[int8.Int8Products] = None
        self.register_load_state_dict_post_hook(_clear_token_cache_after_load)

    def _build_token_encoder(self, config: BiLMConfig) -> CharCnnEncoder:
        """The context-free token encoder (a subclass may read its own kind of characters)."""
        return CharCnnEncoder(
            n_characters=config.n_characters,
            char_dim=config.char_dim,
            filters=config.filters,
            n_highway=config.n_highway,
            output_dim=config.projection_dim,
            activation=config.activation,
        )

    def _build_context(self, config: BiLMConfig) -> None:
        """The contextualizer over the token vectors (here the LSTM stacks, ``self.lstm``; a
        subclass may hold another, run by its :meth:`_contextualize`)."""
        self.lstm = BiLstmStack(
            input_dim=config.projection_dim,
            cell_dim=config.lstm_dim,
            proj_dim=config.projection_dim,
            n_layers=config.n_layers,
            cell_clip=config.cell_clip,
            proj_clip=config.proj_clip,
            residual=config.use_skip_connections,
        )

    #: whether the token encoder has a bfloat16 path (:func:`bf16.encode_tokens`); else it runs in
    #: float32 while the LSTM products run in bfloat16
    bf16_token_encoder = True
    #: whether int8 mode may run the token encoder's highway and projection products in int8
    #: (where :func:`~spacy_elmo.kernels.int8.quantizes_encoder` finds it wide enough to pay)
    int8_token_encoder = True

    def token_batch(self, sentences: Sequence[Sequence[str]]) -> TokenBatch:
        """The :class:`TokenBatch` this model reads for ``sentences`` (boundaries added)."""
        return TokenBatch.from_sentences(sentences)

    def set_token_cache(self, size: int) -> None:
        """Cache up to ``size`` context-free token vectors at inference (0 turns the cache off).

        The cache is thread-safe and never serves vectors of replaced or updated weights (see
        :mod:`spacy_elmo.bilm.token_cache`); it is emptied by every ``load_state_dict``."""
        self.token_cache = TokenVectorCache(size) if size > 0 else None

    def clear_token_cache(self) -> None:
        """Empty the token cache (and the bfloat16 weight copies): needed only after writing
        weights behind autograd's back (``param.data.add_()``, a NumPy view), which no version
        counter records."""
        if self.token_cache is not None:
            self.token_cache.clear()
        products: Optional[bf16.Bf16Products] = getattr(self, "_bf16", None)  # getattr: models pickled before it existed
        if products is not None:
            products.clear()
        quantized: Optional[int8.Int8Products] = getattr(self, "_int8", None)
        if quantized is not None:
            quantized.clear()

    #: the precisions a biLM runs in at inference (:meth:`set_inference_precision` also takes ``"auto"``)
    INFERENCE_PRECISIONS = ("float32", "bfloat16", "int8")

    @property
    def precision_choice(self) -> Optional[Any]:
        """What ``set_inference_precision("auto")`` chose and why (an
        :class:`~spacy_elmo.bilm.auto_precision.PrecisionChoice`); ``None`` after an explicit precision."""
        return getattr(self, "_precision_choice", None)

    def set_inference_precision(self, precision: str) -> None:
        """``"bfloat16"``: at inference (no autograd) run every big matrix product in bfloat16
        with float32 accumulation, state and outputs, from bfloat16 copies of the weights made
        once (remade when a weight changes); about 2x faster on CPUs with bf16 matrix
        instructions. ``"float32"`` (the default): everything in float32. Training is never
        affected, and the weights stay float32 either way (see :mod:`spacy_elmo.kernels.bf16`).
        ``"int8"``: the LSTM stack's products in int8 on the CPU's integer units, from int8
        copies of its weights quantized once (see :mod:`spacy_elmo.kernels.int8`); raises
        :class:`~spacy_elmo.kernels.int8.Int8Unavailable` on a CPU without an int8 path.
        ``"auto"``: the fastest of those this CPU runs that keeps the vectors within cosine 0.99 of
        float32's on a fixed calibration text, by the speed-ups measured at the intra-op threads set
        now (:mod:`spacy_elmo.bilm.auto_precision`; no timing, so the same model on the same CPU and
        threads always resolves alike); :attr:`precision_choice` says what it chose and why."""
        if precision == AUTO_PRECISION:
            from .auto_precision import choose_inference_precision

            self._refuse_released("set_inference_precision('auto')")
            choice = choose_inference_precision(self, threads=torch.get_num_threads())
            self.set_inference_precision(choice.precision)
            self._precision_choice: Optional[Any] = choice
            return
        if precision not in self.INFERENCE_PRECISIONS:
            raise ValueError(f"inference precision must be one of {list(self.INFERENCE_PRECISIONS) + [AUTO_PRECISION]}, got {precision!r}")
        self._precision_choice = None
        if precision != self.inference_precision:
            self._refuse_released(f"set_inference_precision({precision!r})")
            encoder = self.int8_token_encoder and int8.quantizes_encoder(self.token_encoder)
            quantized = int8.Int8Products(encoder=encoder) if precision == "int8" else None  # raises before anything changes
            self._bf16 = bf16.Bf16Products() if precision == "bfloat16" else None
            self._int8 = quantized
            self.clear_token_cache()  # its vectors were computed at the other precision

    @property
    def can_release_float_products(self) -> bool:
        """Whether :meth:`release_float_products` applies: an LSTM stack's products (a transformer's
        int8 linears are remade from its float32 weights)."""
        return isinstance(getattr(self, "lstm", None), BiLstmStack)

    def release_float_products(self) -> int:
        """int8 inference only: quantize the LSTM stack's products now and free their float32
        weights (:data:`~spacy_elmo.kernels.int8.INT8_PRODUCTS`, 81% of the original model's
        parameters), so they are held once, in int8. Needs ``set_inference_precision("int8")``
        first. Afterwards the model runs int8 inference only: training, autograd, another
        precision, ``state_dict`` and saving raise :class:`FloatWeightsReleased`; load it again for
        those. Returns the bytes of float32 weights freed (0 if already released)."""
        if self.float_products_released:
            return 0
        quantized: Optional[int8.Int8Products] = getattr(self, "_int8", None)
        if quantized is None:
            raise ValueError(
                f"release_float_products: the biLM runs in {self.inference_precision}; call set_inference_precision('int8') first"
            )
        if not self.can_release_float_products:
            raise ValueError(f"release_float_products: only the LSTM biLM's float32 products can be released, not {type(self).__name__}'s")
        stack: BiLstmStack = self.lstm
        with torch.no_grad():
            quantized.lstm.freeze(stack)
        freed = 0
        for name, parameter in stack.named_parameters():
            if name.rsplit(".", 1)[-1] in int8.INT8_PRODUCTS:
                freed += parameter.numel() * parameter.element_size()
                parameter.data = parameter.data.new_empty(0)
                parameter.requires_grad_(False)
        self._float_released = True
        release_free_memory()
        return freed

    @property
    def float_products_released(self) -> bool:
        """Whether :meth:`release_float_products` freed the LSTM's float32 weights."""
        return getattr(self, "_float_released", False)

    def _refuse_released(self, what: str) -> None:
        if self.float_products_released:
            raise FloatWeightsReleased(
                f"{what}: this biLM released its float32 LSTM weights for int8-only inference (release_float_products); "
                "load the model again to train, save, copy or run it at another precision"
            )

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._refuse_released("state_dict")
        return super().state_dict(*args, **kwargs)

    def train(self, mode: bool = True) -> "BiLM":
        if mode:
            self._refuse_released("train()")
        return super().train(mode)

    @property
    def inference_precision(self) -> str:
        # getattr: models pickled before these existed
        if getattr(self, "_int8", None) is not None:
            return "int8"
        return "float32" if getattr(self, "_bf16", None) is None else "bfloat16"

    def _bf16_products(self) -> Optional[bf16.Bf16Products]:
        """The bfloat16 weight caches when this call should use them: bfloat16 mode, no
        autograd, float32 weights (a model cast with ``.to(torch.bfloat16)`` runs as it is)."""
        return self._for_this_call(getattr(self, "_bf16", None))

    def _int8_products(self) -> Optional[int8.Int8Products]:
        """The int8 weight caches when this call should use them: int8 mode, no autograd, float32 weights."""
        return self._for_this_call(getattr(self, "_int8", None))

    def _for_this_call(self, products: Any) -> Any:
        """``products`` (a precision's weight caches) unless this call runs under autograd or on weights
        that are not float32, where the model runs as it is."""
        if products is None or torch.is_grad_enabled():
            return None
        return products if self.token_encoder.char_embedding.weight.dtype == torch.float32 else None

    @property
    def n_output_layers(self) -> int:
        return self.config.n_layers + 1

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    def reset_state(self) -> None:
        """Forget the carried LSTM state (``stateful`` mode only)."""
        self._state = None

    def _bf16_token_encoder(self, products: bf16.Bf16Products) -> Callable[[torch.Tensor], torch.Tensor]:
        """The token encoder with bfloat16 products (:func:`bf16.encode_tokens`), float32 out."""
        return partial(bf16.encode_tokens, self.token_encoder, products.encoder.weights(self.token_encoder))

    def encode(self, batch: TokenBatch, skip_final: bool = False) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Token vectors ``[B, T, P]`` and the L LSTM layer outputs ``[B, T, 2P]`` (with
        ``skip_final``, incomplete at the boundary positions: see :class:`BiLstmStack`)."""
        if torch.is_grad_enabled():
            self._refuse_released("a forward pass with autograd (use torch.inference_mode())")
        device = self.token_encoder.char_embedding.weight.device
        char_ids = batch.char_ids.to(device)
        products = self._bf16_products()
        run: Callable[[torch.Tensor], torch.Tensor] = self.token_encoder
        quantized = self._int8_products()
        if products is not None and self.bf16_token_encoder:
            run = self._bf16_token_encoder(products)
        elif quantized is not None:
            run = quantized.token_encoder(self.token_encoder) or run
        if self.token_cache is not None and not torch.is_grad_enabled() and len(batch.strings) == len(char_ids):
            vectors = self.token_cache.encode(self.token_encoder, batch.strings, char_ids, run)
        else:
            vectors = run(char_ids)  # [U, P]
        tokens = vectors[batch.token_index.to(device)]  # [B, T, P]
        return tokens, self._contextualize(batch, vectors, tokens, skip_final, products)

    def _contextualize(
        self, batch: TokenBatch, vectors: torch.Tensor, tokens: torch.Tensor, skip_final: bool, products: Optional[bf16.Bf16Products]
    ) -> List[torch.Tensor]:
        """The L contextual layers ``[B, T, 2P]`` of ``tokens`` (``vectors``: the distinct tokens'
        ``[U, P]``, which ``batch.token_index`` gathers into ``tokens``)."""
        initial = self._initial_state(tokens) if self.stateful else None
        lstm_cache = None if products is None else products.lstm
        device = tokens.device
        quantized = self._int8_products()
        types = (
            None if torch.is_grad_enabled() else (vectors, batch.token_index.to(device))
        )  # the first layer's products per distinct token
        layers, final = self.lstm(
            tokens,
            batch.lengths,
            initial,
            skip_final=skip_final and not self.stateful,
            bf16_products=lstm_cache,
            token_types=types,
            int8_products=quantized,
        )
        if self.stateful:
            self._store_state(final)
        return layers

    def forward(self, batch: TokenBatch, boundaries: bool = True) -> torch.Tensor:
        """All layers ``[L+1, B, T, 2P]`` with the ``<S>``/``</S>`` positions in place, or with
        ``boundaries=False`` ``[L+1, B, T-2, 2P]`` without the ``<S>`` column (each row's
        ``</S>`` and padding are zeros), which skips the LSTM steps only those positions need."""
        tokens, layers = self.encode(batch, skip_final=not boundaries)
        device, dim = tokens.device, tokens.shape[-1]
        width = tokens.shape[1]
        keep = slice(0, width) if boundaries else slice(1, max(width - 1, 1))
        steps = torch.arange(width, device=device)[keep]
        lengths = batch.lengths.to(device) - (0 if boundaries else 1)
        mask = (steps.unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1).to(tokens.dtype)  # [B, T', 1]
        out = tokens.new_empty(len(layers) + 1, tokens.shape[0], len(steps), 2 * dim)
        out[0, :, :, :dim] = tokens[:, keep]
        out[0, :, :, dim:] = tokens[:, keep]
        for k, layer in enumerate(layers, start=1):
            out[k] = layer[:, keep]
        # zero padding (the token layer) and, without boundaries, each row's </S> (half skipped)
        return out.mul_(mask)

    def forward_char_ids(self, char_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """AllenNLP-style entry: ``[B, T, 50]`` ids *with* boundaries -> (layers, mask ``[B, T]``)."""
        mask = (char_ids > 0).any(-1)
        batch, width, _ = char_ids.shape
        index = torch.arange(1, batch * width + 1).view(batch, width) * mask
        chars = torch.cat([char_ids.new_zeros(1, char_ids.shape[-1]), char_ids.reshape(-1, char_ids.shape[-1])])
        token_batch = TokenBatch(index, chars, mask.sum(1), [])
        return self.forward(token_batch), mask

    def _initial_state(self, like: torch.Tensor) -> LstmState:
        rows = like.shape[0]
        if self._state is None or self._state[0].shape[2] < rows:
            fresh = self.lstm.zero_state(rows, like)
            if self._state is not None:
                kept = self._state[0].shape[2]
                fresh[0][:, :, :kept] = self._state[0]
                fresh[1][:, :, :kept] = self._state[1]
            self._state = fresh
        return self._state[0][:, :, :rows], self._state[1][:, :, :rows]

    def _store_state(self, final: LstmState) -> None:
        assert self._state is not None
        rows = final[0].shape[2]
        h, c = self._state[0].clone(), self._state[1].clone()
        h[:, :, :rows] = final[0].detach()
        c[:, :, :rows] = final[1].detach()
        self._state = (h, c)

    @torch.inference_mode()
    def embed_batch(self, sentences: Sequence[Sequence[str]], keep_boundaries: bool = False) -> List[np.ndarray]:
        """One float32 ``[L+1, n_i, 2P]`` array per sentence (``n_i + 2`` rows with boundaries)."""
        if not sentences:
            return []
        layers = self.forward(self.token_batch(sentences), boundaries=keep_boundaries).float().cpu().numpy()
        width = 2 if keep_boundaries else 0
        return [np.ascontiguousarray(layers[:, row, : len(sentence) + width]) for row, sentence in enumerate(sentences)]

    def embed_sentences(
        self,
        sentences: Sequence[Sequence[str]],
        batch_size: int = 64,
        keep_boundaries: bool = False,
        max_batch_tokens: Optional[int] = None,
    ) -> List[np.ndarray]:
        """Like AllenNLP's ``ElmoEmbedder.embed_sentences``, but stateless and deterministic.

        Returns one float32 array ``[L+1, n_tokens, 2P]`` per sentence, in input order (boundary
        tokens removed unless ``keep_boundaries``; an empty sentence gives ``n_tokens = 0``).
        Sentences are sorted by length and grouped ``batch_size`` at a time or, with
        ``max_batch_tokens``, as many as fit ``rows * (longest + 2) <= max_batch_tokens`` (faster:
        short sentences share bigger matmuls); neither changes any output beyond float rounding.
        In ``stateful`` mode the given order and ``batch_size`` batching are kept instead.
        """
        sentences = [list(s) for s in sentences]
        result: List[Optional[np.ndarray]] = [None] * len(sentences)
        # one window over the whole input: sorted and batched as a whole (its outputs are all kept anyway)
        window = max(1, len(sentences))
        for index, array in self.iter_embeddings(sentences, batch_size, keep_boundaries, max_batch_tokens, window=window):
            result[index] = array
        return result  # type: ignore[return-value]

    def iter_embeddings(
        self,
        sentences: Sequence[Sequence[str]],
        batch_size: int = 64,
        keep_boundaries: bool = False,
        max_batch_tokens: Optional[int] = None,
        window: int = ORDER_WINDOW,
    ) -> Iterator[Tuple[int, np.ndarray]]:
        """:meth:`embed_sentences` as a stream: yields ``(input index, array)`` in input order.

        Sentences are sorted by length and batched within windows of ``window`` consecutive
        sentences, and each window's outputs are yielded in order as they complete, so a large
        input holds at most one window's outputs in memory."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_batch_tokens is not None and max_batch_tokens < 3:
            raise ValueError(f"max_batch_tokens must be >= 3, got {max_batch_tokens}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        lengths = [len(s) for s in sentences]
        if self.stateful:  # the carried state belongs to each row: keep order and batch_size
            return self._embed_chunks(sentences, plan_batches(lengths, batch_size, sort=False), keep_boundaries)
        return self._embed_windows(sentences, lengths, batch_size, max_batch_tokens, window, keep_boundaries)

    def _embed_windows(
        self,
        sentences: Sequence[Sequence[str]],
        lengths: List[int],
        batch_size: int,
        max_batch_tokens: Optional[int],
        window: int,
        keep_boundaries: bool,
    ) -> Iterator[Tuple[int, np.ndarray]]:
        for start in range(0, len(sentences), window):
            local = plan_batches(lengths[start : start + window], batch_size, max_batch_tokens)
            done: Dict[int, np.ndarray] = {}
            following = start
            for index, array in self._embed_chunks(sentences, [[start + i for i in chunk] for chunk in local], keep_boundaries):
                done[index] = array
                while following in done:
                    yield following, done.pop(following)
                    following += 1

    def _embed_chunks(
        self, sentences: Sequence[Sequence[str]], chunks: List[List[int]], keep_boundaries: bool
    ) -> Iterator[Tuple[int, np.ndarray]]:
        for chunk in chunks:
            arrays = self.embed_batch([list(sentences[i]) for i in chunk], keep_boundaries)
            release_free_memory()
            yield from zip(chunk, arrays)

    def char_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """The dense ``[B, T, 50]`` character ids (with boundaries) the model would see."""
        return batch_to_char_ids(sentences)

    def describe(self) -> Dict[str, Any]:
        return {"options": self.config.to_options(), "parameters": sum(p.numel() for p in self.parameters())}


__all__ = ["BiLM", "BiLMConfig", "OptionsError"]
