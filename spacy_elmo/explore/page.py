"""The explore page: one self-contained HTML file that shows a word's induced senses.

Every occurrence of the word is a point on a 2-D map of its vectors (:func:`.projection.project_2d`),
coloured by its strongest sense; the legend names each sense with its size. Hovering a point shows
its sentence with the word marked; clicking it lists its nearest occurrences (cosine in the
original vector space, precomputed, :func:`.projection.nearest_occurrences`). Below the map, a
table per sense of its most representative examples.

Senses induced over two corpora (``extra["corpus"]``: each occurrence's corpus, 0 or 1;
``extra["corpus_names"]``: their names, as ``spacy elmo change`` saves them) are drawn coloured
by corpus, one marker shape per sense, with a table of each sense's share in either corpus; the
senses' own colours (their swatches) then keep clear of the two corpus colours. With
``extra["change"]`` (what ``change`` measured) the page opens with the word's rank, each measure
with its interval and the binary call, and the shares table gives each sense's status.

The chart is Plotly's, with plotly.js inlined: the page opens from disk with no network. All
corpus text is escaped: it reaches the page as escaped HTML, or as JSON that the page's script
puts into text nodes (or escapes, for Plotly's hover labels), never as markup.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..induction.induced import Occurrence, WordSenses, best_split_line, check_word_senses
from ..induction.naming import plural
from .projection import nearest_occurrences, project_2d

HOVER_CONTEXT = 70  # characters of the sentence shown either side of the word in the hover label
HOVER_LINE = 60  # the hover label wraps at about this many characters
WEBGL_FROM = 1000  # from this many occurrences the map is drawn with WebGL (scattergl), about twice as fast to load as SVG
TABLE_EXAMPLES = 8  # examples per sense in the table below the map
CORPUS_COLOURS = ("#1f77b4", "#d62728")  # corpus A, corpus B
SENSE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "triangle-down", "pentagon", "hexagon")
SENSE_GLYPHS = ("●", "■", "◆", "▲", "✚", "✖", "★", "▼", "⬟", "⬢")  # the same shapes as text, for the shares table
PLOTLY_MISSING = "the explore page needs Plotly: pip install 'spacy-elmo[explore]' (or pip install plotly)"


AVOID_DISTANCE = 55.0  # a sense colour is at least this far (CIE76 ΔE in Lab) from each colour it must not be taken for


def lab(colour: str) -> np.ndarray:
    """A ``#rrggbb`` colour in CIE Lab (D65): distances there are about as far as they look."""
    rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    linear = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def sense_colours(n: int, avoid: Sequence[str] = ()) -> List[str]:
    """``n`` distinct colours: Plotly's qualitative palettes (10 up to 10 senses, then 24, then
    cycled), leaving out any within :data:`AVOID_DISTANCE` of a colour of ``avoid`` (the corpus
    colours of a two-corpus page)."""
    from plotly.colors import qualitative

    palette = list(qualitative.Plotly) if n <= 10 else qualitative.Dark24 + qualitative.Light24
    if avoid:
        far = [lab(c) for c in avoid]
        pool = list(dict.fromkeys(c.upper() for c in qualitative.Plotly + qualitative.Dark24 + qualitative.Light24))
        palette = [c for c in pool if all(np.linalg.norm(lab(c) - f) >= AVOID_DISTANCE for f in far)]
    return [palette[i % len(palette)] for i in range(n)]


def marked_html(occurrence: Occurrence, context: Optional[int] = None) -> str:
    """The occurrence's sentence as escaped HTML with the word in ``<mark>`` (for the sense tables);
    with ``context``, only that many characters either side of the word."""
    before, word, after = _window(occurrence, context)
    return f"{html.escape(before)}<mark>{html.escape(word)}</mark>{html.escape(after)}"


