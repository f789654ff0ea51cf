"""``precision = "auto"`` at inference: the fastest precision this CPU runs that keeps a model's
vectors within a stated distance of float32's.

The candidates are the precisions this CPU runs natively (bfloat16 with AMX or AVX512-BF16; int8
with an integer dot-product unit or AVX2), ranked by the speed-ups the project measured for the
model's kind of shape and the threads it runs on (:data:`MEASURED_SPEEDUPS`, and
:data:`MEASURED_SPEEDUPS_THREADS` at two threads or more, docs/benchmarks.md); a candidate that was not
measured faster than float32 by :data:`MIN_GAIN` is not tried. Each candidate, fastest first, is
checked on a fixed calibration text (:data:`CALIBRATION`) against float32: the per-token cosine of
the layers' average at the 1st percentile must reach ``min_cosine`` (0.99, issue 50's bar). The
first that passes is chosen, float32 when none does. Nothing is timed while choosing, so one model
on one CPU always resolves to the same precision, and its outputs stay deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Sequence

import numpy as np

from ..kernels import cpu

MIN_COSINE = 0.99
MIN_GAIN = 1.15  # a precision measured less than this much faster than float32 is not worth its error
#: LSTM cells from which int8's products beat bfloat16's (the original shapes' 4096 did, 512 did not)
WIDE_LSTM = 2048
#: measured speed-ups over float32, one thread, batch 64 (docs/benchmarks.md, "int8 inference" and
#: "bfloat16 inference"): (precision, the CPU's path, a wide LSTM) -> tokens/s against float32's
MEASURED_SPEEDUPS: Dict[tuple, float] = {
    ("int8", "vnni", True): 3.16,  # the original shapes, AMD EPYC with AVX512-VNNI (encoder products, quantizer, tables)
    ("int8", "vnni", False): 1.57,  # the embedded default (512-cell LSTM), same machine and run
    ("int8", "avx2", True): 1.51,  # the original shapes, AVX2 only (tokens per CPU-second, a quiet machine; before the tables)
    ("int8", "avx2", False): 0.96,  # the embedded default, AVX2 only (the same run)
    ("bfloat16", "native", True): 1.78,  # the original shapes, AVX512-BF16 without AMX (the EPYC run above)
    ("bfloat16", "native", False): 1.25,  # the embedded default, same machine and run
    ("bfloat16", "amx", True): 2.85,  # the original shapes, an Intel Xeon with AMX (UD; before the tables)
    ("bfloat16", "amx", False): 2.34,  # the embedded default, same machine and run
}
#: the same at two threads (both cores), where measured; elsewhere the one-thread figure stands
MEASURED_SPEEDUPS_THREADS: Dict[tuple, float] = {
    ("int8", "vnni", True): 2.94,  # the original shapes, AMD EPYC with AVX512-VNNI, two threads
    ("int8", "avx2", True): 1.14,  # the original shapes, AVX2 only, two threads (before the tables): int8 gains less from the second
    ("bfloat16", "native", True): 1.69,  # the original shapes, AVX512-BF16 without AMX, two threads
}
#: what the check reads: plain sentences of everyday English, from 6 to about 90 tokens (an LSTM's
#: error grows with the steps it runs), the same for every model
CALIBRATION: Sequence[Sequence[str]] = tuple(
    s.split()
    for s in (
        "The bank raised its rates again this morning .",
        "She sat on the bank of the river and watched the boats go by .",
        "I can't believe how quickly the weekend went !",
        "Preheat the oven , then mix the flour , sugar and butter in a large bowl until smooth .",
        "The committee will meet on Tuesday to discuss the new budget proposal and its effects on schools .",
        "He played the bass in a small band that toured the coast every summer for nearly ten years .",
        "Scientists found that the cells divided faster when the temperature was raised by two degrees .",
        "Please send me the report by Friday .",
        "After the storm , the power was out for three days and the roads were blocked by fallen trees , "
        "so most people stayed at home and waited for the crews to clear the way .",
        "The plant closed in 2019 , and hundreds of workers lost their jobs .",
        "Water the plant twice a week and keep it out of direct sunlight .",
        "What time does the train leave ?",
        "Although the film was long , the acting was strong and the ending made up for the slow start .",
        "The court ruled that the contract was valid , despite the objections raised by the company's lawyers .",
        "They played tennis on the court behind the school until it got dark .",
        "My phone battery dies before lunch every single day .",
        "When we finally reached the village , late in the evening and soaked through by the rain that had "
        "followed us all the way from the coast , the only inn was already full , so an old farmer who had "
        "watched us walk up the hill offered us his barn , a bowl of soup and , after some argument with his "
        "wife , two dry blankets , which we accepted with more gratitude than we could put into words .",
        "The report , which was published on Monday after months of delay , argues that the city should "
        "invest in buses rather than new roads , that fares should be cut for students and older people , "
        "that the night service should run until two in the morning on weekends , and that every new "
        "housing project should be built within a short walk of a stop , but it says little about how any "
        "of this would be paid for , and the council has not yet said whether it will accept any of it .",
    )
)


@dataclass
class PrecisionChoice:
    """What ``"auto"`` chose and why: each candidate tried, fastest first, with its measured speed-up
    and its distance to float32 on the calibration text."""

    precision: str
    tried: List[Dict[str, float]] = field(default_factory=list)
    reason: str = ""

    def describe(self) -> str:
        """One line for a log: the choice and the candidates' figures."""
        rows = "; ".join(f"{t['precision']} ({t['speedup']:.2f}x measured, cosine 1st percentile {t['cosine_p1']:.4f})" for t in self.tried)
        return f"precision auto -> {self.precision}: {self.reason}" + (f" [{rows}]" if rows else "")


