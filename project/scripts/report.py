"""Collect the perplexity JSON files of a run into one markdown table (metrics/<size>-report.md)."""
import json
import sys
from pathlib import Path

size = sys.argv[1]
rows = [
    ("pretrained biLM", "general test", f"metrics/{size}-general-test.json"),
    ("pretrained biLM", "domain test", f"metrics/{size}-domain-before.json"),
    ("fine-tuned biLM", "domain test", f"metrics/{size}-domain-after.json"),
    ("fine-tuned biLM", "general test", f"metrics/{size}-general-after.json"),
]
lines = [
    f"# Perplexity report ({size})",
    "",
    "| model | held-out text | forward | backward | average | unigram baseline | predictions |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
]
for model, data, path in rows:
    m = json.loads(Path(path).read_text())
    lines.append(
        f"| {model} | {data} | {m['ppl_fwd']:.1f} | {m['ppl_bwd']:.1f} | {m['ppl_avg']:.1f} | {m['unigram_ppl']:.1f} | {m['tokens']:,} |"
    )
before = json.loads(Path(rows[1][2]).read_text())["ppl_avg"]
after = json.loads(Path(rows[2][2]).read_text())["ppl_avg"]
lines += ["", f"Fine-tuning changed in-domain perplexity by {100 * (after - before) / before:+.1f}% ({before:.1f} -> {after:.1f})."]
out = Path(f"metrics/{size}-report.md")
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
