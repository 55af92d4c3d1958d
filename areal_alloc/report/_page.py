"""The report's one HTML page: inline CSS, inline SVG, a few lines of inline script.

Everything is drawn from the plan's JSON dict (``Plan.to_dict()``, what ``check --json``
prints) and the rank groups ``explain --json`` lists; both are embedded as JSON so the
numbers can be checked. Every string of the config is escaped, and the page fetches
nothing: no URL at all, and a Content-Security-Policy that forbids any request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from areal_alloc.placement import node_ranges
from areal_alloc.report._grid import MAX_COLUMNS, Gap, Row, map_rows
from areal_alloc.report._groups import MAX_DRAWN_RANKS, EngineGroups, engine_groups

__all__ = ["render_report"]

#: Engine colours, in the plan's engine order (Paul Tol's bright scheme: colour-blind safe).
ENGINE_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")
#: Memory terms' colours; a term not named here is grey.
TERM_COLOURS = {
    "weights": "#4477AA",
    "gradients": "#66CCEE",
    "optimizer": "#228833",
    "activations": "#CCBB44",
    "logits": "#EE6677",
    "kv_cache": "#AA3377",
    "reserve": "#BBBBBB",
    "colocated": "#997700",
    "load": "#EE7733",
}
#: Rank-group colours, cycled over the groups of one kind.
GROUP_COLOURS = (
    "#77AADD", "#EE8866", "#EEDD88", "#FFAABB", "#99DDFF", "#44BB99",
    "#BBCC33", "#AAAA00", "#DDDDDD", "#CC6677", "#88CCEE", "#DDCC77",
)  # fmt: skip
#: Rank cells drawn with their rank number written in them at most.
_NUMBERED_RANKS = 256
_CELL, _PITCH, _LABEL, _TOP = 24, 27, 150, 22
_BAR_WIDTH = 720

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;
 color:#222}
h1{font-size:1.5em;margin:0 0 .2em}
h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.8em}
h3{font-size:1em;margin:1.2em 0 .3em}
code,.mono{font-family:ui-monospace,monospace;font-size:.95em}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
th{font-weight:600;border-bottom:1px solid #ccc}.legend{list-style:none;padding:0}
.legend li{margin:2px 0}.legend svg{vertical-align:middle;margin-right:6px}
svg text{font-size:11px;fill:#333}svg text.n{font-size:9px;fill:#222;pointer-events:none}
svg.cluster,svg.ranks,svg.timeline{max-width:100%;height:auto}
rect.gpu,rect.rank{stroke:#fff;stroke-width:1}rect.inst{fill:none;stroke:#111;stroke-width:1.6}
rect.rank{fill:#eee}rect.rank.hl{stroke:#000;stroke-width:2.5}
fieldset{border:0;padding:0;margin:.3em 0}fieldset label{margin-right:1em;white-space:nowrap}
.note{color:#555}.bad{color:#b00;font-weight:600}.edge{color:#a60;font-weight:600}
table.split{margin:.4em 0}table.split caption{text-align:left;color:#555;padding-bottom:2px}
pre{overflow:auto;max-height:30em;background:#f6f6f6}
"""

#: The rank-group switcher (colour each drawn rank by its group of the chosen kind, the
#: group's ranks in the cell's title, the group outlined under the pointer) and the JSON
#: view; ``%s``: the group colours.
_SCRIPT = """
(function(){
var data=JSON.parse(document.getElementById('rank-groups').textContent);
var colours=%s;
function brief(g){
 if(g.length<=16)return g.join(', ');
 return g.slice(0,8).join(', ')+', … '+g[g.length-1]+' ('+g.length+' ranks drawn)';
}
function show(index,kind){
 var info=data[index].kinds[kind],of=new Map();
 info.groups.forEach(function(g,i){g.forEach(function(r){of.set(r,i);});});
 var svg=document.querySelector('svg.ranks[data-index="'+index+'"]');
 svg.querySelectorAll('rect.rank').forEach(function(cell){
  var t=cell.querySelector('title');
  if(cell.dataset.label===undefined)cell.dataset.label=t.textContent;
  var i=of.get(Number(cell.dataset.rank));
  cell.classList.remove('hl');
  if(i===undefined){
   delete cell.dataset.group;cell.style.fill='';
   t.textContent=cell.dataset.label+' · '+kind+': its group is not listed';return;
  }
  cell.dataset.group=String(i);cell.style.fill=colours[i%%colours.length];
  t.textContent=cell.dataset.label+' · '+kind+' group '+i+' of '+info.count+': ['
   +brief(info.groups[i])+']';
 });
 svg.dataset.kind=kind;
}
document.querySelectorAll('input.kind').forEach(function(input){
 input.addEventListener('change',function(){show(input.dataset.index,input.value);});
 if(input.checked)show(input.dataset.index,input.value);
});
document.querySelectorAll('svg.ranks').forEach(function(svg){
 svg.addEventListener('mouseover',function(e){
  var c=e.target.closest('rect.rank');
  if(!c||c.dataset.group===undefined)return;
  svg.querySelectorAll('rect.rank').forEach(function(x){
   x.classList.toggle('hl',x.dataset.group===c.dataset.group);
  });
 });
 svg.addEventListener('mouseleave',function(){
  svg.querySelectorAll('rect.hl').forEach(function(x){x.classList.remove('hl');});
 });
});
var view=document.getElementById('json-view'),details=view.parentNode;
details.addEventListener('toggle',function(){
 if(details.open&&!view.textContent){
  var plan=JSON.parse(document.getElementById('plan-json').textContent);
  view.textContent=JSON.stringify(plan,null,1);
 }
});
})();
"""

