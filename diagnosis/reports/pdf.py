"""The fairness report as a PDF: the page's content (summary, tenant table, the productive
verdict and table, the three charts, waits by size class, definitions) drawn with ReportLab, in
this process.

Why ReportLab (docs/fairness.md): it is a pip package with no browser and nothing downloaded at
run time, writes vector charts of its own (``reportlab.graphics``) so the PDF needs neither
matplotlib nor plotly's kaleido + Chromium, embeds its TrueType font (so any reader shows the
same file and text extraction works), and lays out tables that repeat their header across pages.

The font (docs/fairness.md, "PDF"): WenQuanYi Micro Hei from the Debian package
``fonts-wqy-microhei`` (in .ci/run's APT_PACKAGES and the Docker image), embedded as a subset: it
has CJK, so Chinese tenant names print, and the Greek and math signs of the definitions (Σ, ÷,
≤). Nothing is downloaded at run time. Where the package is missing, ReportLab's own Bitstream
Vera is used instead (Latin only: CJK prints as boxes), the log and ``manage.py check`` say so
(gpuobs.W041), and the next PDF looks for the font again. A 50-tenant
report renders in well under a second (bench/reports.py).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence

import reportlab
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from reportlab.graphics.charts.barcharts import HorizontalBarChart, VerticalBarChart
from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.lineplots import LinePlot
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import (
    CondPageBreak,
    KeepTogether,
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)
from reportlab.platypus.flowables import Flowable

from diagnosis.charts.figures import ACCENT, ACTIVITY, INK, MUTED
from diagnosis.charts.gpu_hours import BUCKET_LABELS
from diagnosis.core.fairness import SIZE_CLASSES, TENANT_BUCKETS, TenantRow
from diagnosis.reports.checks import CJK_FONT_FILE, CJK_FONT_PACKAGE
from diagnosis.reports.fairness_report import FairnessReportData
from diagnosis.reports.period import minute_stamp

logger = logging.getLogger(__name__)

FONT = "GpuobsText"
FONT_BOLD = "GpuobsText-Bold"
PAGE = landscape(A4)
MARGIN = 14 * mm
WIDTH = PAGE[0] - 2 * MARGIN
SMALL_MULTIPLES_PER_ROW = 3
TENANTS_PER_BAR_CHART = 25
BUCKET_COLOURS = {
    "unavailable": colors.HexColor("#9aa4b2"),
    "held-by-partial-gang": colors.HexColor("#d08c2e"),
    "allocated-hung": colors.HexColor("#7b241c"),
    "allocated-idle": colors.HexColor("#c0392b"),
    "allocated-data-starved": colors.HexColor("#8e44ad"),
    "allocated-busy": colors.HexColor(ACCENT),
}


_registered: list[str] = []  # the CJK font file once registered; a fallback is never kept


def _register_fonts() -> str:
    """Register the PDF's text font as ``FONT`` and ``FONT_BOLD``; answers the file used. The
    CJK font has no bold face: headings use the same one, larger. Only the CJK font is kept
    registered: without it each PDF looks again, so installing the package needs no restart
    (``manage.py check`` warns while it is missing, diagnosis/reports/checks.py)."""
    if _registered:
        return _registered[0]
    if os.path.isfile(CJK_FONT_FILE):
        pdfmetrics.registerFont(TTFont(FONT, CJK_FONT_FILE, subfontIndex=0))
        pdfmetrics.registerFont(TTFont(FONT_BOLD, CJK_FONT_FILE, subfontIndex=0))
        _registered.append(CJK_FONT_FILE)
        return CJK_FONT_FILE
    logger.warning(
        "%s not found (apt-get install %s): the fairness PDF falls back to Bitstream Vera, "
        "which has no CJK glyphs",
        CJK_FONT_FILE,
        CJK_FONT_PACKAGE,
    )
    folder = os.path.join(os.path.dirname(reportlab.__file__), "fonts")
    pdfmetrics.registerFont(TTFont(FONT, os.path.join(folder, "Vera.ttf")))
    pdfmetrics.registerFont(TTFont(FONT_BOLD, os.path.join(folder, "VeraBd.ttf")))
    return os.path.join(folder, "Vera.ttf")


def _styles() -> dict[str, ParagraphStyle]:
    base = ParagraphStyle("body", fontName=FONT, fontSize=9, leading=12, textColor=INK)
    return {
        "body": base,
        "muted": ParagraphStyle("muted", parent=base, textColor=MUTED, fontSize=8, leading=10),
        "title": ParagraphStyle("title", parent=base, fontName=FONT_BOLD, fontSize=18, leading=22),
        "h2": ParagraphStyle(
            "h2", parent=base, fontName=FONT_BOLD, fontSize=12, leading=16, spaceBefore=8
        ),
        "cell": ParagraphStyle("cell", parent=base, fontSize=7.5, leading=9),
        "head": ParagraphStyle(  # never a word cut in two ("Pre-empte d"): a word overflows
            "head",
            parent=base,
            fontName=FONT_BOLD,
            fontSize=7.5,
            leading=9,
            alignment=2,
            splitLongWords=0,
        ),
    }


def _fmt_share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _fmt_hours(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.1f}"  # one decimal for every row of a column, as the page's gpu_hours


def _fmt_wait(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _grid(rows: list[list[object]], widths: Sequence[float], numeric_from: int = 1) -> Table:
    table = Table(rows, colWidths=widths, repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("FONT", (0, 0), (-1, -1), FONT, 7.5),
                ("FONT", (0, 0), (-1, 0), FONT_BOLD, 7.5),
                ("TEXTCOLOR", (0, 0), (-1, -1), colors.HexColor(INK)),
                ("LINEBELOW", (0, 0), (-1, 0), 0.6, colors.HexColor(INK)),
                ("LINEBELOW", (0, 1), (-1, -1), 0.25, colors.HexColor("#e6e9ee")),
                ("ALIGN", (numeric_from, 0), (-1, -1), "RIGHT"),
                ("VALIGN", (0, 0), (-1, -1), "BOTTOM"),
                ("TOPPADDING", (0, 0), (-1, -1), 2),
                ("LEFTPADDING", (0, 0), (-1, -1), 3),
                ("RIGHTPADDING", (0, 0), (-1, -1), 3),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 2),
            ]
        )
    )
    return table


def tenant_table_rows(rows: Sequence[TenantRow]) -> list[list[str]]:
    """Header and one line per tenant, as the page's table shows them."""
    header = [
        _("Tenant"),
        _("Entitlement"),
        _("Fair share"),
        _("Usage"),
        _("Ratio"),
        _("Demand GPU-h"),
        _("Wait p50"),
        _("Wait p95"),
        _("Jobs started"),
        _("Still waiting"),
        _("Starvation"),
        _("Preempted"),
        _("Util"),
        _("MFU"),
        _("Held idle GPU-h"),
    ]
    body = [
        [
            row.tenant,
            _fmt_share(row.entitlement),
            _fmt_share(row.fair_share),
            _fmt_share(row.usage),
            _fmt_ratio(row.ratio),
            _fmt_hours(row.demand_gpu_hours),
            _fmt_wait(row.wait.p50_s),
            _fmt_wait(row.wait.p95_s),
            str(row.wait.started),
            str(row.wait.waiting),
            str(row.starvation_findings),
            str(row.preemptions),
            _fmt_share(row.util),
            _fmt_share(row.mfu),
            _fmt_hours(row.held_idle_gpu_hours),
        ]
        for row in rows
    ]
    return [header, *body]