def corpus_split(senses: WordSenses) -> Optional[Tuple[np.ndarray, List[str]]]:
    """Each occurrence's corpus (0 or 1) and the two corpora's names, for senses induced over two
    corpora; ``None`` for one corpus."""
    corpus = senses.extra.get("corpus")
    if corpus is None:
        return None
    corpus = np.asarray(corpus, dtype=np.int64)
    names = [str(n) for n in senses.extra.get("corpus_names", ["A", "B"])]
    if corpus.shape != (len(senses.occurrences),) or len(names) != 2 or not np.isin(corpus, (0, 1)).all():
        raise ValueError(
            f"extra['corpus'] of {senses.word!r} must give corpus 0 or 1 for each of its {len(senses.occurrences)} occurrences, with two names"
        )
    return corpus, names


def corpus_shares(senses: WordSenses) -> Optional[np.ndarray]:
    """float ``[2, n_senses]``: each sense's share of each corpus's occurrences (their mean graded weight); ``None`` for one corpus."""
    split = corpus_split(senses)
    if split is None:
        return None
    corpus, _ = split
    weights = np.asarray(senses.weights, dtype=np.float64)
    return np.stack([weights[corpus == c].mean(0) if (corpus == c).any() else np.zeros(weights.shape[1]) for c in (0, 1)])


def trace_members(senses: WordSenses) -> List[np.ndarray]:
    """The occurrences of each trace of the map, in order: one trace per sense, or per corpus for two corpora."""
    split = corpus_split(senses)
    if split is not None:
        return [np.flatnonzero(split[0] == c) for c in (0, 1)]
    return [np.flatnonzero(senses.labels == sense.id) for sense in senses.senses]


def explore_figure(senses: WordSenses, coords: np.ndarray, explained: Sequence[float], colours: Sequence[str]) -> Any:
    """The Plotly figure: one scatter trace per sense (so that the legend lists the senses), each
    point's ``customdata`` its occurrence index; SVG up to WEBGL_FROM occurrences, WebGL from there.
    The hover labels are not in it: the page's script builds them from its data, so that the page
    holds each sentence once."""
    import plotly.graph_objects as go

    labels = senses.labels
    scatter = go.Scattergl if len(senses.occurrences) >= WEBGL_FROM else go.Scatter
    fig = go.Figure()
    split = corpus_split(senses)
    members = trace_members(senses)
    if split is None:  # a trace per sense, in its colour
        names = [sense.name for sense in senses.senses]
        styles: List[Dict[str, Any]] = [{"color": colour, "opacity": 0.85} for colour in colours]
    else:  # two corpora: a trace per corpus, in its colour; a marker shape per sense
        names = split[1]
        styles = [
            {"color": CORPUS_COLOURS[c], "opacity": 0.8, "symbol": [SENSE_SYMBOLS[int(labels[i]) % len(SENSE_SYMBOLS)] for i in ids]}
            for c, ids in enumerate(members)
        ]
    for ids, name, style in zip(members, names, styles):
        fig.add_trace(
            scatter(
                x=coords[ids, 0],
                y=coords[ids, 1],
                mode="markers",
                name=html.escape(f"{name} ({len(ids)})", quote=False),  # plain text: Plotly renders tags in names
                customdata=ids.astype(np.int32),
                hovertemplate="%{hovertext}<extra></extra>",  # the page's script writes the labels from its data
                marker={**style, "size": 8, "line": {"width": 0.5, "color": "white"}},
            )
        )
    axis = {"zeroline": False, "showticklabels": False}
    fig.update_layout(
        template="plotly_white",
        hovermode="closest",
        hoverlabel={"align": "left", "bgcolor": "white", "font": {"size": 13}},
        font={"color": "#222"},
        # above the map, one sense a line (a horizontal legend cuts long names off)
        legend={
            "title": {"text": "Senses (occurrences)" if split is None else "Corpora (occurrences)", "side": "top"},
            "yanchor": "bottom",
            "y": 1.02,
            "x": 0,
            "font": {"size": 13},
        },
        margin={"l": 30, "r": 10, "t": 10, "b": 40},
        xaxis={**axis, "title": {"text": f"PCA 1 ({explained[0]:.0%} of variance)"}},
        yaxis={**axis, "title": {"text": f"PCA 2 ({explained[1]:.0%} of variance)"}},
    )
    return fig


