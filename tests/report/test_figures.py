"""The report's figures fit a paper: small multiples at most 5 panels a row, aspect ratio within
1:3 and 3:1, no text outside the canvas, no two texts overlapping, a PDF beside every PNG.

The 16 x 1/3/9 geometry is checked on the unsaved figures (laid out by the Agg renderer, which
is what ``savefig`` does without the pixels) so the test stays fast; saving is checked on small
grids and through ``make_report``."""
import matplotlib
import numpy as np
import pytest
from matplotlib.text import Text
from PIL import Image

from argtca.report.plots import (build_figures, confidence_hist_grid, figure_pages,
                                 reliability_grid)
from argtca.report.plots.layout import MAX_COLS, paper_style, settle
from argtca.report.plots.summary import ece_figure, sweep_figure

matplotlib.use("Agg")

METHODS = ["Zero-shot CLIP", "TPT", "C-TPT", "O-TPT", "A-TPT", "R-TPT", "TCA", "ArgTCA (div)",
           "ArgTCA (disc)", "TDA (online)", "DMN-ZS (online)", "BoostAdapter (online)",
           "DPE (online)", "Zero-shot CLIP ensemble",
           "TPT [split_file sha256=cb4a6a87, TTA.STREAM.SEED=7]", "MTA"]
DATASETS = ["ImageNet", "Caltech101", "DTD", "EuroSAT", "FGVCAircraft", "Food101",
            "OxfordFlowers", "OxfordPets", "StanfordCars"]


def cells(methods, datasets, n=120, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, m in enumerate(methods):
        for d in datasets:
            conf = rng.beta(2 + i % 5, 1.5, n)
            out[(m, d)] = (conf, rng.uniform(size=n) < conf - 0.1 * (i % 3 - 1))
    return out


def drawn_texts(fig):
    """Every text the figure shows, with its box in display pixels, laid out as ``save`` lays it
    out (:func:`settle`)."""
    settle(fig)
    renderer = fig.canvas.get_renderer()
    # the labels of ticks outside the view limits exist (matplotlib keeps a pool of ticks)
    # but are not drawn
    hidden = set()
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:
                    hidden.update((id(tick.label1), id(tick.label2)))
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in hidden:
            continue
        out.append((t, t.get_window_extent(renderer)))
    return out


def assert_fits(fig, what):
    w, h = fig.get_size_inches()
    assert 1 / 3 <= w / h <= 3, f"{what}: {w:.1f} x {h:.1f} in"
    texts = drawn_texts(fig)
    assert len(texts) > 5, what
    W, H = fig.canvas.get_width_height()
    for t, bb in texts:
        assert bb.x0 >= -0.5 and bb.y0 >= -0.5 and bb.x1 <= W + 0.5 and bb.y1 <= H + 0.5, \
            f"{what}: {t.get_text()!r} at {bb} leaves the {W}x{H} canvas"
    # no two texts overlap (boxes may touch: 0.5 px of slack)
    b = np.array([[bb.x0, bb.y0, bb.x1, bb.y1] for _, bb in texts])
    ov_x = np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0])
    ov_y = np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1])
    clash = (ov_x > 0.5) & (ov_y > 0.5)
    np.fill_diagonal(clash, False)
    pairs = [(texts[i][0].get_text(), texts[j][0].get_text()) for i, j in np.argwhere(clash)]
    assert not pairs, f"{what}: overlapping texts {pairs[:4]}"


def panels_per_row(fig):
    rows = {}
    for ax in fig.get_axes():
        if ax.get_label() == "<colorbar>":
            continue
        p = ax.get_position()
        rows.setdefault(round(p.y0, 3), []).append(ax)
    return max(len(r) for r in rows.values())


def test_pages_for_methods_by_datasets():
    # one dataset: one figure, a panel per method
    (stem, suffix, blocks), = figure_pages(METHODS, ["DTD"], "reliability")
    assert (stem, suffix, len(blocks), len(blocks[0][1])) == ("reliability", "DTD", 1, 16)
    # 16 methods over 3 datasets outgrow one figure: one per dataset, same panel order
    pages = figure_pages(METHODS, ["ImageNet", "Caltech 101", "DTD"], "reliability")
    assert [p[0] for p in pages] == ["reliability_ImageNet", "reliability_Caltech_101",
                                     "reliability_DTD"]
    assert [[lab for _, lab in p[2][0][1]] for p in pages] == [METHODS] * 3
    # a few methods x a few datasets: one figure, a row of method panels per dataset
    (stem, _, blocks), = figure_pages(["A", "B", "C"], ["X", "Y"], "r")
    assert stem == "r" and [(b, [k for k, _ in p]) for b, p in blocks] == [
        ("X", [("A", "X"), ("B", "X"), ("C", "X")]), ("Y", [("A", "Y"), ("B", "Y"), ("C", "Y")])]
    # one method over nine datasets: one figure, a panel per dataset
    (stem, suffix, blocks), = figure_pages(["TPT"], DATASETS, "r")
    assert suffix == "TPT" and [lab for _, lab in blocks[0][1]] == DATASETS
    # two datasets whose names make the same file name stay apart
    assert [p[0] for p in figure_pages(METHODS, ["a/b", "a b"], "r")] == ["r_a_b", "r_a_b_2"]