def productive_table_rows(data: FairnessReportData) -> list[list[str]]:
    """Header and one line per tenant of the page's "Allocated and productive shares" table."""
    header = [
        _("Tenant"),
        _("Ratio, allocated"),
        _("Ratio, productive"),
        _("Ratio, MFU-weighted"),
        _("Productive share"),
        _("Useful GPU-h"),
        _("Partial gangs GPU-h"),
        _("Allocated-idle GPU-h"),
        _("Data-starved GPU-h"),
    ]
    body = [
        [
            p.tenant + (" (" + _("productively starved") + ")" if p.productively_starved else ""),
            _fmt_ratio(p.allocated_ratio),
            _fmt_ratio(p.productive_ratio),
            _fmt_ratio(p.mfu_weighted_ratio),
            _fmt_share(p.productive_share),
            _fmt_hours(p.useful_gpu_hours),
            _fmt_hours(p.partial_gang_gpu_hours),
            _fmt_hours(p.idle_gpu_hours),
            _fmt_hours(p.data_starved_gpu_hours),
        ]
        for p in data.productive.rows
    ]
    return [header, *body]


def cost_table_rows(data: FairnessReportData) -> list[list[str]]:
    """Header and one line per tenant of the "Cost" table, and the total (empty when the
    cluster is not priced: no 0.00 is ever printed then)."""
    if not data.priced:
        return []
    header = [_("Tenant"), _("Allocated GPU-h"), _("Cost"), _("Wasted cost")]
    body = [
        [row.tenant, _fmt_hours(row.allocated_gpu_hours), str(cost.held), str(cost.wasted)]
        for row, cost in data.costs()
        if cost is not None
    ]
    total = data.total_cost()
    if total is not None:
        hours = sum(row.allocated_gpu_hours for row in data.tenants)
        body.append([_("Total"), _fmt_hours(hours), str(total), ""])
    return [header, *body]


