"""The bench harness: what every script in bench/ uses to time its work, describe the machine,
measure memory and write its results, and the texts the scripts read.

* folders: ``REPO``, ``RESULTS`` (bench/results), ``DATA`` (the spaCy project's assets),
  ``SAMPLE_BOOKS`` (the in-repo sample), ``WORK`` (scratch space outside the clone);
* options: :func:`add_threads` / :func:`use_threads` (torch's intra-op threads);
* timing: :class:`Clock` (wall and CPU seconds of a block), :func:`timed`, :func:`median_run`,
  :func:`interleaved` (configurations in turn, round after round);
* the machine: :func:`machine` (CPU model, the instruction-set flags the kernels and torch's
  routes depend on, cores, threads, GPU, versions, load average);
* memory: :func:`peak_rss_mb`, :func:`rss_mb` (one process), :class:`ProcessMemory` (a process
  and its children, sampled while they run);
* results: :func:`write_results` (JSON, and its markdown table beside it), :func:`command` (the
  command line, stored with them), :func:`run_worker` (``script --worker TASK`` in a fresh process;
  :func:`serve_worker` its other side), :func:`run_child` (``python -c CODE``);
* the package: :func:`elmo_nlp` (a blank pipeline with the ``elmo`` component), :func:`sentence_doc`,
  :func:`token_cosines` (per-token cosines of two runs' outputs);
* inputs: :func:`random_weights`; texts: :func:`book_sentences`, :func:`book_paragraphs`, :func:`ud_path`,
  :func:`ud_sentences`, :func:`text_sentences` (any of them, or a file), :func:`synthetic` (seeded English-like sentences) and :data:`EDGE_CASES`.

A script imports it as ``from bench_common import ...`` (``python bench/NAME.py`` puts ``bench/``
first on ``sys.path``), before the package: importing it puts this checkout first on
``sys.path``, so that the scripts measure the package beside them. Nothing here imports torch or spaCy at import time.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the package of this checkout (and tests/, project/ as namespaces)
RESULTS = REPO / "bench" / "results"
DATA = REPO / "project" / "assets" / "data"  # `spacy project assets project/` + `spacy project run data project/`
SAMPLE_BOOKS = REPO / "project" / "assets" / "general_sample"
WORK = Path(tempfile.gettempdir()) / "spacy-elmo-bench"  # random weights and inputs, made once
# the CPU flags a figure depends on: the compiled kernels' paths and torch's bfloat16 routes
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "bf16")

# ----------------------------------------------------------------------------------------- options


def add_threads(parser: argparse.ArgumentParser, default: Optional[int] = 1) -> None:
    """The ``--threads`` option every timed script takes (torch's intra-op threads)."""
    parser.add_argument("--threads", type=int, default=default, help=f"torch threads (default {default})")


def use_threads(threads: Optional[int]) -> None:
    """Set torch's threads to ``threads`` (left as they are when None or 0)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------ timing


def cpu_seconds(children: bool = False) -> float:
    """User + system seconds of this process (and, with ``children``, of its finished children)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) if children else (resource.RUSAGE_SELF,):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class Clock:
    """Wall (``seconds``) and CPU (``cpu_seconds``) time of a ``with`` block, or from :meth:`start`
    to :meth:`stop`; ``elapsed``: wall seconds so far. ``children``: count the CPU time of the
    children that finished meanwhile too."""

    def __init__(self, children: bool = False) -> None:
        self.children, self.seconds, self.cpu_seconds = children, 0.0, 0.0

    def start(self) -> "Clock":
        self._wall, self._cpu = time.perf_counter(), cpu_seconds(self.children)
        return self

    def stop(self) -> "Clock":
        self.seconds, self.cpu_seconds = self.elapsed, cpu_seconds(self.children) - self._cpu
        return self

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._wall

    def __enter__(self) -> "Clock":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Tuple[Any, float]:
    """``fn(*args, **kwargs)`` and its wall seconds."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def gemm_gflops(m: int, k: int, n: int, dtype: str = "float32", routed: bool = False) -> float:
    """GFLOP/s of ``[m, k] x [k, n]`` products on torch's threads: the best of 5 timings of about
    4e9 FLOPs' worth (at least 3 products) after 3 warm-up ones; ``routed``: through the package's
    routed products (``kernels.matmul.linear``), else ``torch.mm``."""
    import torch

    from spacy_elmo.kernels import matmul

    a, b = torch.randn(m, k).to(getattr(torch, dtype)), (torch.randn(k, n) * 0.01).to(getattr(torch, dtype))
    product = matmul.linear if routed else torch.mm
    reps, best = max(3, int(4e9 / (2 * m * k * n))), 0.0
    with torch.inference_mode():
        for _ in range(3):
            product(a, b)
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(reps):
                product(a, b)
            best = max(best, reps * 2 * m * k * n / (time.perf_counter() - start))
    return best / 1e9


def interleaved(configs: Mapping[str, Callable[[], Dict[str, Any]]], repeats: int, label: str = "", show: str = "tokens_per_s") -> Dict[str, List[Dict[str, Any]]]:
    """Each configuration's runs: every one once per round, in turn, over ``repeats`` rounds (so the
    drift of a shared machine hits all alike), each run with the 1-minute load average before it
    (and its ``show`` figure printed)."""
    runs: Dict[str, List[Dict[str, Any]]] = {key: [] for key in configs}
    for round_ in range(repeats):
        for key, run in configs.items():
            load = os.getloadavg()[0]
            runs[key].append({**run(), "load_before": round(load, 2)})
            value = runs[key][-1].get(show)
            print(f"{label}round {round_ + 1} {key}: {show} {round(value, 1) if isinstance(value, float) else value}", flush=True)
    return runs


def median_run(runs: List[Dict[str, Any]], key: str = "tokens_per_s") -> Dict[str, Any]:
    """The run with the median ``key`` (tokens/s, or ``p50_ms`` when the runs have it), with every run's figure attached."""
    key = "p50_ms" if "p50_ms" in runs[0] else key
    ranked = sorted(runs, key=lambda run: run[key])
    return {**ranked[(len(ranked) - 1) // 2], "runs": [round(run[key], 1) for run in runs]}


# ----------------------------------------------------------------------------------------- machine


def cpu_name() -> str:
    """The CPU's model name (the package's one reader of /proc/cpuinfo), else what platform knows."""
    from spacy_elmo.kernels import cpu

    return cpu.cpuinfo().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def machine(threads: Optional[int] = None, **extra: Any) -> Dict[str, Any]:
    """The machine a figure is measured on: CPU model and the flags of :data:`ISA_FLAGS` it has,
    cores visible, torch threads (``threads``, else torch's setting), GPU (or None), versions and
    the load average (1, 5, 15 minutes) now; ``extra`` is added as it is."""
    import torch

    from spacy_elmo.kernels import cpu

    return {
        "cpu": cpu_name(),
        "flags": sorted(set(cpu.features() or ()) & set(ISA_FLAGS)),
        "cores": os.cpu_count(),
        "threads": threads if threads is not None else torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **extra,
    }


# ------------------------------------------------------------------------------------------ memory


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident memory of this process (or of its largest finished child), MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb(pid: Optional[int] = None, private: bool = False) -> float:
    """Resident memory of a process in MB, from /proc/PID/statm (0 once it has gone); ``private``:
    less its shared and file-backed pages (page cache the kernel can drop, such as a memory map)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/statm") as fh:
            fields = [int(x) for x in fh.read().split()]
    except OSError:
        return 0.0
    return (fields[1] - (fields[2] if private else 0)) * os.sysconf("SC_PAGE_SIZE") / 2**20


def proc_kb(pid: int, field: str, name: str = "status") -> Optional[int]:
    """A ``kB`` field of /proc/PID/status (or another file such as ``smaps_rollup``); None once the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def children(pid: int) -> List[int]:
    """The process ids of ``pid``'s children (every thread's)."""
    out: List[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


class ProcessMemory:
    """Samples this process and its descendants every ``interval`` seconds while a ``with`` block
    runs: the last ``VmHWM`` (peak RSS, which the kernel keeps) of each (``peaks_kb``) and the
    largest PSS total seen at one time (``max_pss_kb``; reading PSS walks a process's page tables:
    sampled sparingly, beside the timed work)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval, self.peaks_kb, self.max_pss_kb = interval, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        pids, stack = [], [os.getpid()]
        while stack:
            pids.append(stack.pop())
            stack.extend(children(pids[-1]))
        total = 0
        for pid in pids:
            hwm = proc_kb(pid, "VmHWM")
            if hwm is not None:
                self.peaks_kb[pid] = max(hwm, self.peaks_kb.get(pid, 0))
            total += proc_kb(pid, "Pss", "smaps_rollup") or 0
        self.max_pss_kb = max(self.max_pss_kb, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "ProcessMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


# ----------------------------------------------------------------------------------------- results


def write_results(path: Optional[Path], results: Mapping[str, Any], table: Optional[str] = None, **dump: Any) -> None:
    """Write ``results`` as JSON to ``path`` (its folder made; ``dump``: json.dumps options, ``indent=1``
    unless given), and ``table`` (markdown) to the ``.md`` beside it, which is also printed (only
    printed when ``path`` is None: a script's ``--json`` not given)."""
    if path is None:
        print(table or "", end="")
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, **{"indent": 1, **dump}) + "\n", encoding="utf-8")
    if table is not None:
        path.with_suffix(".md").write_text(table, encoding="utf-8")
        print(table)


def command(script: str, hide: Optional[Mapping[str, str]] = None) -> str:
    """``python bench/SCRIPT ARGS`` as run, each value of ``hide`` written as its key (no machine paths)."""
    line = " ".join([f"python bench/{script}", *sys.argv[1:]])
    for name, value in (hide or {}).items():
        line = line.replace(value, name) if value else line
    return line


def _last_json(stdout: str) -> Dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def run_worker(script: str, task: Mapping[str, Any], env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Run ``script --worker TASK_JSON`` in a fresh process (``env``: its environment, default this
    one's) and return the JSON object its last line of output holds; raises with its stderr."""
    out = subprocess.run(
        [sys.executable, script, "--worker", json.dumps(task)], capture_output=True, text=True, env=dict(env if env is not None else os.environ)
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker failed for {dict(task)}:\n{out.stderr[-3000:]}")
    return _last_json(out.stdout)


def serve_worker(worker: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """The other side of :func:`run_worker`: with ``--worker TASK_JSON`` on the command line, print
    ``worker(task)`` as JSON and exit; else return."""
    if "--worker" in sys.argv:
        print(json.dumps(worker(json.loads(sys.argv[sys.argv.index("--worker") + 1]))))
        sys.exit(0)


def run_child(code: str, *args: Any, env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> Dict[str, Any]:
    """Run ``python -c CODE ARGS`` (this checkout's package and this harness, one thread unless ``env`` says
    otherwise; ``kwargs`` go to subprocess.run, e.g. ``cwd``) and return the JSON object its last line of output holds."""
    path = os.pathsep.join(p for p in (str(REPO), str(REPO / "bench"), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **(env or {})}
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, **kwargs)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return _last_json(out.stdout)


# ----------------------------------------------------------------------------------------- package


def elmo_nlp(sentencizer: bool = False, **config: Any) -> Any:
    """A blank English pipeline with the ``elmo`` component (``config``: its settings, None ones left at
    their defaults), after spaCy's sentencizer with ``sentencizer``."""
    import spacy

    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={key: value for key, value in config.items() if value is not None})
    return nlp


def sentence_doc(vocab: Any, words: Sequence[str]) -> Any:
    """A Doc of ``words`` holding one sentence."""
    from spacy.tokens import Doc

    return Doc(vocab, words=list(words), sent_starts=[True] + [False] * (len(words) - 1) if words else [])


def token_cosines(a: Any, b: Any) -> Any:
    """Cosine of each vector of ``a`` to the same one of ``b`` (arrays ``[..., dim]``, or lists of
    per-sentence ``[layers, tokens, dim]`` arrays, joined along the tokens)."""
    import numpy as np

    if isinstance(a, list):
        a, b = np.concatenate(a, axis=1), np.concatenate(b, axis=1)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30)


# ------------------------------------------------------------------------------------------ inputs


def random_weights(spec: Any, folder: Path, seed: int = 1) -> Path:
    """``folder`` with random weights (``options.json``, ``weights.hdf5``; written once) of ``spec``: a
    published model's name or shape, or options as a dict (see ``python -m spacy_elmo random-weights``)."""
    from spacy_elmo.hub.random_weights import write_random_weights

    folder = Path(folder)
    if not (folder / "weights.hdf5").is_file():
        if isinstance(spec, dict):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "spec.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")
            spec = str(folder / "spec.json")
        write_random_weights(spec, folder, seed=seed)
    return folder


# ------------------------------------------------------------------------------------------- texts


def books_folder(sample: bool = True) -> Path:
    """The Gutenberg books of the project's assets or, with ``sample`` and without them, the in-repo sample (said on stderr)."""
    folder = DATA / "gutenberg_en_books"
    if sample and not (folder / "manifest.tsv").is_file():
        folder = SAMPLE_BOOKS
        print(f"(Gutenberg books not found: using the in-repo sample {folder.relative_to(REPO)})", file=sys.stderr)
    return folder


def book_files(folder: Path, split: Optional[str] = None) -> List[Path]:
    """The books of a folder's manifest (in its order), those of ``split`` only when given."""
    with (folder / "manifest.tsv").open(encoding="utf-8") as fh:
        return [folder / row["file"] for row in csv.DictReader(fh, delimiter="\t") if split is None or row["split"] == split]


def book_paragraphs(folder: Path, split: Optional[str] = None, max_chars: Optional[int] = None) -> Iterator[str]:
    """Paragraphs (blank-line separated, lines joined) of the books of ``folder`` (see :func:`book_files`)."""
    from spacy_elmo.training.corpus import SplitStats, read_units

    for book in book_files(folder, split):
        yield from read_units(book, "paragraph", SplitStats(), **({"max_chars": max_chars} if max_chars else {}))


def book_sentences(n: int, max_tokens: int = 100, sample: bool = True) -> List[List[str]]:
    """The first ``n`` sentences (1 to ``max_tokens`` tokens) of the Gutenberg books' test split
    (:func:`books_folder`: the in-repo sample with ``sample`` when the assets are absent)."""
    from spacy_elmo.training.corpus import sentences_of

    out: List[List[str]] = []
    for tokens, _ in sentences_of(((unit, "test") for unit in book_paragraphs(books_folder(sample), "test")), "en"):
        if 0 < len(tokens) <= max_tokens:
            out.append(tokens)
        if len(out) >= n:
            break
    return out


def ud_path(split: str) -> Path:
    """UD English EWT's ``split`` (train, dev, test) in the project's assets, ``.conllu`` or ``.conllu.gz``."""
    path = DATA / "ud_english_ewt" / f"en_ewt-ud-{split}.conllu"
    path = path if path.is_file() else path.with_name(path.name + ".gz")
    if not path.is_file():
        raise SystemExit(f"UD English EWT not found at {path}: run `spacy project assets project/` and `spacy project run data project/`")
    return path


def text_sentences(text: str, n: int) -> List[List[str]]:
    """``n`` tokenised sentences of ``text``: ``books`` (:func:`book_sentences`), ``ud`` (UD EWT test), or
    a file: ``.conllu``/``.conllu.gz``, else one whitespace-tokenised sentence per line."""
    if text in ("books", "ud"):
        return book_sentences(n) if text == "books" else ud_sentences(ud_path("test"), n)
    path = Path(text)
    if not path.is_file():
        raise SystemExit(f"{text!r}: not 'books', 'ud' or a file")
    if path.name.endswith((".conllu", ".conllu.gz")):
        return ud_sentences(path, n)
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][:n]


def ud_sentences(path: Path, n: Optional[int] = None, with_tags: bool = False, max_tokens: Optional[int] = None) -> List[Any]:
    """The gold-tokenised sentences of a .conllu file (the project's reader), ``(words, tags)`` with
    ``with_tags``; the first ``n`` of those with at most ``max_tokens`` tokens."""
    sys.path.insert(0, str(REPO / "project" / "scripts"))
    from downstream_data import read_conllu

    out: List[Any] = []
    for sentence in read_conllu(path):
        words = [w[0] for w in sentence]
        if max_tokens is None or 0 < len(words) <= max_tokens:
            out.append((words, [w[2] for w in sentence]) if with_tags else words)
        if n is not None and len(out) >= n:
            break
    return out


def median(values: Sequence[float]) -> float:
    """The median (0 for none)."""
    return statistics.median(values) if values else 0.0


# seeded English-like sentences: words drawn with Zipf-like weights from these lists (function words,
# nouns, verbs, adjectives, names, numbers, punctuation, a few rare forms: hyphenated, non-ASCII,
# longer than 48 bytes), lengths log-normal around 18 tokens, so a batch's padding looks like real text's
FUNCTION = "the of and to a in that is was he for it with as his on be at by i this had not are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people mr how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three".split()
CONTENT = "river bank money house water city night morning letter road garden window church market ship horse father mother friend king queen army island forest village doctor lawyer teacher student company government council report question answer reason story picture music voice paper table chair fire light stone bridge field winter summer spring autumn ran walked spoke wrote looked turned opened closed carried brought followed answered asked wanted seemed became remained returned reached crossed dark bright quiet busy strange simple ancient narrow heavy gentle sudden careful broken golden silver distant".split()
NAMES = "London Paris Holmes Watson Elizabeth Darcy Alice Oliver Thames Monday January America Europe Dr. Mrs. Mr. St.".split()
RARE = "well-known long-term mid-October co-operation 1890s 3-2 84.5 2,500 £ $ % & -- ... '' `` 's n't café naïve Zürich São Øresund Москва 北京 🙂 hyperindustrialisation-related-extraordinarily-long-compound-word".split()
PUNCT = [",", ",", ".", ";", ":", "?", "!", "(", ")"]
# the lines where ELMo implementations tend to part ways: a blank line, one token, literal <S>/</S>, words
# cut at 48 bytes (between and inside UTF-8 characters), combining marks and joiners, runs of spaces, 151 tokens
EDGE_CASES = [
    "",
    "x",
    "<S> and </S> appear as words here , <S>x too .",
    "<S> </S>",
    "q" * 48 + " " + "r" * 49 + " " + "s" * 64,
    "é" * 30 + " " + "a" + "é" * 30 + " " + "日本語" * 6 + " x" + "日本語" * 6 + " " + "🙂" * 13,
    "combining e\u0301 , joiner 👩\u200d🔬 , control \x7f , tab\tseparated",
    "   spaces   before ,   between   and   after   ",
    " ".join(["token"] * 150) + " .",
]


def synthetic(n: int, seed: int = 0) -> List[str]:
    """``n`` seeded English-like sentences (see above), one string of space-separated tokens each."""
    rng = random.Random(seed)
    zipf = [[1.0 / (rank + 1.5) for rank in range(len(words))] for words in (FUNCTION, CONTENT, NAMES)]
    pools = [(FUNCTION, zipf[0], 0.48), (CONTENT, zipf[1], 0.34), (NAMES, zipf[2], 0.05), (PUNCT, None, 0.1), (RARE, None, 0.03)]
    out = []
    for _ in range(n):
        length = max(1, min(80, int(round(rng.lognormvariate(math.log(18), 0.5)))))
        words = []
        for _ in range(length - 1):
            pool, weights, _share = rng.choices(pools, weights=[share for *_, share in pools])[0]
            words.append(rng.choices(pool, weights=weights)[0] if weights else rng.choice(pool))
        words[0:1] = [words[0][:1].upper() + words[0][1:]] if words else []
        out.append(" ".join(words + [rng.choice([".", ".", ".", "?", "!"])]))
    return out