@pytest.mark.parametrize("n_datasets", [1, 3, 9])
def test_figures_fit_the_page_for_16_methods(n_datasets):
    ds = DATASETS[:n_datasets]
    grid = cells(METHODS, ds)
    title = ("Reliability diagrams (bars: the records of every seed pooled; ECE: mean over "
             "seeds, as in table.md)")
    figs = build_figures("reliability", grid, METHODS, ds, "reliability", title=title,
                         notes={k: "(mean of 3 seeds)" for k in grid})
    assert len(figs) == n_datasets
    # the 9 pages differ in their dataset's name only: two are measured (each is laid out to
    # convergence, as saved)
    figs = figs[:2]
    if n_datasets < 9:
        # (the histograms' pages are laid out by the same code; 9 more pages would double
        # the test's time for nothing new)
        figs += build_figures("hist", grid, METHODS, ds, "confidence_hist", title="Confidence")
    rng = np.random.default_rng(1)
    ece = {m: list(rng.uniform(0.5, 15, n_datasets)) for m in METHODS}
    sweep = {d: {s: {"x": [5, 10, 20, 40], "ece": rng.uniform(2, 8, 4),
                     "acc": rng.uniform(60, 70, 4), "ece_std": rng.uniform(0, 1, 4),
                     "acc_std": rng.uniform(0, 1, 4)} for s in ("ArgTCA (div)", "TCA")}
             for d in ds}
    figs += [("ece_chart", ece_figure(ece, ds)),
             ("sweep_alpha", sweep_figure(sweep, "α", "Sensitivity to α"))]
    with paper_style():
        for stem, fig in figs:
            assert_fits(fig, stem)
            assert panels_per_row(fig) <= MAX_COLS, stem
    # every panel of a page carries its method's name and a number in its title
    _, rel = figs[0]
    titles = [ax.get_title() for ax in rel.get_axes()]
    assert [t.split("\n")[0] for t in titles[:3]] == METHODS[:3]
    assert all("ECE " in t and "%" in t for t in titles)


def test_small_grid_keeps_methods_and_datasets_in_one_figure():
    """3 methods x 2 datasets: one figure whose panels hold exactly their own records (the
    ECE in each title is recomputed here by hand from the records); a cell without records
    gets no panel."""
    ms, ds = ["CLIP", "TPT", "ArgTCA (div)"], ["ImageNet", "Caltech101"]
    conf = np.array([0.9, 0.9, 0.6, 0.6])
    grid = {(m, d): (conf, np.array([1, 0, 1, 1], bool)) for m in ms for d in ds}
    grid[("TPT", "Caltech101")] = None                              # no records
    (stem, fig), = build_figures("reliability", grid, ms, ds, "reliability", n_bins=10)
    with paper_style():
        assert_fits(fig, stem)
    titles = [ax.get_title() for ax in fig.get_axes()]
    # bins (0.5, 0.6] and (0.8, 0.9]: |1 - 0.6| * 2/4 + |0.5 - 0.9| * 2/4 = 0.4 -> 40.00 %
    assert titles[0] == "CLIP\nECE 40.00%"
    assert [t.split("\n")[0] for t in titles] == ms + ["CLIP", "ArgTCA (div)"]
    assert [sf._suptitle.get_text() for sf in fig.subfigs] == ds


def test_png_and_pdf_written_and_stale_pages_removed(tmp_path):
    grid = cells(METHODS[:6], DATASETS[:2], n=30)
    one = reliability_grid({k: v for k, v in grid.items() if k[1] == "ImageNet"},
                           METHODS[:6], ["ImageNet"], tmp_path / "reliability.png")
    (tmp_path / "reliability_old.png").write_bytes(b"a page of an earlier report")
    assert sorted(one) == ["reliability.pdf", "reliability.png"]
    assert (tmp_path / "reliability.pdf").read_bytes()[:5] == b"%PDF-"
    with Image.open(tmp_path / "reliability.png") as im:
        w, h = im.size
    assert 1 / 3 <= w / h <= 3 and w >= 1000
    # the same report with a second dataset: 6 methods x 2 datasets is one figure per
    # dataset, and the single figure of before does not stay beside them
    two = reliability_grid(grid, METHODS[:6], DATASETS[:2], tmp_path / "reliability.png")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(two) == ["reliability_Caltech101.pdf", "reliability_Caltech101.png",
                                    "reliability_ImageNet.pdf", "reliability_ImageNet.png"]
    hist = confidence_hist_grid(grid, METHODS[:1], DATASETS[:2], tmp_path / "c.png")
    assert sorted(hist) == ["c.pdf", "c.png"]


def test_report_lists_a_pdf_beside_every_png(tmp_path):
    from argtca.report.cli import make_report
    from test_report import write_run
    for method in ("zeroshot", "tpt", "atpt"):
        write_run(tmp_path / "runs", method, "imagenet", 1, 50.0, 5.0, n_records=40)
    written = make_report([tmp_path / "runs"], tmp_path / "rep")
    pngs = sorted(n for n in written if n.endswith(".png"))
    assert pngs == ["confidence_hist.png", "ece_bars.png", "reliability.png"]
    for n in pngs:
        pdf = n[:-4] + ".pdf"
        assert written[pdf] == tmp_path / "rep" / pdf and written[pdf].stat().st_size > 1000