def _tenant_grid(rows: list[list[str]], styles: dict[str, ParagraphStyle]) -> Table:
    """A table of a line per tenant: the headers wrap (Paragraphs), the tenant takes 13%."""
    header = [rows[0][0]] + [Paragraph(_esc(h), styles["head"]) for h in rows[0][1:]]
    body = [[_tenant_cell(r[0], styles["cell"]), *r[1:]] for r in rows[1:]]
    columns = len(rows[0]) - 1
    return _grid([header, *body], [WIDTH * 0.13] + [WIDTH * 0.87 / columns] * columns)


def _tenant_cell(name: str, style: ParagraphStyle) -> Paragraph:
    return Paragraph(_esc(name), style)


def _share_chart(data: FairnessReportData, tenant: str, width: float, height: float) -> Drawing:
    """Usage, fair share and entitlement of one tenant over the period (fractions)."""
    frame = data.series[data.series["tenant"] == tenant]
    start = data.period.start.timestamp()
    span_h = max(data.period.seconds / 3600, 1e-9)
    drawing = Drawing(width, height)
    drawing.add(
        String(
            4,
            height - 11,
            tenant[:60],
            fontName=FONT_BOLD,
            fontSize=8,
            fillColor=colors.HexColor(INK),
        )
    )
    plot = LinePlot()
    plot.x, plot.y = 30, 18
    plot.width, plot.height = width - 40, height - 38
    lines = []
    for column in ("usage", "fair_share", "entitlement"):
        points = [
            ((moment.timestamp() - start) / 3600, float(value))
            for moment, value in zip(frame["bin"], frame[column], strict=True)
            if value == value  # not NaN
        ]
        lines.append(points or [(0.0, 0.0)])
    plot.data = lines
    top = max([p[1] for line in lines for p in line] + [0.05])
    plot.yValueAxis.valueMin = 0
    plot.yValueAxis.valueMax = min(1.0, top * 1.15) if top <= 1 else top * 1.15
    plot.yValueAxis.labelTextFormat = lambda v: f"{v:.0%}"
    plot.yValueAxis.labels.fontName = FONT
    plot.yValueAxis.labels.fontSize = 6
    plot.xValueAxis.valueMin = 0
    plot.xValueAxis.valueMax = span_h
    plot.xValueAxis.labels.fontName = FONT
    plot.xValueAxis.labels.fontSize = 6
    unit = 24 if span_h > 72 else 1
    plot.xValueAxis.labelTextFormat = lambda v: f"{v / unit:.0f}{'d' if unit == 24 else 'h'}"
    for index, (colour, dash) in enumerate(((ACCENT, None), (ACTIVITY, (3, 2)), (MUTED, (1, 2)))):
        plot.lines[index].strokeColor = colors.HexColor(colour)
        plot.lines[index].strokeWidth = 1.2
        if dash:
            plot.lines[index].strokeDashArray = dash
    drawing.add(plot)
    return drawing


