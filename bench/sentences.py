#!/usr/bin/env python3
"""Benchmark and parity input: seeded English-like sentences, and the lines where ELMo
implementations tend to part ways. Pure Python, no data needed.

``synthetic(n, seed)``: sentences of words drawn with Zipf-like weights from a built-in word
list (function words, nouns, verbs, adjectives, names, numbers, punctuation, a few rare forms:
hyphenated, non-ASCII, longer than 48 bytes), lengths log-normal around 18 tokens (a long tail to
about 80), so the padding inside a batch looks like real text's. ``EDGE_CASES``: a blank line,
one token, literal ``<S>``/``</S>``, words cut at 48 bytes (between and inside UTF-8 characters),
combining marks and joiners, runs of spaces, a 151-token sentence.

    python bench/sentences.py --sentences 2000 --seed 0 --edge-cases --out sentences.txt
"""
from __future__ import annotations

import argparse
import math
import random
from pathlib import Path
from typing import List

FUNCTION = "the of and to a in that is was he for it with as his on be at by i this had not are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people mr how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three".split()
CONTENT = "river bank money house water city night morning letter road garden window church market ship horse father mother friend king queen army island forest village doctor lawyer teacher student company government council report question answer reason story picture music voice paper table chair fire light stone bridge field winter summer spring autumn ran walked spoke wrote looked turned opened closed carried brought followed answered asked wanted seemed became remained returned reached crossed dark bright quiet busy strange simple ancient narrow heavy gentle sudden careful broken golden silver distant".split()
NAMES = "London Paris Holmes Watson Elizabeth Darcy Alice Oliver Thames Monday January America Europe Dr. Mrs. Mr. St.".split()
RARE = "well-known long-term mid-October co-operation 1890s 3-2 84.5 2,500 £ $ % & -- ... '' `` 's n't café naïve Zürich São Øresund Москва 北京 🙂 hyperindustrialisation-related-extraordinarily-long-compound-word".split()
PUNCT = [",", ",", ".", ";", ":", "?", "!", "(", ")"]

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


def _zipf(words: List[str]) -> List[float]:
    return [1.0 / (rank + 1.5) for rank in range(len(words))]


def synthetic(n: int, seed: int = 0) -> List[str]:
    """``n`` seeded sentences, one string of space-separated tokens each."""
    rng = random.Random(seed)
    pools = [(FUNCTION, _zipf(FUNCTION), 0.48), (CONTENT, _zipf(CONTENT), 0.34), (NAMES, _zipf(NAMES), 0.05), (PUNCT, None, 0.1), (RARE, None, 0.03)]
    shares = [share for *_, share in pools]
    out = []
    for _ in range(n):
        length = max(1, min(80, int(round(rng.lognormvariate(math.log(18), 0.5)))))
        words = []
        for _ in range(length - 1):
            pool, weights, _share = rng.choices(pools, weights=shares)[0]
            words.append(rng.choices(pool, weights=weights)[0] if weights else rng.choice(pool))
        words[0:1] = [words[0][:1].upper() + words[0][1:]] if words else []
        out.append(" ".join(words + [rng.choice([".", ".", ".", "?", "!"])]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--edge-cases", action="store_true", help="append EDGE_CASES after the sentences")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    lines = synthetic(args.sentences, args.seed) + (EDGE_CASES if args.edge_cases else [])
    args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
