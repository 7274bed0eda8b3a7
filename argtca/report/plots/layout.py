"""What every report figure shares: the paper-scale style, the small-multiples grid, wrapped
titles, the shared legend and the PNG + PDF pair; and the pages of the methods x datasets
figures (reliability diagrams, confidence histograms, risk-coverage curves): which figures, their
panels (only those with records), the titled panel, one y scale a figure or a dataset.

Sizes are physical: a panel is about 1.7 in wide, so a row of four fits a NeurIPS text width
(5.5 in) at ~75 % scale and the 7-8 pt text stays legible there. Layout is matplotlib's
constrained layout throughout (titles, tick labels and the outside legend get their room from
the layout engine); only the figure size is computed here, from the number of panels. The
engine needs a few passes to settle (each pass moves the tick labels and wrapped titles it makes
room for), so :func:`save` settles it before writing: one pass left a 3-line title over the
panel titles and the legend over the x labels.
"""
from __future__ import annotations

import math
import re
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import matplotlib
import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_COLS = 5          # panels a row, at most
PANEL_IN = 1.7        # a panel's width (and a square panel's height), inches
DPI = 200             # PNG resolution: 1400-1800 px for a 4-5 panel row

STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 8, "figure.titlesize": 9.5,
    "axes.spines.top": False, "axes.spines.right": False, "axes.linewidth": 0.7,
    "xtick.major.width": 0.7, "ytick.major.width": 0.7, "xtick.major.size": 2.5,
    "ytick.major.size": 2.5, "hatch.linewidth": 0.5,
    # TrueType (Type 42) fonts in the PDF: conference checkers reject Type 3 fonts
    "pdf.fonttype": 42, "ps.fonttype": 42,
}

ACC_COLOR = "#3b6fb6"
GAP_COLOR = "#d62728"
CORRECT_COLOR = "#2ca02c"
WRONG_COLOR = "#d62728"


@contextmanager
def paper_style() -> Iterator[None]:
    """The report's rcParams for the figures built (and saved) inside; pyplot's global state
    and the user's interactive backend stay untouched (``Figure`` renders with Agg)."""
    with matplotlib.rc_context(STYLE):
        yield


def colors(n: int) -> list:
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def chars_per_line(width_in: float, fontsize: float) -> int:
    """How many characters of DejaVu Sans at ``fontsize`` fit ``width_in`` (its mean advance is
    ~0.6 em; a little under so that a wrapped line never reaches its neighbour)."""
    return max(8, int(width_in * 72 / (0.62 * fontsize)))


def wrap(text: str, width: int) -> str:
    """Wrap each line of ``text`` at word boundaries (long words are cut)."""
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) or line
                     for line in text.split("\n"))


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or "x"


def choose_cols(n: int) -> int:
    """Columns of a wrapped grid of ``n`` panels: one row up to 3, else the most square grid
    (4x4 for 16), never more than MAX_COLS."""
    if n <= 3:
        return max(n, 1)
    return min(MAX_COLS, math.ceil(math.sqrt(n)))


Block = Tuple[str, int]     # (title, number of panels)


def panel_grid(blocks: Sequence[Block], ncols: int, panel_h: float, title: str,
               legend_rows: int = 1, panel_w: float = PANEL_IN, subplot_kw=None
               ) -> Tuple[Figure, List[List[Optional[Axes]]]]:
    """A constrained-layout figure of ``blocks``, each a titled group of panels wrapped at
    ``ncols`` a row (a subfigure per block when there are several). Returns the figure and,
    per block, its axes in reading order (the unused cells of the last row are removed).

    Each axes gets ``is_left`` / ``is_bottom`` attributes (first column; no panel of its block
    below it) so callers label only the outer panels."""
    rows = [math.ceil(n / ncols) for _, n in blocks]
    width = ncols * (panel_w + 0.12) + 0.45
    title = figure_title(title, width) if title else ""
    title_lines = title.count("\n") + 1 if title else 0
    height = (sum(rows) * (panel_h + 0.5) + 0.3 * (len(blocks) > 1) * len(blocks)
              + 0.16 * title_lines + 0.25 * legend_rows + 0.35)
    fig = Figure(figsize=(width, height), layout="constrained")
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.03, wspace=0.04, hspace=0.04)
    holders = (fig.subfigures(len(blocks), 1, height_ratios=rows, squeeze=False)[:, 0]
               if len(blocks) > 1 else [fig])
    out: List[List[Optional[Axes]]] = []
    for holder, (btitle, n), nrow in zip(holders, blocks, rows):
        grid = holder.subplots(nrow, ncols, squeeze=False, subplot_kw=subplot_kw)
        if len(blocks) > 1:
            holder.suptitle(btitle, fontsize=9, fontweight="bold")
        axes: List[Optional[Axes]] = []
        for k in range(nrow * ncols):
            i, j = divmod(k, ncols)
            ax = grid[i, j]
            if k >= n:
                ax.remove()
                continue
            ax.is_left = j == 0
            ax.is_bottom = k + ncols >= n
            axes.append(ax)
        out.append(axes)
    if title:
        fig.suptitle(title)
    return fig, out