def _legend(x: float, y: float, pairs: list[tuple[colors.Color, str]]) -> Legend:
    """A one-row legend of ``(colour, label)`` pairs at ``(x, y)``, in the report's small type."""
    legend = Legend()
    legend.x, legend.y = x, y
    legend.alignment = "right"
    legend.columnMaximum = 1
    legend.fontName = FONT
    legend.fontSize = 7
    legend.colorNamePairs = pairs
    return legend


def _share_legend(width: float) -> Drawing:
    drawing = Drawing(width, 14)
    pairs = [
        (colors.HexColor(ACCENT), "usage (allocated ÷ usable)"),
        (colors.HexColor(ACTIVITY), "fair share (water-filled)"),
        (colors.HexColor(MUTED), "entitlement"),
    ]
    drawing.add(_legend(0, 10, pairs))
    return drawing


def _share_charts(data: FairnessReportData) -> list[Flowable]:
    tenants = [row.tenant for row in data.tenants]
    cell_width = WIDTH / SMALL_MULTIPLES_PER_ROW
    rows = []
    for first in range(0, len(tenants), SMALL_MULTIPLES_PER_ROW):
        chunk = tenants[first : first + SMALL_MULTIPLES_PER_ROW]
        cells = [_share_chart(data, t, cell_width - 6, 120) for t in chunk]
        cells += [""] * (SMALL_MULTIPLES_PER_ROW - len(cells))
        rows.append(cells)
    if not rows:
        return []
    table = Table(rows, colWidths=[cell_width] * SMALL_MULTIPLES_PER_ROW)
    table.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP")]))
    return [_share_legend(WIDTH), table]


def _waits_chart(data: FairnessReportData) -> Drawing:
    """p50 and p95 wait (hours) per size class, of the jobs of the tenants shown."""
    drawing = Drawing(WIDTH / 2, 170)
    chart = VerticalBarChart()
    chart.x, chart.y = 40, 30
    chart.width, chart.height = WIDTH / 2 - 60, 120
    p50 = [(data.report.waits[c].p50_s or 0) / 3600 for c in SIZE_CLASSES]
    p95 = [(data.report.waits[c].p95_s or 0) / 3600 for c in SIZE_CLASSES]
    chart.data = [p50, p95]
    chart.categoryAxis.categoryNames = [f"{c} GPU" for c in SIZE_CLASSES]
    chart.categoryAxis.labels.fontName = FONT
    chart.categoryAxis.labels.fontSize = 7
    chart.valueAxis.valueMin = 0
    chart.valueAxis.valueMax = max([*p50, *p95, 0.01]) * 1.15
    chart.valueAxis.labels.fontName = FONT
    chart.valueAxis.labels.fontSize = 7
    chart.valueAxis.labelTextFormat = lambda v: f"{v:.1f} h"
    chart.bars[0].fillColor = colors.HexColor(ACCENT)
    chart.bars[1].fillColor = colors.HexColor(INK)
    drawing.add(chart)
    drawing.add(_legend(40, 165, [(colors.HexColor(ACCENT), "p50"), (colors.HexColor(INK), "p95")]))
    return drawing


