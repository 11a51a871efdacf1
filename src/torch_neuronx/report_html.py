"""The HTML page of `python -m torch_neuronx.report --html PATH`: the per-op time breakdown on trn2
and trn3 and the memory per device, drawn with matplotlib and embedded in one self-contained file."""
from __future__ import annotations

import base64
import html
import io

GIB = 1 << 30
_COMPONENTS = ("weights", "gradients", "optimizer_states", "activations", "kv_cache")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _time_figure(result: dict, plt):
    """One panel per profile, stacked, so the figure keeps the page's width whatever the count."""
    profiles = [p for p in result["breakdown"] if result["estimate"].get(p)]
    what = "decode token" if result["assumptions"]["generate"] else "step"
    fig, axes = plt.subplots(max(1, len(profiles)), 1, figsize=(10, 4.5 * max(1, len(profiles))), squeeze=False)
    for ax, profile in zip(axes[:, 0], profiles):
        rows = result["breakdown"][profile][:15][::-1]
        ax.barh([r[0] for r in rows], [r[2] / 1e3 for r in rows], color="#3b7dd8")
        ax.set_xlabel(f"ms per {what} on one logical core, before tensor-parallel sharding")
        ax.set_title(f"{profile}: time by op")
        for i, r in enumerate(rows):
            ax.text(r[2] / 1e3, i, f" {r[3]:.0%}", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def _memory_figure(result: dict, capacity: dict, plt):
    profiles = list(capacity)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottoms = [0.0] * len(profiles)
    for component in _COMPONENTS:
        values = [result["memory"][component] / GIB / (result["min_devices"][p] or 1) for p in profiles]
        if any(values):
            ax.bar(profiles, values, bottom=bottoms, label=component.replace("_", " "))
            bottoms = [b + v for b, v in zip(bottoms, values)]
    for i, p in enumerate(profiles):
        ax.hlines(capacity[p] / GIB, i - 0.4, i + 0.4, colors="black", linestyles="dashed", zorder=3,
                  label="one logical core's HBM" if i == 0 else None)
    ax.set_ylabel("GiB per logical core")
    ax.set_xticks(range(len(profiles)),
                  [f"{p} (x{result['min_devices'][p]})" if result["min_devices"][p] else f"{p} (does not fit)"
                   for p in profiles])
    ax.set_title("memory per device at the smallest degree that fits")
    ax.set_ylim(0, max(max(bottoms), *(capacity[p] / GIB for p in profiles)) * 1.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def write(result: dict, capacity: dict, path: str) -> None:
    """Writes the report `result` (report.assess) as one HTML page to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    time_png = _png(_time_figure(result, plt))
    memory_png = _png(_memory_figure(result, capacity, plt))
    plt.close("all")
    def cell(v) -> str:
        return f"<td>{html.escape(str(v))}</td>"

    def speed(e) -> str:
        return cell(f"{e['step_seconds']:.4f}") + cell(f"{e['tokens_per_second']:,.0f}") + cell(e["bound"])

    rows = "".join(f"<tr>{cell(p)}{cell(result['min_devices'][p] or '-')}"
                   + (cell(e["devices"]) + speed(e) if e else cell("does not fit") + cell("-") * 3) + "</tr>"
                   for p, e in result["estimate"].items())
    layouts = "".join(f"<tr>{cell(p)}{cell(i)}<td style='text-align:left'>{html.escape(lay['layout'])}</td>"
                      f"{speed(lay)}</tr>"
                      for p, options in result.get("layouts", {}).items() for i, lay in enumerate(options, 1))
    assumptions = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
                          f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
                          for k, v in result["assumptions"].items() if v is not None)
    fallbacks = ", ".join(html.escape(f["op"]) for f in result["fallbacks"]) or "none"
    name = f"{result['architecture']} ({result['model']})"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>torch_neuronx report: {html.escape(name)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}}
img{{max-width:100%;height:auto}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{padding:4px 12px;text-align:right;border-bottom:1px solid #ddd}}</style>
</head><body>
<h1>{html.escape(result['architecture'])}</h1>
<p><code>{html.escape(result['model'])}</code></p>
<p>{result['parameters'] / 1e9:.3f}B parameters &middot; will run on neuron: <b>{result['will_run']}</b>
&middot; fallbacks: {fallbacks}</p>
<table>{assumptions}</table>
<h2>Estimated speed</h2>
<p>Both profiles at {html.escape(str(result['assumptions'].get('compared at', '')))}, tensor parallel,
LNC=2; a step is the whole step on that many logical cores (the prompt and every generated token).</p>
<table><tr><th>profile</th><th>fits (logical cores)</th><th>logical cores</th><th>step seconds</th>
<th>tokens / s</th><th>bound by</th></tr>{rows}</table>
<h2>Layouts</h2>
<p>The best splits of those cores: tensor parallel (TP) within a chip first, data parallel (DP, or FSDP when
training) across the NeuronLink torus, EFA only between instances.</p>
<table><tr><th>profile</th><th>#</th><th style='text-align:left'>layout</th><th>step seconds</th>
<th>tokens / s</th><th>bound by</th></tr>
{layouts}</table>
<h2>Where the time goes</h2>
<p>Per op on one logical core, before the split: tensor parallelism divides each op's compute and memory
time by its degree but not its fixed cost, and adds the collectives.</p>
<img alt="time by op" src="data:image/png;base64,{time_png}">
<h2>Memory</h2><img alt="memory per device" src="data:image/png;base64,{memory_png}">
<p>Analytic estimates of the cost model (torch_neuronx.cost_model, constants and their sources in
torch_neuronx.cost_constants), not measurements.</p>
</body></html>
"""
    with open(path, "w") as f:
        f.write(page)