def label_outer(ax: Axes, xlabel: str, ylabel: str, show_left_ticks: bool = False) -> None:
    """Axis labels on the outer panels only; tick labels where a label would be."""
    if ax.is_bottom:
        ax.set_xlabel(xlabel)
    else:
        ax.tick_params(labelbottom=False)
    if ax.is_left:
        ax.set_ylabel(ylabel)
    elif not show_left_ticks:
        ax.tick_params(labelleft=False)


def shared_legend(fig: Figure, handles: list) -> None:
    """One legend for all panels, below them, in as many columns as the figure's width holds; a
    label wider than the figure (a long plug-in label) is wrapped to fit."""
    width_in = fig.get_figwidth()
    fit = chars_per_line(width_in - 0.8, STYLE["legend.fontsize"])
    for h in handles:
        h.set_label(wrap(h.get_label(), fit))
    need = [0.45 + max(map(len, h.get_label().split("\n"))) * 0.62 * STYLE["legend.fontsize"]
            / 72 for h in handles]
    ncols = len(handles)
    while ncols > 1 and max(sum(need[i:i + ncols]) for i in range(0, len(need), ncols)) > \
            width_in - 0.3:
        ncols -= 1
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols, frameon=False,
               handlelength=1.6, columnspacing=1.2)


def figure_title(text: str, width_in: float) -> str:
    return wrap(text, chars_per_line(width_in - 0.2, STYLE["figure.titlesize"]))