def _breakdown_charts(data: FairnessReportData) -> list[Flowable]:
    """GPU-hours each tenant held, by accounting bucket (stacked), 25 tenants per chart."""
    out: list[Flowable] = []
    rows = list(data.tenants)
    for first in range(0, len(rows), TENANTS_PER_BAR_CHART):
        chunk = rows[first : first + TENANTS_PER_BAR_CHART]
        height = 40 + 14 * len(chunk)
        drawing = Drawing(WIDTH, height + 20)
        chart = HorizontalBarChart()
        chart.x, chart.y = 130, 20
        chart.width, chart.height = WIDTH - 160, height - 20
        chart.data = [[row.buckets[b] for row in chunk] for b in TENANT_BUCKETS]
        chart.categoryAxis.style = "stacked"
        chart.categoryAxis.categoryNames = [row.tenant[:28] for row in chunk]
        chart.categoryAxis.reverseDirection = True
        chart.categoryAxis.labels.fontName = FONT
        chart.categoryAxis.labels.fontSize = 7
        chart.valueAxis.valueMin = 0
        top = max([sum(row.buckets.values()) for row in chunk] + [1.0])
        chart.valueAxis.valueMax = top * 1.05
        chart.valueAxis.labels.fontName = FONT
        chart.valueAxis.labels.fontSize = 7
        chart.valueAxis.labelTextFormat = lambda v: f"{v:,.0f}"
        for index, bucket in enumerate(TENANT_BUCKETS):
            chart.bars[index].fillColor = BUCKET_COLOURS[bucket]
            chart.bars[index].strokeWidth = 0
        drawing.add(chart)
        pairs = [(BUCKET_COLOURS[b], _(BUCKET_LABELS[b])) for b in TENANT_BUCKETS]
        legend = _legend(130, height + 16, pairs)
        legend.deltax = 110
        drawing.add(legend)
        out.append(drawing)
    return out


def _waits_table(data: FairnessReportData) -> Table:
    header = [_("Tenant")] + [
        _("%(size)s GPU: jobs (waiting) / p50 / p95") % {"size": c} for c in SIZE_CLASSES
    ]
    body = [
        [row.tenant]
        + [
            f"{row.waits[c].jobs} ({row.waits[c].waiting}) / {_fmt_wait(row.waits[c].p50_s)} / "
            f"{_fmt_wait(row.waits[c].p95_s)}"
            for c in SIZE_CLASSES
        ]
        for row in data.tenants
    ]
    return _grid([header, *body], [WIDTH * 0.2] + [WIDTH * 0.2] * len(SIZE_CLASSES))


def _footer(canvas, document) -> None:
    canvas.saveState()
    canvas.setFont(FONT, 7)
    canvas.setFillColor(colors.HexColor(MUTED))
    canvas.drawString(MARGIN, 8 * mm, document.title)
    canvas.drawRightString(PAGE[0] - MARGIN, 8 * mm, _("page %(n)s") % {"n": document.page})
    canvas.restoreState()


