"""HTML pieces the dashboards share: tables, swatches, formulas with their vLLM lines.

Tables are real HTML tables (no text columns that wrap mid-word); a row can be
highlighted (``hs-crash`` rows stay visible when the table scrolls).
"""

from __future__ import annotations

import re

from ..text import chart_data as cd
from ..model.reproduction import ASSUMPTIONS
from .digest import summary_html  # noqa: F401 (the one digest writer; dashboards import it here)
from .svg import PALETTE, esc

CSS = """<style>
.hisparse-dashboard .hs-table{border-collapse:collapse;font-size:13px;margin:4px 0}
.hisparse-dashboard{max-width:100%;overflow-wrap:break-word}
.hisparse-dashboard .hs-table th{text-align:left;padding:3px 6px;border-bottom:1px solid #888;
 background:#fafafa;position:sticky;top:0;z-index:1}
.hisparse-dashboard .hs-table td{padding:3px 6px;vertical-align:top;word-break:normal;
 overflow-wrap:normal;border-bottom:1px solid #eee;text-align:left}
.hisparse-dashboard .hs-table code.hs-error-text{display:inline-block;min-width:16em;
 overflow-wrap:break-word}
.hisparse-dashboard .hs-table td:first-child{white-space:nowrap}
.hisparse-dashboard .hs-table .hs-route{white-space:nowrap}
.hisparse-dashboard .hs-table tr.hs-crash td{background:#fde0dd;position:sticky;bottom:0}
.hisparse-dashboard .hs-table tr.hs-selected td{background:#fff3b0}
.hisparse-dashboard .hs-scroll{max-height:300px;overflow:auto;display:inline-block;
 max-width:100%}
.hisparse-dashboard .hs-big{font-size:15px;margin:6px 0}
.hisparse-dashboard .hs-note{color:#444;margin:4px 0;max-width:900px}
.hisparse-dashboard .hs-cite{color:#555;overflow-wrap:break-word}
.hisparse-dashboard .hs-versions{table-layout:fixed;width:100%}
.hisparse-dashboard .hs-versions th:first-child{width:11em}
.hisparse-dashboard .hs-versions td{overflow-wrap:anywhere}
.hisparse-dashboard .hs-versions td:first-child{white-space:normal}
.hisparse-dashboard code{white-space:pre-wrap;overflow-wrap:break-word}
.hisparse-dashboard details.hs-fold>summary{cursor:pointer;color:#444}
.hisparse-dashboard .hs-headline{font-size:17px;margin:8px 0;max-width:900px}
.hisparse-dashboard .hs-head{font-size:16px;margin:6px 0 10px;padding:6px 10px;max-width:900px;
 border:1px solid #ddd;border-radius:4px;background:#fafafa}
.hisparse-dashboard .hs-buffers-box{margin:6px 0}
.hisparse-dashboard.hs-stale .hs-numbers-box{opacity:.4;filter:grayscale(1)}
.hisparse-dashboard .hs-stale-risk{opacity:.4;filter:grayscale(1)}
</style>"""


