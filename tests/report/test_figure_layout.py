"""Every report figure leaves room for its texts, measured on matplotlib's own geometry: laid out
as ``save`` lays it out, the bounding boxes (in display pixels, from the Agg renderer) of the
figure title, the dataset titles, the panel titles, the axis labels and the legend overlap no
other text and no panel, for 1, 2, 3 and many panels and for long plug-in labels. And through
``python -m argtca.report``: a report over two datasets run with different methods draws only
the panels that exist, each saying its seeds, and names the ECE chart for what it is."""
import matplotlib
import numpy as np
import pytest
from matplotlib.legend import Legend
from matplotlib.text import Text

from argtca.report.plots import build_figures
from argtca.report.plots.layout import paper_style, settle
from argtca.report.plots.risk_coverage import risk_coverage_figures
from argtca.report.plots.summary import ece_figure, sweep_figure
from test_figures import assert_fits, cells
from test_report import write_run

matplotlib.use("Agg")

TITLE = ("Reliability diagrams (bars: the records of every seed pooled; ECE: mean over seeds, as "
         "in table.md)")
PLUGIN = "my_plugin_selector_with_a_long_name (online) [TTA.STREAM.SEED=7, TRAINER.X.LAMBDA=0.5]"


def labels(n, long):
    names = ["Zero-shot CLIP", "TPT", "C-TPT", "ArgTCA (div)", "TDA (online)", "MTA", "ZERO",
             "O-TPT", "A-TPT", "R-TPT", "TCA", "DPE (online)", "TPS", "TTL", "RLCF", "ECALP"]
    out = names[:n]
    if long:
        out[-1] = PLUGIN
    return out


def boxes(fig):
    """(kind, object, bbox) of what must not collide: every drawn text, each legend's whole box
    and each panel's plot area."""
    settle(fig)
    r = fig.canvas.get_renderer()
    legends = [lg for lg in fig.findobj(Legend)]
    in_legend = {id(t) for lg in legends for t in lg.findobj(Text)}
    out = [("legend", lg, lg.get_window_extent(r)) for lg in legends]
    out += [("panel", ax, ax.get_window_extent(r)) for ax in fig.get_axes()
            if ax.get_label() != "<colorbar>"]
    titles = [t for f in [fig, *fig.subfigs] for t in [f._suptitle] if t is not None]
    for ax in fig.get_axes():
        titles += [ax.title, ax.xaxis.label, ax.yaxis.label]
    out += [("text", t, t.get_window_extent(r)) for t in titles
            if t.get_visible() and t.get_text().strip() and id(t) not in in_legend]
    return out


def assert_room(fig, what):
    """No title, axis label or legend overlaps another of them or a panel (a text's own panel
    may hold it only where matplotlib puts it: its title above, its labels beside)."""
    assert_fits(fig, what)              # every text on the canvas, no two texts overlapping
    items = boxes(fig)
    for i, (ka, a, ba) in enumerate(items):
        for kb, b, bb in items[i + 1:]:
            if ka == kb == "panel":
                continue
            if "panel" in (ka, kb):
                text, ax = (a, b) if kb == "panel" else (b, a)
                if isinstance(text, Text) and text.axes is ax:
                    continue            # a panel's own title and labels sit on its edge
            ox = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            oy = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            assert not (ox > 0.5 and oy > 0.5), (
                f"{what}: {ka} {_name(a)!r} overlaps {kb} {_name(b)!r} by {ox:.0f}x{oy:.0f} px")


def _name(obj):
    if isinstance(obj, Text):
        return obj.get_text()[:40]
    if isinstance(obj, Legend):
        return "legend"
    return obj.get_title().split("\n")[0]


@pytest.mark.parametrize("n,long", [(1, False), (1, True), (2, False), (2, True), (3, False),
                                    (3, True), (16, True)])