def render_pdf(data: FairnessReportData) -> bytes:
    """The PDF bytes of a report (several pages: the table, the charts, the definitions)."""
    _register_fonts()
    styles = _styles()
    report = data.report
    title = _("Tenant fairness report — %(cluster)s") % {"cluster": data.cluster.name}
    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer,
        pagesize=PAGE,
        leftMargin=MARGIN,
        rightMargin=MARGIN,
        topMargin=MARGIN,
        bottomMargin=14 * mm,
        title=title,
        author="gpuobs",
        subject=f"{data.period.as_dict()['from']} – {data.period.as_dict()['to']}",
        invariant=True,
    )
    scope = (
        _("your tenants: %(tenants)s") % {"tenants": ", ".join(data.visible_tenants or ())}
        if data.tenant_scoped
        else _("every tenant")
    )
    summary = [
        [
            _("Period"),
            f"{minute_stamp(data.period.start)} – {minute_stamp(data.period.end)}"
            + (f" ({_(data.period.label)})" if data.period.preset else ""),  # a range once
        ],
        [_("Shown"), scope],
        [
            _("Cycles"),
            _("%(cycles)s covering %(hours)s h")
            % {"cycles": data.cycles, "hours": f"{report.covered_s / 3600:,.1f}"},
        ],
        [
            _("Capacity"),
            _("%(capacity)s GPU-h, usable %(usable)s GPU-h")
            % {
                "capacity": _fmt_hours(report.capacity_gpu_hours),
                "usable": _fmt_hours(report.usable_gpu_hours),
            },
        ],
        [_("Entitlement from"), data.entitlement_basis or "—"],
        [_("Jain's index"), "—" if report.jain_index is None else f"{report.jain_index:.3f}"],
        [_("Generated"), minute_stamp(data.generated_at)],
    ]
    story: list[Flowable] = [
        Paragraph(_esc(title), styles["title"]),
        Spacer(1, 4),
        _grid([["", ""], *summary], [40 * mm, WIDTH - 40 * mm], numeric_from=2),
        Spacer(1, 8),
        Paragraph(_esc(_("Tenants")), styles["h2"]),
    ]
    if not data.tenants:
        story.append(Paragraph(_esc(_("No tenant rows in this period.")), styles["body"]))
    else:
        story.append(_tenant_grid(tenant_table_rows(data.tenants), styles))
        story += [
            Spacer(1, 8),
            Paragraph(_esc(_("Allocated and productive shares")), styles["h2"]),
            Paragraph(_esc(data.productive.headline_in(_)), styles["body"]),
            Spacer(1, 4),
            _tenant_grid(productive_table_rows(data), styles),
        ]
        if data.priced and data.pricing is not None:
            price = f"{data.pricing.price} {data.pricing.currency}"
            story += [
                Spacer(1, 8),
                Paragraph(_esc(_("Cost")), styles["h2"]),
                Paragraph(_esc(_("At %(price)s per GPU-hour.") % {"price": price}), styles["body"]),
                Spacer(1, 4),
                _tenant_grid(cost_table_rows(data), styles),
            ]
    story += [
        PageBreak(),
        Paragraph(_esc(_("Share of the usable GPUs over time, per tenant")), styles["h2"]),
        Paragraph(
            _esc(
                _(
                    "Usage: GPU-seconds its jobs held ÷ usable GPU-seconds. Fair share: what "
                    "max-min water-filling by entitlement, capped at demand, gives it. "
                    "Entitlement: its share of the deserved GPUs (or weights)."
                )
            ),
            styles["muted"],
        ),
        *_share_charts(data),
        CondPageBreak(220),
        KeepTogether(
            [
                Paragraph(
                    _esc(_("Waits by job size class (jobs that started or still wait)")),
                    styles["h2"],
                ),
                _waits_chart(data),
            ]
        ),
        _waits_table(data),
        CondPageBreak(200),
        Paragraph(_esc(_("GPU-hours each tenant held, by accounting bucket")), styles["h2"]),
        *_breakdown_charts(data),
        PageBreak(),
        Paragraph(_esc(_("Definitions")), styles["h2"]),
        *[Paragraph(_esc(_(text)), styles["body"]) for text in DEFINITIONS],
    ]
    document.build(story, onFirstPage=_footer, onLaterPages=_footer)
    return buffer.getvalue()


# in English; the PDF shows them in the reader's language (gettext_noop: found by makemessages)
DEFINITIONS = (
    gettext_noop(
        "Usable GPU-seconds: GPUs on ready nodes with healthy GPUs, times the seconds each "
        "diagnosis cycle stands for. Every figure is summed from the per-cycle rollups of the "
        "period."
    ),
    gettext_noop(
        "Entitlement: the tenant's share of the deserved GPUs of all tenants (the weights of their "
        "queues when some tenant with demand has no deserved GPUs), averaged over time."
    ),
    gettext_noop(
        "Fair share: each cycle, the usable GPUs are water-filled over the tenants in proportion "
        "to entitlement, each capped at its demand (GPUs held plus GPUs still asked for by pending "
        "jobs); what a capped tenant does not take goes to the others. Summed over the period."
    ),
    gettext_noop(
        "Ratio: usage ÷ fair share; 1 is fair, below 1 the tenant got less than its fair share."
    ),
    gettext_noop(
        "Jain's index: (Σr)² ÷ (n·Σr²) over the ratios of every tenant with demand; 1 when all "
        "ratios are equal."
    ),
    gettext_noop(
        "Waits: start − submission of the jobs that started in the period, and the wait so far of "
        "those still waiting at its end, p50 and p95 by linear interpolation, per size class of "
        "GPUs asked (1, 2–8, 9–64, more than 64)."
    ),
    gettext_noop(
        "Starvation: distinct starvation findings of the tenant's jobs reported in the period. "
        "Util: mean GPU utilization of its held GPU-seconds with a reading. MFU: model FLOPs "
        "utilization of its busy GPU-seconds where known. Held idle GPU-hours: allocated-idle "
        "plus held-by-partial-gang."
    ),
)