def settle(fig: Figure, passes: int = 4) -> Figure:
    """Run the constrained layout until the axes stop moving, at most ``passes`` times (a
    16-panel page moves by < 0.2 % of its size after the fourth): the layout :func:`save`
    writes, and what the tests measure."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    before = None
    for _ in range(passes):
        fig.draw_without_rendering()
        now = [tuple(np.round(ax.get_position().bounds, 6)) for ax in fig.get_axes()]
        if now == before:
            break
        before = now
    return fig


def save(fig: Figure, png: Path) -> Dict[str, Path]:
    """``png`` and the vector PDF beside it (same stem), laid out by :func:`settle` and then
    frozen (savefig would run the layout once more, PNG and PDF each); {file name: path}."""
    settle(fig)
    fig.set_layout_engine("none")
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    pdf = png.with_suffix(".pdf")
    fig.savefig(png, dpi=DPI)
    # no creation date: the same runs give the same bytes
    fig.savefig(pdf, metadata={"CreationDate": None})
    return {png.name: png, pdf.name: pdf}


def remove_stale(png: Path, keep: Sequence[Path]) -> None:
    """Delete this figure's files from an earlier report in the same folder (``<stem>.png``,
    ``<stem>_*.png`` and their PDFs) that this report does not write again: a report updated
    with more datasets switches from one figure to one per dataset, and the old single figure
    must not stay beside the new ones."""
    png = Path(png)
    keep_names = {Path(k).name for k in keep}
    for ext in (".png", ".pdf"):
        for old in [png.with_suffix(ext), *png.parent.glob(f"{png.stem}_*{ext}")]:
            if old.name not in keep_names and old.is_file():
                old.unlink()


# ----------------------------------------------------------------------------- methods x datasets
Cell = Optional[Tuple[np.ndarray, np.ndarray]]   # (conf, correct) or None when no records
Key = Tuple[str, str]                            # (method, dataset)
Page = Tuple[str, List[Tuple[Key, str]]]         # (block title, [((method, dataset), label)])


def figure_pages(methods: Sequence[str], datasets: Sequence[str], stem: str,
                 present: Optional[Callable[[Key], bool]] = None
                 ) -> List[Tuple[str, str, List[Page]]]:
    """The figures for ``methods`` x ``datasets`` (argtca/report/plots/calibration.py's module
    docstring says which): a list of ``(file stem, title suffix, blocks)``, each block ``(title,
    [((method, dataset), panel label), ...])``. ``present(key)`` says which panels exist (None:
    all): only those are drawn, a dataset's panels packed in the methods' order, and a method or
    dataset with none gets no panel, row or page (a report over datasets run with different
    methods draws no empty panels)."""
    has = present or (lambda key: True)
    m = [x for x in methods if any(has((x, y)) for y in datasets)]
    d = [y for y in datasets if any(has((x, y)) for x in m)]
    per = {y: [x for x in m if has((x, y))] for y in d}
    if not d:
        return []
    if len(d) == 1:
        return [(stem, d[0], [("", [((x, d[0]), x) for x in per[d[0]]])])]
    if len(m) == 1:
        return [(stem, m[0], [("", [((m[0], y), y) for y in d])])]
    widest = max(len(p) for p in per.values())
    if widest <= MAX_COLS and len(d) <= min(MAX_COLS, widest + 1):
        return [(stem, "", [(y, [((x, y), x) for x in per[y]]) for y in d])]
    names: Dict[str, int] = {}
    pages = []
    for y in d:
        s = slug(y)
        names[s] = names.get(s, 0) + 1
        s = s if names[s] == 1 else f"{s}_{names[s]}"
        pages.append((f"{stem}_{s}", y, [("", [((x, y), x) for x in per[y]])]))
    return pages


def has_records(cell: Cell) -> bool:
    return cell is not None and len(cell[0]) > 0


def panel_title(ax: Axes, label: str, stat: str) -> None:
    width = chars_per_line(PANEL_IN, 8)
    ax.set_title(wrap(label, width) + "\n" + wrap(stat, width), fontsize=8, linespacing=1.15)


def shared_note(notes: Mapping[Key, str], keys: Sequence[Key]) -> Optional[str]:
    """The note when every panel carries the same one (said once, in the figure's title)."""
    vals = {notes.get(k, "") for k in keys}
    return vals.pop() if len(vals) == 1 else None


def cell_figures(cells: Mapping[Key, Cell], methods: Sequence[str], datasets: Sequence[str],
                 stem: str, title: str, panel_h: float,
                 draw: Callable[[List[Page], List[List[Optional[Axes]]], Mapping[Key, str]],
                                None],
                 notes: Optional[Mapping[Key, str]] = None) -> List[Tuple[str, Figure]]:
    """One figure per page of :func:`figure_pages` over the cells with records, unsaved:
    ``[(file stem, figure), ...]``. Each page's title is ``title`` after its suffix, plus the
    note every panel of the page shares (``notes``; None: no notes); ``draw(blocks, axes,
    notes)`` fills the panels in the paper style, given the notes left for the panels' own
    titles (none when shared)."""
    out = []
    for page_stem, suffix, blocks in figure_pages(methods, datasets, stem,
                                                  lambda k: has_records(cells.get(k))):
        keys = [k for _, panels in blocks for k, _ in panels]
        note = shared_note(notes, keys) if notes is not None else ""
        text = (f"{suffix} · " if suffix else "") + title + (
            f"; every panel: {note.strip('()')}" if note else "")
        ncols = max(choose_cols(len(p)) if len(blocks) == 1 else len(p) for _, p in blocks)
        with paper_style():
            fig, axes = panel_grid([(b, len(p)) for b, p in blocks], ncols, panel_h, text)
            draw(blocks, axes, notes if note is None else {})
        out.append((page_stem, fig))
    return out


def cell_panels(cells: Mapping[Key, Cell], blocks: Sequence[Page],
                axes: Sequence[Sequence[Axes]], xlabel: str, ylabel: str
                ) -> Iterator[Tuple[Key, str, Axes, Tuple[np.ndarray, np.ndarray]]]:
    """The panels of a page (every one has records: :func:`cell_figures` draws no other), x from
    0 to 1 and labelled on the outer panels, yielded as (key, label, axes, cell)."""
    for (_, panels), block_axes in zip(blocks, axes):
        for (key, label), ax in zip(panels, block_axes):
            ax.set_xlim(0, 1)
            ax.set_xticks([0, 0.5, 1], ["0", "0.5", "1"])
            label_outer(ax, xlabel, ylabel)
            yield key, label, ax, cells[key]


def same_y(axes: Sequence[Sequence[Axes]], top: float) -> None:
    """One y scale (0 to ``top``) for every panel of a figure, so they compare at a glance."""
    for block_axes in axes:
        for ax in block_axes:
            ax.set_ylim(0, top)
            ax.locator_params(axis="y", nbins=4)


def y_per_dataset(panels: Sequence[Tuple[Axes, str, float]], floor: float = 1.0) -> None:
    """One y scale a dataset, 0 to 1.08 x the highest value of its panels (at least ``floor``):
    ``panels`` are (axes, dataset, highest value). A dataset whose values stay under 3 % is not
    flattened by another's 60 %. A panel whose row holds another dataset's scale shows its own
    tick labels."""
    top: Dict[str, float] = {}
    for _, d, hi in panels:
        top[d] = max(top.get(d, floor), 1.08 * hi)
    rows: Dict[Tuple[int, int], set] = {}
    for ax, d, _ in panels:
        ax.set_ylim(0, top[d])
        ax.locator_params(axis="y", nbins=4)
        rows.setdefault(_row(ax), set()).add(d)
    for ax, _, _ in panels:
        if len(rows[_row(ax)]) > 1:
            ax.tick_params(labelleft=True)


def _row(ax: Axes) -> Tuple[int, int]:
    """(holder, grid row) of a panel of :func:`panel_grid`."""
    spec = ax.get_subplotspec()
    return id(ax.get_figure()), spec.rowspan.start


def save_figures(figures: Sequence[Tuple[str, Figure]], path) -> Dict[str, Path]:
    """Save each ``(stem, figure)`` beside ``path`` (PNG + PDF) and delete this stem's figures of
    an earlier report that no longer apply; {file name: path} of what was written."""
    path = Path(path)
    written: Dict[str, Path] = {}
    with paper_style():
        for stem, fig in figures:
            written.update(save(fig, path.with_name(stem + ".png")))
    remove_stale(path, list(written.values()))
    return written
