"""Progress display: a tqdm bar on a terminal, periodic one-line reports in logs.

Under ``spacy project run``, in CI or when output is piped, a tqdm bar turns into thousands of
carriage-return fragments. :func:`progress_bar` returns a real ``tqdm`` when its stream is a
terminal and otherwise a :class:`LineProgress`, which takes the same calls (``update``,
``set_postfix``, ``close``, iteration, ``write``) and prints one plain line every
``SPACY_ELMO_PROGRESS_EVERY`` seconds (default 30) and one at the end::

    train: 120/400 steps (30%), 1.52 steps/s, elapsed 1:19, left ~3:04, loss=5.123, tok_s=3120
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, Iterable, Iterator, Optional, TextIO

from tqdm import tqdm

EVERY_ENV = "SPACY_ELMO_PROGRESS_EVERY"


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress:
    """tqdm's interface for logs: a plain line every ``every`` seconds instead of a redrawn bar."""

    def __init__(
        self,
        iterable: Optional[Iterable[Any]] = None,
        desc: Optional[str] = None,
        total: Optional[float] = None,
        initial: float = 0,
        unit: str = "it",
        disable: bool = False,
        file: Optional[TextIO] = None,
        every: Optional[float] = None,
        unit_scale: Any = False,
        unit_divisor: float = 1000,
        **_ignored: Any,
    ) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.desc, self.total, self.n, self.initial, self.unit = desc or "", total, initial, initial, unit
        self.disable = disable
        self.file = file
        self.every = float(os.environ.get(EVERY_ENV, "30")) if every is None else every
        self.unit_scale, self.unit_divisor = unit_scale, unit_divisor
        self.postfix: Dict[str, Any] = {}
        self.start = self.last = time.monotonic()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None, "LineProgress was given no iterable"
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _stream(self) -> TextIO:
        return self.file if self.file is not None else sys.stderr

    def _amount(self, value: float) -> str:
        """``value`` as a person reads it: 51.9MB with ``unit_scale`` (tqdm's prefixes), else 54,401,872."""
        if self.unit_scale:
            scaled = value * self.unit_scale if not isinstance(self.unit_scale, bool) else value
            return tqdm.format_sizeof(scaled, divisor=self.unit_divisor) + self.unit
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 else 0.0
        # a count of steps reads "steps"; a scaled amount (51.9MB) or a symbol (B) takes no plural
        units = self.unit if self.unit_scale or len(self.unit) <= 2 or self.unit.endswith("s") else self.unit + "s"
        label = "" if self.unit_scale else f" {units}"
        parts = [f"{self.desc}: " if self.desc else ""]
        if self.total:
            parts.append(f"{self._amount(self.n)}/{self._amount(self.total)}{label} ({100 * self.n / self.total:.0f}%)")
        else:
            parts.append(f"{self._amount(self.n)}{label}")
        speed = f"{self._amount(rate)}/s" if self.unit_scale else f"{rate:.2f} {units}/s"
        parts.append(f", {speed}, elapsed {_clock(elapsed)}")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f", left ~{_clock((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(", " + ", ".join(f"{k}={v}" for k, v in self.postfix.items()))
        return "".join(parts)

    def _emit(self) -> None:
        print(self.line(), file=self._stream(), flush=True)
        self.last = time.monotonic()

    def update(self, n: float = 1) -> None:
        self.n += n
        if not self.disable and time.monotonic() - self.last >= self.every:
            self._emit()

    def set_postfix(self, ordered_dict: Optional[Dict[str, Any]] = None, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = dict(ordered_dict or {}, **kwargs)

    def set_description(self, desc: Optional[str] = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed and not self.disable and self.n > self.initial:
            self._emit()
        self.closed = True

    @classmethod
    def write(cls, text: str, file: Optional[TextIO] = None, end: str = "\n", nolock: bool = False) -> None:
        print(text, file=file if file is not None else sys.stderr, end=end, flush=True)


def is_terminal(stream: Optional[TextIO] = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_class(stream: Optional[TextIO] = None) -> Any:
    """``tqdm`` on a terminal, else :class:`LineProgress` (both called the same way, ``write`` included)."""
    return tqdm if is_terminal(stream) else LineProgress


def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """A progress display for ``kwargs.get('file')`` (default stderr): see :func:`progress_class`."""
    return progress_class(kwargs.get("file"))(*args, **kwargs)