def table(headers, rows, *, raw: bool = False, row_classes=None, cls: str = "hs-table") -> str:
    """An HTML table; cells are escaped unless ``raw``; ``row_classes[i]`` goes on row i."""
    th = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        klass = (row_classes[i] if row_classes else "") or ""
        tds = "".join(f"<td>{c if raw else esc(c)}</td>" for c in row)
        body.append(f"<tr class='{klass}'>{tds}</tr>" if klass else f"<tr>{tds}</tr>")
    return (f"<table class='{cls}'><thead><tr>{th}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def swatch(key: str, text=None) -> str:
    """A coloured square and a text: the same colour as the key's cells in the charts."""
    return (f"<span style='display:inline-block;width:11px;height:11px;margin-right:4px;"
            f"background:{PALETTE[key]};border-radius:2px'></span>"
            f"{esc(key if text is None else text)}")


def cite_html(cite) -> str:
    """``vllm/<path>:<lines> `symbol``` with the symbol as code."""
    lines = f"{cite.start}" if cite.start == cite.end else f"{cite.start}-{cite.end}"
    path = esc(cite.path).replace("/", "/<wbr>")  # a long path may wrap at a "/", never mid-name
    return (f"<span class='hs-cite'>vllm/<wbr>{path}:{lines} "
            f"<code>{esc(cite.symbol)}</code></span>")


def formulas_html(pred) -> str:
    """B, q, C and W of a prediction: formula = value, and the vLLM line (folded away)."""
    rows = [[f"<code>{esc(text)}</code>", cite_html(cite)]
            for _, text, cite in cd.formulas(pred)]
    return fold("how B, q, C and W are computed, and where vLLM does each (file:line)",
                table(["formula", f"where vLLM {pred.plan.rules.vllm_version} does it"], rows,
                      raw=True, cls="hs-table hs-formulas"))


def outcome_html(text: str | None, ran: bool = True, why: str = "") -> str:
    """ok / the crash's stop and capacity / not run (``why``), with its colour."""
    if not ran or text is None:
        return swatch(cd.NOT_RUN, f"not run{why}")
    if text == "ok":
        return swatch("ok", "ok")
    key = cd.outcome_key(text)
    short = text.split("capacity: ")[-1].rstrip(".") if key == cd.CRASH else text[-80:]
    return swatch(key, f"crash ({short})" if key == cd.CRASH else f"failed: {short}")


BATCH_HEADERS = ["phase", "batch", "tokens", "requests", "decode tokens", "graph mode",
                 "routed n", "route", "error"]


def batch_rows(batches) -> tuple[list[list[str]], list[str]]:
    """Rows of :data:`BATCH_HEADERS` and their classes (``hs-crash`` on the batch that raises)."""
    rows, classes = [], []
    for b in batches:
        key = cd.CRASH if b.error else (b.route or cd.NOT_ROUTED)
        rows.append([esc(b.phase), esc(b.label), str(b.num_tokens), str(b.num_reqs),
                     str(b.num_decode_tokens), esc(b.cudagraph_mode),
                     str(b.routed) if b.routed else "–",
                     f"<span class='hs-route'>{swatch(key, b.route or 'not routed')}</span>",
                     f"<code class='hs-error-text'>{esc(b.error)}</code>" if b.error else ""])
        classes.append("hs-crash" if b.error else "")
    return rows, classes


CHUNK = re.compile(r"^(.*) chunk (\d+)/(\d+)$")  # "prefill chunk 3/100"


def chunk_groups(labels: list[str], keys: list) -> list[tuple]:
    """Batches (their ``labels`` and ``keys``) grouped where consecutive ones are chunks of one
    prompt ("prefill chunk 3/100", numbers in a row) with equal keys: ``[(start, end, label,
    first, last, of)]`` (``end`` exclusive; a batch that is no chunk: its own group, ``first``
    None)."""
    out: list[list] = []
    for i, (text, key) in enumerate(zip(labels, keys)):
        m = CHUNK.match(text)
        g = out[-1] if out else None
        if m and g and g[3] is not None and (g[2], g[5]) == (m[1], m[3]) \
                and int(m[2]) == g[4] + 1 and keys[g[0]] == key:
            g[1], g[4] = i + 1, int(m[2])
        else:
            out.append([i, i + 1, m[1], int(m[2]), int(m[2]), m[3]] if m
                       else [i, i + 1, text, None, None, None])
    return [tuple(g) for g in out]


def grouped_batch_rows(batches) -> tuple[list[list[str]], list[str]]:
    """:func:`batch_rows` with consecutive chunks of one prompt whose rows are alike but for
    the chunk number as one row ("prefill chunks 1–99/100 (each)"): at B 2 a 200-token prompt
    is one row for its 100 chunks, not 100 rows."""
    rows, classes = batch_rows(batches)
    keys = [(tuple(row[2:]), cls) for row, cls in zip(rows, classes)]
    out, out_classes = [], []
    for start, end, label, first, last, of in chunk_groups([b.label for b in batches], keys):
        row = list(rows[start])
        if end - start > 1:
            row[1] = esc(f"{label} chunks {first}–{last}/{of} (each)")
        out.append(row)
        out_classes.append(classes[start])
    return out, out_classes


def advice_list_html(advice: list[dict], controls=None) -> str:
    """The advice as the command line orders it (``report.advice_lines``): the fix first, then
    by cost, each with what it costs; changes that cripple the engine apart, not advised.

    With ``controls`` (the dashboard's control names), a change of a knob that has no control
    there says where to make it (notebook 5, or the command line).
    """
    def item(a: dict) -> str:
        change = ", ".join(f"{k} = {v}" for k, v in a["change"].items())
        missing = [k for k in a["change"] if controls is not None and k not in controls]
        where = (f" <i class='hs-elsewhere'>({esc(', '.join(missing))} has no control here: "
                 f"set it in notebook 5, or with <code>hisparse simulate</code>)"
                 f"</i>" if missing else "")
        return (f"<li><b>{esc(change)}</b>{where}: {esc(a['why'])}<br>"
                f"<span class='hs-cost'>cost: {esc(a['cost']['text'])}</span></li>")
    usable = "".join(item(a) for a in advice if not a["cost"]["cripples"])
    crippling = "".join(item(a) for a in advice if a["cost"]["cripples"])
    return (f"<ol class='hs-advice'>{usable or '<li>none that keeps the engine usable</li>'}</ol>"
            + (f"<div class='hs-note'>also avoid it, but <b>cripple the engine</b> (not "
               f"advised):</div><ul class='hs-advice hs-crippling'>{crippling}</ul>"
               if crippling else ""))


def assumptions_html(assumptions=ASSUMPTIONS) -> str:
    """What every prediction on the screen assumes (``reproduction.ASSUMPTIONS``, or the
    dashboard's own list)."""
    items = "".join(f"<li>{esc(a)}</li>" for a in assumptions)
    return (f"<details class='hs-assumptions'><summary>Assumptions behind these numbers"
            f"</summary><ul>{items}</ul></details>")


def assumption_lists_html(first: tuple, then_title: str, then: tuple) -> str:
    """Two lists of assumptions as HTML (the page wraps them between words): ``first``, then
    under ``then_title`` those of ``then`` that ``first`` does not hold."""
    rest = [a for a in then if a not in first]
    return (CSS + "<div class='hisparse-dashboard hs-assumption-lists'><ul>"
            + "".join(f"<li>{esc(a)}</li>" for a in first) + f"</ul><p>{esc(then_title)}</p><ul>"
            + "".join(f"<li>{esc(a)}</li>" for a in rest) + "</ul></div>")


def fold(summary: str, body: str) -> str:
    """``body`` folded away under a one-line ``summary`` (HTML), one click to open."""
    return f"<details class='hs-fold'><summary>{summary}</summary>{body}</details>"


def static_html(body: str) -> str:
    """HTML shown once (not a dashboard), with the dashboards' styles."""
    return f"{CSS}<div class='hisparse-dashboard hs-static'>{body}</div>"