def test_panels_titles_and_legend_have_room(n, long):
    ms = labels(n, long)
    grid = cells(ms, ["Demo"])
    notes = {k: "(mean of 3 seeds)" for k in grid}
    figs = build_figures("reliability", grid, ms, ["Demo"], "reliability", title=TITLE,
                         notes=notes)
    figs += risk_coverage_figures(grid, ms, ["Demo"], title=TITLE, notes=notes)
    if n <= 3:
        figs += build_figures("hist", grid, ms, ["Demo"], "confidence_hist", title=TITLE)
    with paper_style():
        for stem, fig in figs:
            assert_room(fig, f"{stem}, {n} panels")


@pytest.mark.parametrize("n_datasets", [1, 2, 3])
def test_two_blocks_and_one_method_pages_have_room(n_datasets):
    """Rows of datasets (a subfigure title each) and one method over datasets, with a long
    plug-in label and mixed seed notes (said per panel)."""
    ms = labels(3, True)
    ds = ["Demo", "ImageFolder", "Caltech101"][:n_datasets]
    grid = cells(ms, ds)
    notes = {k: "(1 seed)" if k[1] == "Demo" else "(mean of 3 seeds)" for k in grid}
    figs = build_figures("reliability", grid, ms, ds, "r", title=TITLE, notes=notes)
    figs += build_figures("reliability", grid, [PLUGIN], ds, "one", title=TITLE, notes=notes)
    with paper_style():
        for stem, fig in figs:
            assert_room(fig, f"{stem}, {n_datasets} datasets")


@pytest.mark.parametrize("n_methods,n_datasets", [(2, 1), (3, 2), (4, 3), (12, 4)])
def test_ece_chart_and_sweep_have_room_for_long_labels(n_methods, n_datasets):
    rng = np.random.default_rng(0)
    ms = labels(n_methods, True)
    ds = ["Demo", "ImageFolder", "Caltech101", "DTD"][:n_datasets]
    ece = {m: list(rng.uniform(0.5, 15, n_datasets)) for m in ms}
    sweep = {d: {s: {"x": [5, 10, 20, 40], "ece": rng.uniform(2, 8, 4),
                     "acc": rng.uniform(60, 70, 4)} for s in ms[:3]} for d in ds}
    with paper_style():
        assert_room(ece_figure(ece, ds), f"ece chart {n_methods}x{n_datasets}")
        assert_room(sweep_figure(sweep, "α", "Sensitivity to α"), f"sweep {n_datasets}")


def test_a_single_layout_pass_is_what_the_check_catches():
    """The check can fail: the 2-panel reliability figure after one layout pass (what ``save``
    wrote before it settled the layout) has its 3-line title over the panel titles."""
    ms = labels(2, False)
    grid = cells(ms, ["Demo"])
    (_, fig), = build_figures("reliability", grid, ms, ["Demo"], "r", title=TITLE,
                              notes={k: "(mean of 3 seeds)" for k in grid})
    with paper_style():
        settle(fig, passes=1)
        r = fig.canvas.get_renderer()
        sup = fig._suptitle.get_window_extent(r)
        low = min(ax.title.get_window_extent(r).y1 for ax in fig.get_axes())
        assert low > sup.y0           # one pass: the panel titles reach into the figure title
        settle(fig)
        sup = fig._suptitle.get_window_extent(r)
        assert max(ax.title.get_window_extent(r).y1 for ax in fig.get_axes()) <= sup.y0 + 0.5


def _titles_of_saved_figures(monkeypatch):
    """The panel titles of every figure ``python -m argtca.report`` saves, by file name."""
    from argtca.report.plots import layout, summary
    seen = {}
    real = layout.save

    def spy(fig, png):
        seen[png.name] = ([ax.get_title() for ax in fig.get_axes()],
                          fig._suptitle.get_text() if fig._suptitle else "")
        return real(fig, png)
    monkeypatch.setattr(layout, "save", spy)
    monkeypatch.setattr(summary, "save", spy)
    return seen