#: The page may load nothing: no script, style, image, font or connection from anywhere.
_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def h(value: object) -> str:
    """Any value as HTML text or attribute: every config string goes through here."""
    return escape(str(value), quote=True)


def embedded_json(value: object) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` as escapes,
    so no ``</script>`` (or ``<!--``) of a config string can end the element."""
    text = json.dumps(value, indent=None, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def gib(n: float) -> str:
    """``12.3 GiB``; ``512.0 MiB`` under a GiB (the plan's text does the same)."""
    from areal_alloc.estimate.memory import readable_bytes

    return readable_bytes(n)


def seconds(x: float) -> str:
    return f"{x:.3g} s"


def _colours(plan: Mapping[str, Any]) -> dict[str, str]:
    keys = [e["key"] for e in plan["engines"]]
    return {key: ENGINE_COLOURS[i % len(ENGINE_COLOURS)] for i, key in enumerate(keys)}


def _where(runs: Sequence[Mapping[str, int]], per_node: int) -> str:
    spans = node_ranges(tuple((r["start"], r["stop"]) for r in runs), per_node)
    return ", ".join(f"node {a}" if a == b else f"nodes {a}–{b}" for a, b in spans)


# --- the cluster ---------------------------------------------------------------------


def _patterns(plan: Mapping[str, Any], colours: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """SVG defs: free GPUs, and one striped pattern per engine that others share."""
    defs = [
        '<pattern id="free" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<rect width="6" height="6" fill="#f7f7f7"/><circle cx="3" cy="3" r="1" fill="#aaa"/>'
        "</pattern>"
    ]
    fills: dict[str, str] = {}
    for index, placement in enumerate(plan["placements"]):
        key = placement["key"]
        shared = [k for k in placement["shared_with"] if k in colours]
        if not shared:
            fills[key] = colours.get(key, "#999")
            continue
        stripes = [key, *shared]
        width = 5 * len(stripes)
        rects = "".join(
            f'<rect x="{5 * i}" width="5" height="{width}" fill="{colours.get(k, "#999")}"/>'
            for i, k in enumerate(stripes)
        )
        defs.append(
            f'<pattern id="co-{index}" width="{width}" height="{width}" '
            f'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">{rects}</pattern>'
        )
        fills[key] = f"url(#co-{index})"
    return "<defs>" + "".join(defs) + "</defs>", fills


def _owners(plan: Mapping[str, Any]) -> dict[str, str]:
    """Each placed engine as its cells' hover names it: key, backend, colocated ones."""
    specs = {e["key"]: e["backend"] for e in plan["engines"]}
    out: dict[str, str] = {}
    for placement in plan["placements"]:
        key = placement["key"]
        text = f"{key} {specs.get(key, '')}"
        if placement["shared_with"]:
            text += (
                " + "
                + ", ".join(f"{k} {specs.get(k, '')}" for k in placement["shared_with"])
                + " (colocated)"
            )
        out[key] = text
    return out


def _cluster_svg(plan: Mapping[str, Any], colours: Mapping[str, str]) -> str:
    rows = map_rows(plan)
    per_node = plan["cluster"]["n_gpus_per_node"]
    columns = min(per_node, MAX_COLUMNS)
    width = _LABEL + columns * _PITCH
    height = _TOP + len(rows) * _PITCH
    defs, fills = _patterns(plan, colours)
    owners = _owners(plan)
    sizes = {e["key"]: e.get("instance_size") or 0 for e in plan["engines"]}
    parts = [
        f'<svg class="cluster" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="cluster map">',
        defs,
    ]
    if per_node <= MAX_COLUMNS:
        parts.extend(
            f'<text x="{_LABEL + g * _PITCH + _CELL / 2}" y="13" text-anchor="middle">{g}</text>'
            for g in range(per_node)
        )
    else:
        parts.append(f'<text x="{_LABEL}" y="13">GPUs 0–{per_node - 1}, runs of one owner</text>')
    scale = columns / per_node  # cells per GPU: 1, or less on a wide node
    for i, row in enumerate(rows):
        y = _TOP + i * _PITCH
        if isinstance(row, Gap):
            parts.append(f'<text class="gap" x="{_LABEL}" y="{y + 14}">{h(row.label)}</text>')
            continue
        parts.append(f'<text x="0" y="{y + 14}">{h(row.label)}</text>')
        parts.extend(_row_cells(row, y, scale, per_node, fills, owners))
        parts.extend(_outlines(row, y, scale, sizes))
    parts.append("</svg>")
    return "".join(parts)


def _row_cells(
    row: Row,
    y: int,
    scale: float,
    per_node: int,
    fills: Mapping[str, str],
    owners: Mapping[str, str],
) -> Iterable[str]:
    for cell in row.cells:
        x = _LABEL + cell.gpu * scale * _PITCH
        w = max(cell.width * scale * _PITCH - (_PITCH - _CELL), 1.0)
        gpus = (
            f"GPU {cell.gpu}" if cell.width == 1 else f"GPUs {cell.gpu}–{cell.gpu + cell.width - 1}"
        )
        if cell.key is None:
            fill, engine, what = "url(#free)", "", "free"
        else:
            fill, engine, what = (
                fills.get(cell.key, "#999"),
                cell.key,
                owners.get(cell.key, cell.key),
            )
            if cell.instance is not None and row.first == row.last:
                server = f"{cell.server} " if cell.server != cell.key else ""
                what += f", {server}instance {cell.instance}"
        yield (
            f'<rect class="gpu{" free" if cell.key is None else ""}" x="{x:g}" y="{y}" '
            f'width="{w:g}" height="{_CELL}" fill="{fill}" data-engine="{h(engine)}" '
            f'data-row="{h(row.label)}" data-gpu="{cell.gpu}" data-gpus="{cell.width}">'
            f"<title>{h(row.label)}, {gpus}: {h(what)}</title></rect>"
        )


def _outlines(row: Row, y: int, scale: float, sizes: Mapping[str, int]) -> Iterable[str]:
    """One outline per inference instance in the row (its tensor × pipeline extent)."""
    cells = row.cells
    i = 0
    while i < len(cells):
        cell = cells[i]
        j = i + 1
        if cell.key is None or cell.instance is None:
            i = j
            continue
        while j < len(cells) and (cells[j].server, cells[j].instance) == (
            cell.server,
            cell.instance,
        ):
            j += 1
        x = _LABEL + cell.gpu * scale * _PITCH - 1
        w = (cells[j - 1].gpu + 1 - cell.gpu) * scale * _PITCH - (_PITCH - _CELL) + 2
        server = cell.server or cell.key
        size = sizes.get(server, 0)
        yield (
            f'<rect class="inst" x="{x:g}" y="{y - 1}" width="{w:g}" height="{_CELL + 2}" '
            f'data-engine="{h(server)}"><title>{h(server)}: an instance of {size} GPUs'
            f"</title></rect>"
        )
        i = j


def _swatch(fill: str, outline: bool = False) -> str:
    stroke = ' stroke="#111" stroke-width="2"' if outline else ""
    return (
        f'<svg width="16" height="16">'
        f'<rect x="1" y="1" width="14" height="14" fill="{fill}"{stroke}/></svg>'
    )


def _legend(plan: Mapping[str, Any], colours: Mapping[str, str]) -> str:
    per_node = plan["cluster"]["n_gpus_per_node"]
    engines = {e["key"]: e for e in plan["engines"]}
    _, fills = _patterns(plan, colours)
    items: list[str] = []
    for placement in plan["placements"]:
        key = placement["key"]
        engine = engines.get(key, {})
        fill = colours.get(key, "#999")
        text = f"{key} {engine.get('backend', '')}"
        if engine.get("instances"):
            count, size = engine["instances"], engine["instance_size"]
            text += f", {count:,} instance{'s' if count != 1 else ''} of {size:,} GPU"
            text += "s" if size != 1 else ""
        where = _where(placement["gpu_ranges"], per_node)
        items.append(
            f'<li data-engine="{h(key)}">{_swatch(fill)}<span class="mono">{h(text)}</span> '
            f"({h(where)})</li>"
        )
        if placement["shared_with"]:
            shared = ", ".join(placement["shared_with"])
            each = " ".join(
                f"{_swatch(colours.get(k, '#999'))}{h(k)}" for k in placement["shared_with"]
            )
            items.append(
                f'<li data-engine="{h(key)}" data-shared="{h(shared)}">{_swatch(fills[key])}'
                f"{h(key)} + {h(shared)}: colocated, on the same GPUs ({each})</li>"
            )
    free = plan["cluster"]["capacity"] - plan["total_gpus"]
    items.append(f'<li data-engine="">{_swatch("url(#free)")}free: {free:,} GPUs</li>')
    if any(e.get("instances") and e.get("active") for e in plan["engines"]):
        items.append(f"<li>{_swatch('none', outline=True)}one inference instance</li>")
    items.extend(
        f'<li class="note">{h(e["key"])}: inactive, no GPUs</li>'
        for e in plan["engines"]
        if not e["active"]
    )
    return '<ul class="legend">' + "".join(items) + "</ul>"


# --- rank groups -------------------------------------------------------------------


def _rank_cells(engine: EngineGroups, per_node: int) -> tuple[list[str], int, int]:
    """The cells of one engine's drawn ranks, on their nodes' rows; (cells, width, height)."""
    columns = min(per_node, MAX_COLUMNS) if per_node else 8
    place: list[tuple[tuple[int, int], int, str]] = []  # (row key, column, label)
    for rank, gpu in enumerate(engine.gpus):
        if gpu is None or not per_node:
            row_key = (-1, rank // columns)
            place.append((row_key, rank % columns, f"rank {rank}"))
            continue
        node, local = divmod(gpu, per_node)
        place.append(
            ((node, local // columns), local % columns, f"rank {rank} · node {node} GPU {local}")
        )
    rows = sorted({key for key, _, _ in place})
    index = {key: i for i, key in enumerate(rows)}
    numbered = engine.drawn <= _NUMBERED_RANKS
    parts: list[str] = []
    for node, chunk in rows:
        y = _TOP + index[(node, chunk)] * _PITCH
        if node < 0:
            label = f"ranks {chunk * columns}–{chunk * columns + columns - 1}"
        elif per_node > MAX_COLUMNS:
            label = f"node {node}, GPUs {chunk * columns}–{chunk * columns + columns - 1}"
        else:
            label = f"node {node}"
        parts.append(f'<text x="0" y="{y + 14}">{label}</text>')
    for rank, (key, column, label) in enumerate(place):
        x = _LABEL + column * _PITCH
        y = _TOP + index[key] * _PITCH
        parts.append(
            f'<rect class="rank" x="{x}" y="{y}" width="{_CELL}" height="{_CELL}" '
            f'data-rank="{rank}"><title>{label}</title></rect>'
        )
        if numbered:
            parts.append(
                f'<text class="n" x="{x + _CELL / 2}" y="{y + 13}" '
                f'text-anchor="middle">{rank}</text>'
            )
    return parts, _LABEL + columns * _PITCH, _TOP + len(rows) * _PITCH


def _split_table(split: Mapping[str, Any] | None) -> str:
    """An engine's layers per pipeline rank (the plan's ``pipeline_split``, as
    ``explain SPEC --model M --json`` prints it): a row per listed rank, the ranks left out
    counted; "" without one (p = 1, or no model)."""
    if not split:
        return ""
    where = "; virtual stage i runs on rank i mod p" if split["vpp"] > 1 else ""
    rows: list[str] = []
    previous = -1
    for r in split["ranks"]:
        if r["rank"] != previous + 1:
            rows.append(f'<tr><td colspan="4">… ({r["rank"] - previous - 1:,} more)</td></tr>')
        previous = r["rank"]
        stages = ", ".join(f"{s}: {n}" for s, n in zip(r["stages"], r["stage_layers"], strict=True))
        if r["stages_omitted"]:
            stages += f", … ({r['stages_omitted']:,} more)"
        holds = " + ".join(
            name
            for name, on in (("embedding", r["embedding"]), ("output layer", r["output"]))
            if on
        )
        layers = f"{r['layers']:,} of {split['layers']:,}"
        rows.append(
            f'<tr class="stage" data-rank="{h(r["rank"])}" data-layers="{h(r["layers"])}">'
            f"<td>{h(r['rank'])}</td><td>{h(layers)}</td><td>{h(stages)}</td>"
            f"<td>{h(holds)}</td></tr>"
        )
    return (
        f'<table class="split"><caption>Layers per pipeline rank ({h(split["rule"])}{where}); '
        "pipeline rank r is the r-th rank of each pp group</caption>"
        "<tr><th>pipeline rank</th><th>layers</th><th>virtual stage: layers</th>"
        "<th>also holds</th></tr>" + "".join(rows) + "</table>"
    )


def _groups_section(plan: Mapping[str, Any], groups: Sequence[EngineGroups]) -> str:
    per_node = plan["cluster"]["n_gpus_per_node"]
    if not groups:
        return "<p>No training engine: no rank groups.</p>"
    out: list[str] = [
        "<p>Each training engine's Megatron rank groups (order "
        f"<code>{h(groups[0].to_dict()['order'])}</code>, the first name varies fastest) "
        "over its GPUs, one kind at a time; hover a GPU for its group's ranks. The groups "
        "are those <code>areal-alloc explain SPEC --json</code> lists.</p>"
    ]
    for index, engine in enumerate(groups):
        cut = (
            f"; ranks 0–{engine.drawn - 1:,} of {engine.world:,} drawn"
            if engine.drawn < engine.world
            else ""
        )
        out.append(
            f'<div class="groups" data-engine="{h(engine.key)}" data-index="{index}">'
            f'<h3><span class="mono">{h(engine.key)} {h(engine.spec)}</span> '
            f"({engine.world:,} ranks{cut})</h3>"
        )
        if engine.refused:
            out.append(
                f'<p class="bad">{h(engine.refused)}</p>{_split_table(engine.pipeline_split)}</div>'
            )
            continue
        if not engine.kinds:
            out.append("<p>Every group has one rank (a single GPU).</p></div>")
            continue
        labels = []
        for n, (kind, info) in enumerate(engine.kinds.items()):
            part = f"{info['part']} " if engine.hybrid else ""
            checked = " checked" if n == 0 else ""
            labels.append(
                f'<label><input type="radio" class="kind" name="kind-{index}" value="{kind}" '
                f'data-index="{index}"{checked}> {part}{kind}: {info["count"]:,} '
                f"group{'s' if info['count'] != 1 else ''} of "
                f"{info['size']:,}</label>"
            )
        out.append("<fieldset>" + "".join(labels) + "</fieldset>")
        cells, width, height = _rank_cells(engine, per_node)
        out.append(
            f'<svg class="ranks" data-index="{index}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="rank groups">'
            + "".join(cells)
            + "</svg>"
        )
        if any(not info["complete"] for info in engine.kinds.values()):
            out.append(
                f'<p class="note">Past {MAX_DRAWN_RANKS:,} ranks only the drawn part of each '
                f"group is kept here; every group: "
                f"<code>areal-alloc explain {h(engine.spec)} --json</code>.</p>"
            )
        out.append(_split_table(engine.pipeline_split) + "</div>")
    return "".join(out)


# --- memory --------------------------------------------------------------------------


def _memory_section(plan: Mapping[str, Any]) -> str:
    engines = [e for e in plan["engines"] if e.get("memory") or e.get("not_estimated")]
    if not engines:
        return (
            "<p>No memory estimate: the config names no model (or <code>on_memory=off</code>).</p>"
        )
    gpu, capacity = plan["cluster"].get("gpu"), plan["cluster"].get("gpu_memory")
    named = f" ({h(gpu)}, {h(gib(capacity))})" if gpu and capacity else ""
    out = [
        f"<p>Memory per GPU, term by term, against the GPU's capacity{named}; "
        "hover a term for its formula.</p>"
    ]
    for e in engines:
        memory = e.get("memory")
        if not memory:
            out.append(
                f'<h3 class="mono">{h(e["key"])}</h3><p class="note">not estimated: '
                f"{h(e['not_estimated'])}</p>"
            )
            continue
        out.append(_memory_bar(e, memory))
    return "".join(out)


#: the CSS class of each verdict (estimate.margin)
_VERDICT_CLASS = {"at the edge": "edge", "does not fit": "bad"}


def _memory_bar(engine: Mapping[str, Any], memory: Mapping[str, Any]) -> str:
    terms = [t for t in memory["terms"] if t["bytes"] > 0]
    total, capacity = memory["total"], memory.get("capacity")
    itemised = sum(t["bytes"] for t in terms)
    segments = [(t["name"], t["bytes"], t["formula"]) for t in terms]
    if total > itemised:
        segments.append(
            (
                "claimed",
                total - itemised,
                "claimed up front and not itemised: the server's share of the GPU "
                "(its memory fraction) beyond the terms",
            )
        )
    scale_to = max(capacity or 0, total, itemised, 1)
    judged = memory.get("verdict")  # estimate.margin: fits, at the edge, does not fit
    verdict = {
        "fits": "fits",
        "at the edge": "AT THE EDGE (within the estimate's measured error)",
        "does not fit": "DOES NOT FIT",
    }.get(str(judged), "no GPU named")
    head = f"total {gib(total)}" + (f" of {gib(capacity)}" if capacity else "")
    phase = memory.get("phase")
    peak = f"; its peak is the {h(phase)} phase" if isinstance(phase, str) and phase else ""
    phases = memory.get("phases")
    parts = [
        f'<div class="memory" data-engine="{h(engine["key"])}" data-total="{total}" '
        f'data-capacity="{capacity if capacity is not None else ""}">'
        f'<h3><span class="mono">{h(engine["key"])} {h(engine["backend"])}</span>: {h(head)}, '
        f'<span class="{_VERDICT_CLASS.get(str(judged), "")}">{verdict}</span>{peak}</h3>'
        f'<svg width="{_BAR_WIDTH + 130}" height="34">'
    ]
    x = 0.0
    for name, size, formula in segments:
        w = size / scale_to * _BAR_WIDTH
        parts.append(
            f'<rect class="term" x="{x:.2f}" y="4" width="{w:.2f}" height="22" '
            f'fill="{TERM_COLOURS.get(name, "#999")}" data-name="{h(name)}" data-bytes="{size}">'
            f"<title>{h(name)} {h(gib(size))}: {h(formula)}</title></rect>"
        )
        x += w
    if capacity:
        cx = capacity / scale_to * _BAR_WIDTH
        parts.append(
            f'<line x1="{cx:.2f}" x2="{cx:.2f}" y1="0" y2="30" stroke="#000" stroke-width="2">'
            f"<title>capacity {h(gib(capacity))}</title></line>"
            f'<text x="{cx + 4:.2f}" y="19">capacity {h(gib(capacity))}</text>'
        )
    parts.append("</svg>")
    parts.append(
        '<ul class="legend">'
        + "".join(
            f"<li>{_swatch(TERM_COLOURS.get(name, '#999'))}{h(name)} {h(gib(size))} "
            f'<span class="note">{h(formula)}</span></li>'
            for name, size, formula in segments
        )
        + "</ul>"
    )
    if isinstance(phases, dict) and phases:
        listed = ", ".join(f"{name} {gib(size)}" for name, size in phases.items())
        parts.append(
            f'<p class="note">per phase: {h(listed)}; the bar is the peak phase\'s terms</p>'
        )
    kv = engine.get("kv_cache")
    if kv:
        line = f"KV cache: {kv['bytes_per_token']:,} B/token per GPU = {kv['formula']}"
        if kv.get("tokens") is not None:
            line += f"; {kv['tokens']:,} tokens = {kv['sequences']:,} × {kv['sequence_length']:,}"
        parts.append(f'<p class="note">{h(line)}</p>')
    parts.append("</div>")
    return "".join(parts)


# --- the RL step ---------------------------------------------------------------------


def _nice_step(span: float) -> float:
    raw = span / 8
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power  # pragma: no cover - the loop always returns


def _engine_title(key: str, pace: Mapping[str, Any]) -> str:
    lines = [f"{key} {seconds(pace['seconds_per_step'])}: {pace.get('what', '')}"]
    for term in pace.get("terms", []):
        hidden = " (not on the path)" if term.get("hidden") else ""
        lines.append(f"{term['name']} {seconds(term['seconds'])}{hidden}: {term['formula']}")
    return "\n".join(lines)


def _timeline_section(plan: Mapping[str, Any], colours: Mapping[str, str]) -> str:
    from areal_alloc.estimate.rl_step import ASYNCHRONOUS, COLOCATED

    pace = plan.get("pace")
    if not pace:
        return (
            "<p>No RL-step estimate: the config names no model, or the GPU's speeds are "
            "not known.</p>"
        )
    mode = pace["mode"]
    generate, train = pace["generate_seconds"], pace["train_seconds"]
    update, switch = pace["update_seconds"], pace["switch_seconds"]
    step = pace["step_seconds"]
    engines = pace["engines"]
    bars: list[tuple[int, float, float, str, str, str]] = []  # lane, start, length, …
    lanes = ["rollout", "training", "update"]
    if generate:
        rollout = engines.get("rollout")
        title = _engine_title("rollout", rollout) if rollout else "generation"
        bars.append((0, 0.0, generate, "generation", title, "rollout"))
    cursor = 0.0 if mode == ASYNCHRONOUS else generate
    for key, engine in engines.items():
        if key == "rollout":
            continue
        bars.append((1, cursor, engine["seconds_per_step"], key, _engine_title(key, engine), key))
        cursor += engine["seconds_per_step"]
    cursor = max(generate, train) if mode == ASYNCHRONOUS else generate + train
    terms = pace.get("step_terms") or []
    if not terms and (update or switch):
        terms = [{"name": "weight update", "seconds": update + switch, "formula": ""}]
    for term in terms:
        bars.append(
            (
                2,
                cursor,
                term["seconds"],
                term["name"],
                f"{term['name']} {seconds(term['seconds'])}: {term['formula']}",
                "update",
            )
        )
        cursor += term["seconds"]
    span = max(step, cursor, 1e-9)
    width = _BAR_WIDTH
    scale = width / span
    tick = _nice_step(span)
    parts = [
        f'<svg class="timeline" width="{_LABEL + width + 40}" height="{30 + len(lanes) * 30 + 30}" '
        f'data-step="{step}" data-mode="{h(mode)}">'
    ]
    for i, name in enumerate(lanes):
        parts.append(f'<text x="0" y="{30 + i * 30 + 16}">{name}</text>')
    bottom = 30 + len(lanes) * 30
    for n in range(int(span / tick * 1.0001) + 1):
        x = _LABEL + n * tick * scale
        parts.append(
            f'<line x1="{x:.2f}" x2="{x:.2f}" y1="24" y2="{bottom}" stroke="#ddd"/>'
            f'<text x="{x:.2f}" y="{bottom + 14}" text-anchor="middle">{n * tick:.4g} s</text>'
        )
    for lane, start, length, label, title, kind in bars:
        fill = colours.get(kind, "#AA3377")
        x, w = _LABEL + start * scale, max(length * scale, 1.0)
        y = 30 + lane * 30
        parts.append(
            f'<rect class="bar" x="{x:.2f}" y="{y}" width="{w:.2f}" height="22" fill="{fill}" '
            f'data-name="{h(label)}" data-start="{start}" data-seconds="{length}">'
            f"<title>{h(title)}</title></rect>"
        )
        text = f"{h(label)} {h(seconds(length))}"
        if w > 7 * len(text):  # a short bar is named in the list below the timeline
            parts.append(f'<text x="{x + 4:.2f}" y="{y + 15}" style="fill:#fff">{text}</text>')
    sx = _LABEL + step * scale
    parts.append(
        f'<line x1="{sx:.2f}" x2="{sx:.2f}" y1="14" y2="{bottom}" stroke="#000" stroke-width="2">'
        f"<title>step {h(seconds(step))} ({h(mode)})</title></line>"
        f'<text x="{sx:.2f}" y="12" text-anchor="end">step {h(seconds(step))}</text>'
    )
    parts.append("</svg>")
    if mode == ASYNCHRONOUS:
        how = (
            "asynchronous: the rollout generates the next steps' sequences while training "
            "runs; a step takes the slower side plus the weight update"
        )
    elif mode == COLOCATED:
        how = (
            "colocated: rollout and training share the GPUs and take turns; a step takes "
            "generation + training + the weight update + offload/onload between them"
        )
    else:
        how = "synchronous: a step takes generation + training + the weight update"
    listed = " · ".join(f"{h(label)} {h(seconds(length))}" for _, _, length, label, _, _ in bars)
    return (
        f"<p>One RL step of {pace['sequences_per_step']:,} sequences, {h(how)}; the training "
        "engines run one after another. Hover a bar for its terms and formulas.</p>"
        + "".join(parts)
        + f'<p class="note">{listed} · step {h(seconds(step))} ({h(mode)})</p>'
        + f"<p>{h(pace['advice'])}</p>"
        + (f'<p class="note">host time: {h(pace["host"])}</p>' if pace.get("host") else "")
    )


# --- the page ------------------------------------------------------------------------


def _engine_table(plan: Mapping[str, Any]) -> str:
    rows = [
        "<tr><th>engine</th><th>backend</th><th>world</th><th>instances</th>"
        "<th>scheduling</th><th>GPUs</th><th>note</th></tr>"
    ]
    for e in plan["engines"]:
        s = e["scheduling"]
        scheduling = f"colocated → {s['target']}" if s["type"] == "colocation" else "separate"
        instances = f"{e['instances']:,} × {e['instance_size']:,}" if e.get("instances") else "-"
        active = "" if e["active"] else " (inactive)"
        rows.append(
            f'<tr data-engine="{h(e["key"])}"><td class="mono">{h(e["key"])}{active}</td>'
            f'<td class="mono">{h(e["backend"])}</td><td>{e["world_size"]:,}</td>'
            f"<td>{instances}</td><td>{h(scheduling)}</td><td>{e['gpus']:,}</td>"
            f"<td>{h(e.get('note') or '')}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _host_section(host: Mapping[str, Any]) -> str:
    """Host memory and CPUs per node, term by term (the plan's ``host``:
    areal_alloc.estimate.host), one row per term of each group of alike nodes."""
    figures = []
    if host.get("memory") is not None:
        figures.append(f"{gib(host['memory'])} {host['memory_origin']}")
    if host.get("cpus") is not None:
        figures.append(f"{host['cpus']:,} CPUs (from {host['cpus_source']})")
    if host.get("ray_memory") is not None:
        figures.append(f"Ray's memory resource {gib(host['ray_memory'])}")
    scheduler = host.get("scheduler") or "not set"
    rows = ["<tr><th>nodes</th><th>term</th><th>amount</th><th>formula</th></tr>"]
    for group in host["nodes"]:
        first, last = group["first"], group["last"]
        where = f"{first:,}" if first == last else f"{first:,}–{last:,}"
        for term in group["terms"]:
            amount = f"{term['amount']:,} CPUs" if term["kind"] == "cpus" else gib(term["amount"])
            phases = f" [{', '.join(term['phases'])}]" if 0 < len(term["phases"]) < 3 else ""
            rows.append(
                f'<tr><td>{where}</td><td class="mono">{h(term["name"])}</td>'
                f"<td>{h(amount)}</td><td>{h(term['formula'] + phases)}</td></tr>"
            )
    return (
        f"<p>scheduler.type {h(scheduler)}; "
        + h("; ".join(figures) or "no host figure given")
        + ". Over a given host the plan is refused; over this machine's (detected) or "
        "within 10 % of the host, warned of.</p><table>" + "".join(rows) + "</table>"
    )


def _notes_section(plan: Mapping[str, Any]) -> str:
    items: list[str] = []
    for text in plan["assumptions"]:
        items.append(f"<li>assumed: {h(text)}</li>")
    for text in plan["warnings"]:
        items.append(f'<li class="bad">warning: {h(text)}</li>')
    pace = plan.get("pace") or {}
    for text in pace.get("assumptions", []):
        items.append(f"<li>pace: {h(text)}</li>")
    if pace.get("calibration"):
        items.append(f"<li>calibrated: {h(pace['calibration'])}</li>")
    for e in plan["engines"]:
        for text in (e.get("memory") or {}).get("assumptions", []):
            items.append(f"<li>{h(e['key'])} memory: {h(text)}</li>")
    if not items:
        return "<p>Nothing assumed, no warnings.</p>"
    return "<ul>" + "".join(items) + "</ul>"


#: GPU runs of one placement embedded at most: an inference engine whose instances do
#: not divide the node is one run per node (131,072 nodes: 9 MB of JSON); the page keeps
#: the first ones and says how many it left out.
MAX_EMBEDDED_RUNS = 1000


def bounded_json(plan: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The plan's JSON as embedded: each placement's ``gpu_ranges`` cut to
    :data:`MAX_EMBEDDED_RUNS` (with ``gpu_ranges_omitted``); and how many runs were cut."""
    out = dict(plan)
    cut = 0
    placements = []
    for placement in plan["placements"]:
        runs = placement["gpu_ranges"]
        if len(runs) > MAX_EMBEDDED_RUNS:
            cut += len(runs) - MAX_EMBEDDED_RUNS
            placement = {
                **placement,
                "gpu_ranges": runs[:MAX_EMBEDDED_RUNS],
                "gpu_ranges_omitted": len(runs) - MAX_EMBEDDED_RUNS,
            }
        placements.append(placement)
    out["placements"] = placements
    return out, cut


def _section(ident: str, heading: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{heading}</h2>{body}</section>'


def render_report(plan: Mapping[str, Any], title: str = "allocation plan") -> str:
    """The report of one plan's JSON dict (``Plan.to_dict()``) as one HTML page."""
    cluster = plan["cluster"]
    colours = _colours(plan)
    groups = engine_groups(plan)
    if cluster["cpu_only"]:
        summary = "CPU-only run (cluster.n_gpus_per_node=0): no GPU map"
        cluster_html = f"<p>{summary}.</p>"
    else:
        free = cluster["capacity"] - plan["total_gpus"]
        summary = (
            f"{cluster['n_nodes']:,} node{'s' if cluster['n_nodes'] != 1 else ''} × "
            f"{cluster['n_gpus_per_node']:,} GPUs = {cluster['capacity']:,} GPUs; "
            f"{plan['total_gpus']:,} used, {free:,} free"
        )
        cluster_html = (
            "<p>One row per node (alike neighbouring nodes share a row), one cell per GPU; "
            "each engine in its colour, colocated engines striped, inference instances "
            "outlined, free GPUs dotted. Hover a cell for its engine.</p>"
            + _cluster_svg(plan, colours)
            + _legend(plan, colours)
        )
    gpu = f"; GPU {cluster['gpu']}" if cluster.get("gpu") else ""
    embedded, cut = bounded_json(plan)
    shortened = (
        f" Here each placement keeps its first {MAX_EMBEDDED_RUNS:,} GPU runs "
        f"({cut:,} left out, counted in <code>gpu_ranges_omitted</code>); "
        "<code>output=json</code> lists them all."
        if cut
        else ""
    )
    body = [
        f"<h1>{h(title)}</h1><p>{h(summary)}{h(gpu)}</p>",
        _engine_table(plan),
        _section("cluster", "Cluster", cluster_html),
        _section("groups", "Rank groups", _groups_section(plan, groups)),
        _section("memory", "Memory per GPU", _memory_section(plan)),
        _section("rl-step", "RL step", _timeline_section(plan, colours)),
        *(
            [_section("host", "Host memory and CPUs per node", _host_section(host))]
            if (host := plan.get("host")) and host.get("nodes")
            else []
        ),
        _section("notes", "Assumptions and warnings", _notes_section(plan)),
        _section(
            "numbers",
            "The numbers",
            "<p>This page is drawn from the plan's JSON, embedded here exactly as "
            "<code>areal-alloc output=json</code> and <code>check --json</code> print it "
            "(<code>script#plan-json</code>), and the rank groups as <code>explain --json</code> "
            f"lists them (<code>script#rank-groups</code>).{shortened}</p>"
            '<details><summary>the plan as JSON</summary><pre id="json-view"></pre></details>',
        ),
        f'<script type="application/json" id="plan-json">{embedded_json(embedded)}</script>',
        '<script type="application/json" id="rank-groups">'
        f"{embedded_json([g.to_dict() for g in groups])}</script>",
        f"<script>{_SCRIPT % json.dumps(list(GROUP_COLOURS))}</script>",
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>areal-alloc: {h(title)}</title><style>{_CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