def measured_speedup(key: tuple, threads: int = 1) -> float:
    """The speed-up over float32 measured for ``key`` at ``threads`` (the two-thread figure from two
    threads on, where one was measured; the one-thread figure otherwise)."""
    if threads >= 2 and key in MEASURED_SPEEDUPS_THREADS:
        return MEASURED_SPEEDUPS_THREADS[key]
    return MEASURED_SPEEDUPS[key]


def candidates(
    lstm_dim: Optional[int], flags: Optional[FrozenSet[str]], native_bf16: bool, int8_ok: bool = True, threads: int = 1
) -> List[tuple]:
    """(precision, measured speed-up) of every precision worth trying on this CPU, fastest first.

    ``lstm_dim`` is the LSTM's cell size (``None`` for another architecture: only bfloat16, the one
    measured there, is tried); ``flags`` the CPU's (:func:`..kernels.cpu.features`); ``threads``
    the intra-op threads the model runs on."""
    wide = lstm_dim is not None and lstm_dim >= WIDE_LSTM
    found = []
    if native_bf16:
        units = "amx" if flags is not None and "amx_bf16" in flags else "native"  # AMX's tiles, or AVX512-BF16
        found.append(("bfloat16", measured_speedup(("bfloat16", units, wide), threads)))
    path = cpu.int8_path(flags) if flags is not None else None  # unknown flags: no int8 path assumed
    if int8_ok and lstm_dim is not None and path is not None:
        found.append(("int8", measured_speedup(("int8", path, wide), threads)))
    return sorted((c for c in found if c[1] >= MIN_GAIN), key=lambda c: -c[1])


def _layers_average(outputs: List[np.ndarray]) -> np.ndarray:
    return np.concatenate([o.mean(0) for o in outputs if o.shape[1]], axis=0)


def cosine_p1(reference: np.ndarray, other: np.ndarray) -> float:
    """The 1st percentile of the per-row cosine between ``reference`` and ``other``."""
    cos = (reference * other).sum(-1) / (np.linalg.norm(reference, axis=-1) * np.linalg.norm(other, axis=-1) + 1e-30)
    return float(np.percentile(cos, 1))


def choose_inference_precision(
    bilm: Any, min_cosine: float = MIN_COSINE, sentences: Sequence[Sequence[str]] = CALIBRATION, threads: int = 1
) -> PrecisionChoice:
    """The precision ``"auto"`` means for ``bilm`` (a :class:`~spacy_elmo.bilm.model.BiLM`) on this CPU at
    ``threads`` intra-op threads (see the module's docstring); leaves the model in float32 (the
    caller sets the choice)."""
    if not 0 < min_cosine <= 1:
        raise ValueError(f"min_cosine is a cosine bar in (0, 1], got {min_cosine}")
    lstm = bilm.can_release_float_products  # an LSTM stack (a transformer's int8 speed was not measured)
    found = candidates(bilm.config.lstm_dim if lstm else None, cpu.features(), cpu.native_bf16(), threads=threads)
    if not found:
        return PrecisionChoice("float32", reason="this CPU runs no faster precision for this model")
    bilm.set_inference_precision("float32")
    reference = _layers_average(bilm.embed_sentences(sentences))
    tried: List[Dict[str, float]] = []
    chosen: Optional[str] = None
    try:
        for precision, speedup in found:
            bilm.set_inference_precision(precision)
            p1 = cosine_p1(reference, _layers_average(bilm.embed_sentences(sentences)))
            tried.append({"precision": precision, "speedup": speedup, "cosine_p1": round(p1, 6)})  # type: ignore[dict-item]
            if p1 >= min_cosine:
                chosen = precision
                break
    finally:
        bilm.set_inference_precision("float32")
    if chosen is None:
        return PrecisionChoice("float32", tried, f"no faster precision keeps the layers' average within cosine {min_cosine} of float32's")
    return PrecisionChoice(
        chosen, tried, f"the fastest measured on this CPU whose layers' average stays within cosine {min_cosine} of float32's"
    )