def test_report_draws_only_existing_panels_with_their_seeds(tmp_path, monkeypatch):
    """ImageNet has three methods over 3 seeds; Caltech101 only zero-shot CLIP, one seed: its
    row has one panel, each panel says its seeds, and nothing says "every panel" wrongly."""
    from argtca.report.cli import main
    for seed in (1, 2, 3):
        for method in ("zeroshot", "tpt", "atpt"):
            write_run(tmp_path / "runs", method, "imagenet", seed, 50.0, 5.0, n_records=40)
    write_run(tmp_path / "runs", "zeroshot", "caltech101", 1, 80.0, 3.0, n_records=40)
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "radar_ece.png").write_bytes(b"an earlier report's chart")
    seen = _titles_of_saved_figures(monkeypatch)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep"), "--force",
                 "--metrics", "accuracy,ece,aurc"]) == 0
    for name in ("reliability.png", "risk_coverage.png"):
        titles, sup = seen[name]
        first = [t.split("\n")[0] for t in titles]
        titles = [t.replace("\n", " ") for t in titles]
        assert first == ["CLIP", "TPT", "A-TPT", "CLIP"], (name, titles)
        assert [t.endswith("(mean of 3 seeds)") for t in titles] == [True] * 3 + [False]
        assert titles[-1].endswith("(1 seed)") and "every panel" not in sup
    titles, sup = seen["confidence_hist.png"]
    assert len(titles) == 4
    # one dataset of each: every panel of each page has as many seeds, said once in its title
    assert "ece_bars.png" in seen and not (tmp_path / "rep" / "radar_ece.png").exists()
    assert sorted(p.name for p in (tmp_path / "rep").glob("ece_*")) == ["ece_bars.pdf",
                                                                       "ece_bars.png"]


def test_report_of_one_seed_everywhere_says_it_once(tmp_path, monkeypatch):
    from argtca.report.cli import main
    for method in ("zeroshot", "tpt"):
        write_run(tmp_path / "runs", method, "imagenet", 1, 50.0, 5.0, n_records=40)
    seen = _titles_of_saved_figures(monkeypatch)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    titles, sup = seen["reliability.png"]
    assert sup.replace("\n", " ").endswith("every panel: 1 seed")
    assert not any("seed" in t for t in titles)


def test_risk_coverage_has_one_y_scale_per_dataset():
    """A dataset whose risk stays at 2 % gets its own axis (0 to 1.08 x its highest risk: 2.16),
    not the other dataset's 0-108 %; a panel beside another dataset's shows its own ticks."""
    conf = np.linspace(0.99, 0.5, 100)
    easy = (conf, np.arange(100) < 98)        # the 2 least confident wrong: risk <= 2 %
    hard = (conf, np.arange(100) % 5 >= 2)    # 40 % wrong, the most confident one too: 100 %
    want = {"Easy": 1.08 * 2.0, "Hard": 1.08 * 100.0}
    one = {("TPT", "Easy"): easy, ("TPT", "Hard"): hard}
    (_, fig), = risk_coverage_figures(one, ["TPT"], ["Easy", "Hard"])
    with paper_style():
        settle(fig)
    for ax in fig.get_axes():                 # one method: a panel per dataset, one row
        d = ax.get_title().split("\n")[0]
        assert ax.get_ylim() == pytest.approx((0, want[d]))
        assert any(t.get_text() for t in ax.get_yticklabels() if t.get_visible()), d
    both = {(m, d): easy if d == "Easy" else hard for m in ("CLIP", "TPT")
            for d in ("Easy", "Hard")}
    (_, fig), = risk_coverage_figures(both, ["CLIP", "TPT"], ["Easy", "Hard"])
    for ax in fig.get_axes():                 # a row per dataset, its title the subfigure's
        d = ax.get_figure()._suptitle.get_text()
        assert ax.get_ylim() == pytest.approx((0, want[d]))