def page_data(senses: WordSenses, indices: np.ndarray, cosines: np.ndarray, colours: Sequence[str]) -> Dict[str, Any]:
    """What the page's script reads: the occurrences, their senses and their neighbour lists."""
    weights = np.asarray(senses.weights)
    labels = senses.labels
    split = corpus_split(senses)
    return {
        "word": senses.word,
        "senses": [{"name": sense.name, "colour": colour} for sense, colour in zip(senses.senses, colours)],
        "occurrences": [[o.text, o.start, o.end, o.source] for o in senses.occurrences],
        "sense": labels.astype(int).tolist(),
        "weight": [round(float(weights[i, label]), 3) for i, label in enumerate(labels)] if len(labels) else [],
        "neighbours": indices.astype(int).tolist(),
        "cosines": np.round(cosines.astype(np.float64), 3).tolist(),
        "hover": {"context": HOVER_CONTEXT, "line": HOVER_LINE},
        "traces": [members.astype(int).tolist() for members in trace_members(senses)],
        "corpus": split[0].astype(int).tolist() if split else None,
        "corpora": split[1] if split else None,
    }


PLOTLY_FILE = "plotly.min.js"


def plotly_available() -> bool:
    """Whether Plotly (the ``explore`` extra) is installed: the commands ask before any work."""
    import importlib.util

    return importlib.util.find_spec("plotly") is not None


def explore_page(senses: WordSenses, *, neighbours: int = 10, title: Optional[str] = None, shared_plotly: bool = False) -> str:
    """The explore page of ``senses`` as one HTML document (see :func:`write_explore_page`); with
    ``shared_plotly`` it loads Plotly from ``plotly.min.js`` beside it instead of carrying it."""
    if not senses.occurrences:
        raise ValueError(f"no occurrences of {senses.word!r} to explore")
    check_word_senses(senses)
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise ImportError(PLOTLY_MISSING) from None
    if neighbours < 1:
        raise ValueError(f"neighbours must be 1 or more, got {neighbours}")
    colours = sense_colours(len(senses.senses), CORPUS_COLOURS if corpus_split(senses) is not None else ())
    coords, explained = project_2d(senses.vectors)
    indices, cosines = nearest_occurrences(senses.vectors, neighbours)
    figure = explore_figure(senses, coords, explained, colours)
    chart = figure.to_html(
        full_html=False,
        include_plotlyjs=PLOTLY_FILE if shared_plotly else True,
        div_id="explore-map",
        default_height="600px",
        config={"displaylogo": False, "responsive": True, "displayModeBar": "hover"},
        post_script="spacyElmoExplore(document.getElementById('{plot_id}'));",
    )
    title = title or f"Senses of “{senses.word}”"
    data = _script_json(page_data(senses, indices, cosines, colours))
    return _TEMPLATE.format(
        title=html.escape(title),
        summary=_summary(senses) + _change_summary(senses) + _shares_table(senses, colours),
        chart=chart,
        data=data,
        glue=_GLUE,
        style=_STYLE,
        tables=_sense_tables(senses, colours),
        k=len(indices[0]) if len(indices) else 0,
    )


def write_explore_page(
    senses: WordSenses,
    path: Union[str, "os.PathLike[str]"],
    *,
    neighbours: int = 10,
    title: Optional[str] = None,
    shared_plotly: bool = False,
) -> Path:
    """Write the explore page of ``senses`` to ``path`` (one HTML file that needs no network) and
    return the path. ``neighbours``: how many nearest occurrences a click lists; ``title``: the
    page's title (default "Senses of “WORD”"). With ``shared_plotly`` (many pages in one folder)
    Plotly's script (about 4.5 MB) is written once beside the pages, as ``plotly.min.js``, and each
    page loads it from there: the folder, not the single file, is what needs no network."""
    from ..files import write_bytes

    page = explore_page(senses, neighbours=neighbours, title=title, shared_plotly=shared_plotly)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if shared_plotly:
        write_plotly_script(path.parent)
    return write_bytes(path, page.encode("utf-8"))


def write_plotly_script(folder: Path) -> Path:
    """The installed Plotly's script as ``folder/plotly.min.js`` (written again unless the file holds exactly it)."""
    from plotly.offline import get_plotlyjs

    from ..files import write_bytes

    script = get_plotlyjs().encode("utf-8")
    target = Path(folder) / PLOTLY_FILE
    if target.is_file() and not target.is_symlink() and target.stat().st_size == len(script) and target.read_bytes() == script:
        return target
    return write_bytes(target, script)


def _window(occurrence: Occurrence, context: Optional[int]) -> Tuple[str, str, str]:
    text, start, end = occurrence.text, occurrence.start, occurrence.end
    before, word, after = text[:start], text[start:end], text[end:]
    if context is not None:
        if len(before) > context:
            before = "…" + before[len(before) - context :].lstrip()
        if len(after) > context:
            after = after[:context].rstrip() + "…"
    return before, word, after


def _wrap(text: str, width: int) -> List[str]:
    """Break ``text`` into lines of about ``width`` characters at spaces (newlines become spaces)."""
    lines: List[str] = []
    line = ""
    for word in " ".join(text.split()).split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def _script_json(data: Dict[str, Any]) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` in it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _summary(senses: WordSenses) -> str:
    forms = ", ".join(sorted(set(senses.forms))) or senses.word
    parts = [
        f"{plural(len(senses.occurrences), 'occurrence')} ({html.escape(forms)})",
        plural(len(senses.senses), "sense"),
        f"clustered by {html.escape(senses.representation)}",
    ]
    note = f'<p class="note">{html.escape(senses.note)}</p>' if senses.note else ""
    almost = best_split_line(senses)
    if almost:
        note += f'<p class="note almost">{html.escape(almost)}</p>'
    return f"<p>{' · '.join(parts)}</p>{note}{_check(senses.extra.get('check'))}"


def _check(check: Any) -> str:
    """The pseudoword check saved with the senses (``induce --check``), as one paragraph; none if absent."""
    if not isinstance(check, dict) or not check.get("pairs"):
        return ""
    pairs = ", ".join(f"{p['first']}+{p['second']} {p['ari']:.2f}" for p in check["pairs"])
    verdict = "contexts separate meanings" if check["mean_ari"] >= 0.6 else "treat these senses with caution"
    made, asked = len(check["pairs"]), int(check.get("asked") or 0)
    fewer = f" ({made} of the {asked} asked: {'; '.join(check.get('notes') or [])})" if asked > made else ""
    return (
        f'<p class="check">Pseudoword check on this corpus: mean ARI {check["mean_ari"]:.2f} over {plural(made, "pair")} '
        f"({html.escape(pairs)}){html.escape(fewer)}: {verdict}.</p>"
    )


def _change_summary(senses: WordSenses) -> str:
    """What ``change`` measured of the word (``extra["change"]``): its rank, each measure with its
    interval, and the binary call; none for a page without it (or saved before it was recorded)."""
    change = senses.extra.get("change")
    split = corpus_split(senses)
    if not isinstance(change, dict) or not change.get("intervals") or split is None:
        return ""
    a, b = (html.escape(n) for n in split[1])
    names = change.get("names") or {k: k for k in change["measures"]}
    ranked_by = str(change.get("measure", ""))
    parts = []
    if change.get("rank"):
        parts.append(
            f'<span class="rank">rank {change["rank"]} of {change.get("ranked", "?")}</span> '
            f"by {html.escape(names.get(ranked_by, ranked_by))} (1 = most changed)"
        )
    called = change.get("changed")
    if called is not None:
        sample = change.get("sample") or [0, 0]
        size = min(int(x) for x in sample)
        p, q = change.get("p_value"), change.get("q_value")
        if p is not None:  # the binary call's permutation test (pages saved before it: the count rule)
            adjusted = f", q = {float(q):.3g} over the words measured together" if q is not None else ""
            tested = str(change.get("test") or ranked_by)  # pages saved before the energy test: the ranking measure
            energy = "the energy distance between the occurrences as their senses were induced from them"
            what = energy if tested == "energy" else html.escape(str(names.get(tested, tested)))
            how = f"a permutation test of {what}, in samples of {size} from {a} and from {b}: p = {float(p):.3g}{adjusted}"
        else:
            how = f"SemEval-2020 Task 1's rule on each sense's count, in samples of {size} from {a} and from {b}"
        parts.append(f'binary call: <strong class="call">{"changed" if called else "no change"}</strong> ({how})')
    confidence = change.get("confidence")
    level = f"{float(confidence):.0%} interval" if confidence else "interval"
    ranked = ' class="ranked"'
    rows = "".join(
        f'<tr data-measure="{html.escape(key)}"{ranked if key == ranked_by else ""}><td>{html.escape(str(name))}</td>'
        f'<td class="share">{change["measures"][key]:.3f}</td>'
        f'<td class="share">[{change["intervals"][key][0]:.3f}, {change["intervals"][key][1]:.3f}]</td></tr>'
        for key, name in names.items()
        if key in change["measures"] and key in change["intervals"]
    )
    return (
        f'<div id="change"><p>{" · ".join(parts)}</p>'
        f'<table id="measures"><thead><tr><th>measure</th><th>{a} → {b}</th><th>{level}</th></tr></thead><tbody>{rows}</tbody></table></div>'
    )


def _shares_table(senses: WordSenses, colours: Sequence[str]) -> str:
    """For two corpora: each sense's share of either corpus, and the change from the first to the
    second; with what ``change`` recorded, each sense's status and the counts the binary call compared."""
    shares = corpus_shares(senses)
    split = corpus_split(senses)
    if shares is None or split is None:
        return ""
    corpus, names = split
    counts = [np.bincount(senses.labels[corpus == c], minlength=len(senses.senses)) for c in (0, 1)]
    recorded = senses.extra.get("change")
    change: Dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    statuses = change.get("statuses") or []
    compared = change.get("binary_counts")

    def status(sense: Any) -> str:
        if not statuses:
            return ""
        text = statuses[sense.id] if sense.id < len(statuses) and statuses[sense.id] else "–"
        return f'<td class="status status-{html.escape(text)}">{html.escape(text)}</td>'

    def binary(sense: Any) -> str:
        if not compared:
            return ""
        return f'<td class="share">{compared[0][sense.id]} → {compared[1][sense.id]}</td>'

    rows = "".join(
        f'<tr data-sense="{sense.id}"><td class="shape">{SENSE_GLYPHS[sense.id % len(SENSE_GLYPHS)]}</td>'
        f'<td><span class="swatch" style="background:{colour}"></span>{html.escape(sense.name)}</td>'
        f'<td class="share">{shares[0, sense.id]:.0%}</td><td class="share">{shares[1, sense.id]:.0%}</td>'
        f'<td class="share">{shares[1, sense.id] - shares[0, sense.id]:+.0%}</td>'
        f"<td>{counts[0][sense.id]} / {counts[1][sense.id]}</td>{status(sense)}{binary(sense)}</tr>"
        for sense, colour in zip(senses.senses, colours)
    )
    a, b = (html.escape(n) for n in names)
    extra_heads = ("<th>status</th>" if statuses else "") + ("<th>binary call's counts</th>" if compared else "")
    return (
        f'<table id="shares"><thead><tr><th>shape</th><th>sense</th><th>share of {a}</th><th>share of {b}</th><th>change</th>'
        f"<th>occurrences ({a} / {b})</th>{extra_heads}</tr></thead><tbody>{rows}</tbody></table>"
    )


def _sense_tables(senses: WordSenses, colours: Sequence[str]) -> str:
    labels = senses.labels
    weights = np.asarray(senses.weights)
    out = []
    for sense, colour in zip(senses.senses, colours):
        size = int(np.sum(labels == sense.id))
        typical = list(getattr(sense, "typicality", []) or [])
        # the similarity to the sense's medoid where the senses recorded it (older files: the sense weight)
        shown = typical if len(typical) >= min(len(sense.examples), TABLE_EXAMPLES) else [weights[i, sense.id] for i in sense.examples]
        rows = "".join(
            f"<tr><td>{value:.2f}</td><td>{marked_html(senses.occurrences[i], 200)}</td>"
            f'<td class="source">{html.escape(senses.occurrences[i].source)}</td></tr>'
            for i, value in zip(sense.examples[:TABLE_EXAMPLES], shown)
        )
        column = "similarity to the sense's most central example" if shown is typical else "weight"
        substitutes = html.escape(", ".join(sense.substitutes)) or "–"
        context = html.escape(", ".join(getattr(sense, "context", []))) or "–"
        out.append(
            f'<section class="sense" data-sense="{sense.id}"><h3><span class="swatch" style="background:{colour}"></span>'
            f"{html.escape(sense.name)} <small>({plural(size, 'occurrence')})</small></h3>"
            f'<p class="substitutes">Context words: {context} · Substitutes: {substitutes}</p>'
            f"<table><thead><tr><th>{column}</th><th>example</th><th>source</th></tr></thead><tbody>{rows}</tbody></table></section>"
        )
    return "".join(out)


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.2em 2em; color: #222; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
.note { color: #8a5a00; }
.explore { display: grid; grid-template-columns: minmax(0, 3fr) minmax(300px, 2fr); gap: 1.5em; align-items: start; }
.map { min-width: 0; }
.panel { max-height: 640px; overflow-y: auto; font-size: .92em; }
.panel h2 { font-size: 1.05em; margin: .6em 0 .3em; }
.occurrence { padding: .4em .6em; border-left: 4px solid #ccc; background: #fafafa; }
.hint { color: #777; }
mark { background: #ffe680; padding: 0 .1em; }
ol#neighbours { padding-left: 2.2em; margin: .3em 0; }
ol#neighbours li { margin: .25em 0; cursor: pointer; }
ol#neighbours li:hover { background: #f0f4ff; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 50%; margin-right: .35em; vertical-align: baseline; }
.cosine { color: #555; font-variant-numeric: tabular-nums; margin-right: .4em; }
.source { color: #888; font-size: .85em; }
section.sense h3 { font-size: 1.05em; margin: 1.2em 0 .2em; }
.substitutes { margin: .2em 0 .4em; color: #444; }
table { border-collapse: collapse; width: 100%; font-size: .92em; }
th, td { text-align: left; padding: .25em .5em; border-bottom: 1px solid #eee; vertical-align: top; }
td:first-child { font-variant-numeric: tabular-nums; width: 4em; }
#shares { width: auto; margin: .4em 0 1em; }
#shares td:first-child { width: auto; }
td.share { font-variant-numeric: tabular-nums; text-align: right; }
td.shape { color: #555; text-align: center; }
#change p { margin: .3em 0; }
#change .rank { font-weight: 600; }
#measures { width: auto; margin: .3em 0 .6em; }
#measures td:first-child { width: auto; }
#measures tr.ranked td { font-weight: 600; }
td.status-appeared, td.status-vanished { font-weight: 600; }
"""

# The glue between the chart and the panel: hover shows a sentence, click lists its neighbours.
# Corpus text only ever goes into text nodes (textContent / append of strings).
_GLUE = r"""
function spacyElmoExplore(gd) {
  const data = JSON.parse(document.getElementById('explore-data').textContent);
  function sentence(i) {
    const [text, start, end] = data.occurrences[i];
    const span = document.createElement('span');
    const mark = document.createElement('mark');
    mark.textContent = text.slice(start, end);
    span.append(text.slice(0, start), mark, text.slice(end));
    return span;
  }
  function senseLabel(i) {
    const sense = data.senses[data.sense[i]];
    const label = document.createElement('span');
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = sense.colour;
    label.append(swatch, sense.name + ' (' + data.weight[i].toFixed(2) + ')');
    return label;
  }
  // Plotly's hover label: the sense, then the sentence around the word (escaped, wrapped, the word
  // in bold). Plotly reads a little HTML in labels and decodes &lt; &gt; &amp;: with every < escaped
  // no tag of the corpus's can open.
  function escapeText(text) {
    return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  }
  function hoverLabel(i) {
    const [text, start, end] = data.occurrences[i];
    const {context, line: width} = data.hover;
    let before = text.slice(0, start), after = text.slice(end);
    if (before.length > context) before = '\u2026' + before.slice(before.length - context).trimStart();
    if (after.length > context) after = after.slice(0, context).trimEnd() + '\u2026';
    const words = (before + '\u0000' + text.slice(start, end) + '\u0001' + after).split(/\s+/).filter(Boolean);
    const lines = [];
    let line = '';
    for (const word of words) {
      if (line && line.length + 1 + word.length > width) { lines.push(line); line = word; }
      else line = line ? line + ' ' + word : word;
    }
    if (line) lines.push(line);
    let bold = false;  // the word may wrap onto a second line: close and reopen <b> around the break
    const body = lines.map((part) => {
      const opened = bold ? '<b>' : '';
      bold = (bold || part.includes('\u0000')) && !part.includes('\u0001');
      return opened + escapeText(part).replace('\u0000', '<b>').replace('\u0001', '</b>') + (bold ? '</b>' : '');
    }).join('<br>');
    return '<i>' + escapeText(data.senses[data.sense[i]].name) + '</i> (' + data.weight[i].toFixed(2) + ')<br>' + body;
  }
  function describe(target, i) {
    target.replaceChildren(senseLabel(i), document.createElement('br'), sentence(i));
    const source = (data.corpora ? data.corpora[data.corpus[i]] + (data.occurrences[i][3] ? ' \u00b7 ' : '') : '') + data.occurrences[i][3];
    if (source) {
      const where = document.createElement('div');
      where.className = 'source';
      where.textContent = source;
      target.append(where);
    }
    target.dataset.occurrence = i;
  }
  function select(i) {
    describe(document.getElementById('selected'), i);
    const list = document.getElementById('neighbours');
    list.replaceChildren(...data.neighbours[i].map((j, rank) => {
      const item = document.createElement('li');
      const cosine = document.createElement('span');
      cosine.className = 'cosine';
      cosine.textContent = data.cosines[i][rank].toFixed(3);
      const swatch = document.createElement('span');
      swatch.className = 'swatch';
      swatch.style.background = data.senses[data.sense[j]].colour;
      swatch.title = data.senses[data.sense[j]].name;
      item.append(cosine, swatch, sentence(j));
      item.dataset.occurrence = j;
      item.addEventListener('click', () => select(j));
      return item;
    }));
  }
  Plotly.restyle(gd, {hovertext: data.traces.map((ids) => ids.map(hoverLabel))});
  gd.on('plotly_hover', (event) => describe(document.getElementById('hovered'), event.points[0].customdata));
  gd.on('plotly_click', (event) => select(event.points[0].customdata));
  window.spacyElmoExplorer = {data: data, select: select, ready: performance.now()};
}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
<script>{glue}</script>
</head>
<body>
<h1>{title}</h1>
{summary}
<script type="application/json" id="explore-data">{data}</script>
<div class="explore">
  <div class="map">{chart}</div>
  <div class="panel">
    <h2>Hovered</h2>
    <div id="hovered" class="occurrence"><span class="hint">Hover a point to read its sentence.</span></div>
    <h2>Selected, and its {k} nearest occurrences</h2>
    <div id="selected" class="occurrence"><span class="hint">Click a point to list the occurrences nearest to it
    (cosine similarity of their vectors); click one of those to move to it.</span></div>
    <ol id="neighbours"></ol>
  </div>
</div>
<h2>Senses and their most representative examples</h2>
{tables}
</body>
</html>
"""
