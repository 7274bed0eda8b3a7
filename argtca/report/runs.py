"""Run folders: finding them, reading their summaries and records, and telling the broken and
unfinished ones apart (listed and skipped, never fatal for the other runs)."""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..config.methods import FAMILIES
from .identity import (AUTO_KEYS, LABEL_KEYS, PROTOCOL_KEYS, PROVIDER_PREFIX, auto_value,
                       canonical, config_default, fmt_value, is_dataset_key, is_hash_key,
                       method_defaults, protocol_of, same_value, settings_of, short_hash,
                       short_name)
from .records import ReportError, load_records, record_metrics, summary_disagreement

MISSING = "–"
SELECTOR_ORDER = ["tca", "div", "disc", "joint", "random"]
METRICS = {  # name -> (display, higher is better)
    "accuracy": ("Acc", True), "ece": ("ECE", False), "adaece": ("AdaECE", False),
    "mce": ("MCE", False), "nll": ("NLL", False), "brier": ("Brier", False),
    # selective prediction (argtca/metrics.py: risk-coverage from the records alone), in %
    "aurc": ("AURC", False), "eaurc": ("E-AURC", False),
}
REQUIRED_SUMMARY_KEYS = ("method", "dataset", "seed", "accuracy", "ece")


def _warn(msg: str) -> None:
    print(f"report: warning: {msg}", file=sys.stderr)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


def _dataset_rank(key: str) -> int:
    """A dataset's place in the report's column order, as its class declares it (CoOp's and
    C-TPT's Table 1: argtca/datasets/catalogue.py)."""
    from ..datasets.catalogue import report_rank
    return report_rank(key)


def plugin_label(label: str, providers: Dict[str, str]) -> str:
    """``label`` naming the plug-in modules that provided its selector or method, inside its
    last parentheses when it ends with some: "ArgTCA (div)" -> "ArgTCA (div, plug-in
    mypkg.sel)"."""
    if not providers:
        return label
    # each module once (a method's adapter and trainer come from one file), without the package
    # that --plugin files are imported under (argtca/plugins.py)
    mods = ", ".join(f"plug-in {m}" for m in dict.fromkeys(
        m.split("_argtca_plugins.", 1)[-1] for _, m in sorted(providers.items())))
    if label.endswith(")") and "(" in label:
        return f"{label[:-1]}, {mods})"
    return f"{label} ({mods})"


# ----------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One run folder: its ``summary.json`` and lazily its records and phase-1 picks."""
    path: Path
    summary: Dict[str, Any]
    variant: Tuple[Tuple[str, Any], ...] = ()      # set by group_runs
    _records: Any = field(default=None, repr=False)
    _settings: Optional[Dict[str, Any]] = field(default=None, repr=False)
    # the run's metrics as its records give them (records.record_metrics); the summary's own
    # numbers are never shown (a folder whose summary disagrees is left out)
    metrics: Dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def method(self) -> str:
        return str(self.summary["method"]).lower()

    @property
    def family(self) -> str:
        """The method's family as its run wrote it (summary.json, from the trainer's
        declaration); for summaries written before that, the installed method's declaration."""
        fam = self.summary.get("family")
        return str(fam) if fam else declared_methods().get(self.method, {}).get("family", "")

    @property
    def group(self) -> str:
        """The title of the method's family (argtca/config/methods.py FAMILIES); "Other" for a
        family not listed."""
        return FAMILIES.get(self.family, "Other")

    @property
    def online(self) -> bool:
        return self.family == "online"

    @property
    def selector(self) -> Optional[str]:
        s = self.summary.get("selector")
        return None if s in (None, "") else str(s).lower()

    @property
    def base_label(self) -> str:
        lab = self.summary.get("label")
        if not lab:
            base = declared_methods().get(self.method, {}).get("label", self.method)
            lab = f"{base} ({self.selector})" if self.selector else base
        return plugin_label(str(lab), self.providers)

    @property
    def providers(self) -> Dict[str, str]:
        """"SELECTOR"/"METHOD" -> the module of a plug-in that provided it (none for argtca's
        own): its runs are another experiment than the built-in's of the same name."""
        return {k[len(PROVIDER_PREFIX):]: str(v).split(" (", 1)[0]
                for k, v in self.settings.items() if k.startswith(PROVIDER_PREFIX) and v}

    @property
    def label(self) -> str:
        if not self.variant:
            return self.base_label
        parts = ", ".join(f"{short_name(k)}={v if isinstance(v, str) else fmt_value(v)}"
                          for k, v in self.variant)
        return f"{self.base_label} [{parts}]"

    @property
    def dataset(self) -> str:
        return str(self.summary["dataset"])

    @property
    def dataset_key(self) -> str:
        return str(self.summary.get("dataset_key") or _norm(self.dataset))

    @property
    def seed(self) -> int:
        return int(self.summary["seed"])

    @property
    def overrides(self) -> Dict[str, Any]:
        return dict(self.summary.get("overrides") or {})

    def override(self, key: str) -> Any:
        """The run's value of a config key: its fingerprint's, else its override, else the
        config default."""
        return self.settings.get(key, config_default(key))

    @property
    def settings(self) -> Dict[str, Any]:
        """Everything that can change this run's numbers except the seed (see
        :mod:`argtca.report.identity`): ``config.json`` over the summary's overrides over the
        defaults. A folder without ``config.json`` (written before fingerprints) is read from its
        summary alone; its test set is then unknown."""
        if self._settings is None:
            config = _read_config(self.path)
            # a folder written before the fingerprint named the provider: the summary's record
            # of the selector that ran (trainers/argtca.py)
            prov = self.summary.get("selector_provider")
            key = PROVIDER_PREFIX + "SELECTOR"
            if key not in config and isinstance(prov, dict) and prov.get("builtin") is False:
                config[key] = f"{prov.get('module', '?')} ({prov.get('file', '?')})"
            self._settings = settings_of(config, self.overrides,
                                         str(self.summary.get("trainer") or ""))
        return self._settings

    @property
    def identity(self) -> str:
        """Method, dataset and settings (not the seed), as text: equal for runs that may be
        averaged over seeds."""
        return canonical(dict(self.settings, **{"report.label": self.base_label,
                                                "report.dataset": self.dataset_key}))

    @property
    def protocol(self) -> Tuple[Tuple[str, str], ...]:
        return protocol_of(self.settings)

    def default(self, key: str) -> Any:
        """The value ``key`` has when the user sets nothing: the method's own default on this
        dataset (:func:`argtca.report.identity.method_defaults`)."""
        d = method_defaults(self.method, self.dataset_key)
        return d[key] if key in d else config_default(key)

    def auto_resolved(self, key: str) -> bool:
        """Whether the run's value of ``key`` is what its default "auto" resolves to."""
        return (key in AUTO_KEYS and str(self.default(key)).lower() == "auto"
                and same_value(self.settings.get(key), auto_value(
                    key, self.settings, self.summary.get("family") in ("online",
                                                                       "training-free"))))

    def user_set(self, key: str) -> bool:
        """Whether the run's value of ``key`` is not its method's default (nor what "auto"
        resolved)."""
        return (key in self.settings and self.default(key) is not None
                and not same_value(self.settings.get(key), self.default(key))
                and not self.auto_resolved(key))

    def metric(self, name: str) -> float:
        """The metric as the run's records give it (NaN when they cannot: no records read)."""
        return float(self.metrics.get(name, math.nan))

    def records(self) -> Optional[Dict[str, np.ndarray]]:
        if self._records is None:
            p = self.path / "records.jsonl"
            self._records = load_records(p) if p.is_file() else False
        return self._records or None

    def phase1(self) -> Optional[Dict[str, List[str]]]:
        p = self.path / "phase1.json"
        if not p.is_file():
            return None
        try:
            sel = json.loads(p.read_text()).get("selected")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ReportError(f"{p}: not a JSON object with a 'selected' entry ({e}); "
                              "re-run phase 1 or delete the file") from e
        if not isinstance(sel, dict):
            raise ReportError(f"{p}: 'selected' must map class -> [attributes], got "
                              f"{type(sel).__name__}")
        return {str(k): [str(a) for a in v] for k, v in sel.items()}


def _read_summary(path: Path) -> Dict[str, Any]:
    fix = "run the same command again to rewrite it, or delete this run folder"
    try:
        s = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x}); "
                          f"the file is damaged: {fix}") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: invalid JSON ({e}); {fix}") from None
    if not isinstance(s, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(s).__name__}; {fix}")
    missing = [k for k in REQUIRED_SUMMARY_KEYS if k not in s]
    if missing:
        raise ReportError(f"{path}: missing key(s) {missing}; the run folder was not written "
                          "by the argtca engine (or is incomplete)")
    return s


@dataclass
class RunProblem:
    """A run folder left out of the report: ``status`` is "broken" (a file cannot be read),
    "interrupted" (no summary yet) or "incomplete" (the summary does not cover the test set or
    disagrees with the records)."""
    path: Path
    status: str
    reason: str

    def line(self) -> str:
        return f"{self.status}: {self.path}: {self.reason}"


# files that mark a run folder (a run writes config.json first, then records, then the summary)
RUN_MARKERS = ("summary.json", "records.jsonl", "config.json")


def _read_config(d: Path) -> Dict[str, Any]:
    """The run's fingerprint (``config.json``), {} when absent or unreadable (the run folder's
    own checks name a damaged one when the run is resumed)."""
    try:
        cfg = json.loads((d / "config.json").read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def _expected_images(d: Path) -> Optional[int]:
    """The test-set size the run's fingerprint names (None when unknown)."""
    n = _read_config(d).get("TEST_SET.N_IMAGES")
    return int(n) if isinstance(n, int) else None


def _read_run(d: Path) -> Tuple[Optional[Run], Optional[RunProblem]]:
    summary_path, rec_path = d / "summary.json", d / "records.jsonl"
    expected = _expected_images(d)
    of = f" of {expected}" if expected is not None else ""
    records = None
    if rec_path.is_file():
        try:
            records = load_records(rec_path)
        except ReportError as e:
            return None, RunProblem(d, "broken", str(e))
    if not summary_path.is_file():
        k = 0 if records is None else len(records["conf"])
        for part in sorted(d.glob("records.rank*.jsonl")):   # an interrupted torchrun job
            try:
                k += sum(1 for line in part.read_bytes().split(b"\n") if line.strip())
            except OSError:
                pass
        return None, RunProblem(d, "interrupted", f"{k}{of} images recorded, no summary.json; "
                                "run the same command again to finish it")
    try:
        summary = _read_summary(summary_path)
    except ReportError as e:
        return None, RunProblem(d, "broken", str(e))
    n = summary.get("n")
    again = "run the same command again to finish (or re-check) it"
    if isinstance(n, int) and expected is not None and n != expected:
        return None, RunProblem(d, "incomplete", f"summary.json covers {n}{of} images; {again}")
    if records is not None and isinstance(n, int):
        idx = records.get("index")
        k = len(records["conf"])
        if idx is not None and len(np.unique(idx)) != k:
            return None, RunProblem(d, "incomplete", f"records.jsonl holds "
                                    f"{k - len(np.unique(idx))}"
                                    f" repeated image indices (two runs wrote the folder at "
                                    f"once?); {again}")
        if k != n:
            return None, RunProblem(d, "incomplete", f"summary.json covers {n} images but "
                                    f"records.jsonl holds {k}; {again}")
    if records is None or not len(records["conf"]):
        what = "no records.jsonl" if records is None else "records.jsonl holds no record"
        return None, RunProblem(d, "broken", f"{what}: the report reads a run's numbers from its "
                                "records; run the same command again to make them, or delete "
                                "this run folder")
    metrics = record_metrics(records)
    wrong = summary_disagreement(summary, metrics)
    if wrong:
        return None, RunProblem(d, "broken", f"summary.json disagrees with records.jsonl ("
                                f"{'; '.join(wrong)}): edited, or another run's; run the same "
                                "command again to rewrite it from the records, or delete this "
                                "run folder")
    run = Run(d, summary, metrics=metrics)
    run._records = records
    return run, None


def scan_runs(paths: Iterable) -> Tuple[List[Run], List[RunProblem]]:
    """The usable runs under ``paths`` (run folders, their parents, or summary.json files) and
    the folders left out, each with its reason. A missing path is an error."""
    paths = list(paths)
    folders: List[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ReportError(f"{p}: no such file or directory; pass run folders or their "
                              "parents")
        if p.is_file():
            if p.name != "summary.json":
                raise ReportError(f"{p}: expected a run folder or a summary.json file")
            folders.append(p.parent)
        else:
            folders += sorted({f.parent for m in RUN_MARKERS for f in p.rglob(m)})
    runs: Dict[Path, Run] = {}
    problems: Dict[Path, RunProblem] = {}
    for d in folders:
        d = d.resolve()
        if d in runs or d in problems:
            continue
        run, problem = _read_run(d)
        if run is not None:
            runs[d] = run
        else:
            problems[d] = problem
    return list(runs.values()), list(problems.values())


def find_runs(paths: Iterable, problems: Optional[List[RunProblem]] = None) -> List[Run]:
    """Run folders under ``paths`` (run folders, their parents, or summary.json files). Broken,
    interrupted and incomplete folders are skipped with a warning (and appended to
    ``problems`` when given); no usable run at all is an error."""
    paths = list(paths)
    runs, skipped = scan_runs(paths)
    for pr in skipped:
        _warn(f"skipped {pr.line()}")
    if problems is not None:
        problems.extend(skipped)
    if not runs:
        why = "".join(f"; {pr.line()}" for pr in skipped[:5])
        raise ReportError(f"no summary.json of a finished run under {', '.join(map(str, paths))}"
                          f"{why or '; run the methods first (scripts/compare.sh)'}")
    return runs


def duplicate_error(what: str, a: Run, b: Run) -> ReportError:
    return ReportError(f"{what}: two run folders claim the same method, dataset, seed and "
                       f"settings: {a.path} and {b.path}; delete or move one of them (or pass "
                       f"only one of the trees)")


def _relevant_overrides(run: Run) -> Dict[str, Any]:
    """The run's settings that differ from the defaults, except the ones the label names and
    the dataset's own (name, root, attribute file, test set)."""
    return {k: v for k, v in run.settings.items()
            if k not in LABEL_KEYS and not is_dataset_key(k)
            and not same_value(v, config_default(k))}


def _differing(runs: Sequence[Run], keys) -> List[str]:
    keys = sorted(keys)
    return [k for k in keys if any(not same_value(r.settings.get(k), runs[0].settings.get(k))
                                   for r in runs[1:])]


def _shown_value(k: str, values: Sequence[Any]) -> Dict[str, str]:
    """Label text per value of ``k``: a file or folder by its name when the names tell the values
    apart, a long hash by its first 8 characters."""
    text = {canonical({"v": v}): fmt_value(v) for v in values}
    if all(isinstance(v, str) and "/" in v for v in values if v):
        short = {c: t.rstrip("/").rsplit("/", 1)[-1] for c, t in text.items()}
        if len(set(short.values())) == len(short):
            text = short
    if is_hash_key(k):
        text = {c: t[:8] for c, t in text.items()}
    return text


def _sub_key(r: Run, keys) -> Tuple[str, str]:
    return r.dataset_key, canonical({k: r.settings.get(k) for k in keys})


def _assign_variants(runs: Sequence[Run]) -> None:
    """Set ``run.variant`` so that runs of different settings never share a label (and so a
    cell). Per display label: a protocol key (split, subset, backbone, weights) that differs
    anywhere in the report, a key that differs between runs of the label, or a dataset key
    (attribute file, test set, ...) that differs between runs of the label on one dataset is
    appended as ``[key=value]``, except where the run has its method's default (so the default
    run keeps its plain label). Should two settings still read alike, a short hash of the
    settings tells them apart."""
    runs = list(runs)
    if not runs:
        return
    all_keys = set().union(*(r.settings for r in runs)) - LABEL_KEYS
    protocol = set(_differing(runs, [k for k in PROTOCOL_KEYS if k in all_keys]))
    by_label: Dict[str, List[Run]] = {}
    for r in runs:
        by_label.setdefault(r.base_label, []).append(r)
    for group in by_label.values():
        global_keys = [k for k in all_keys if not is_dataset_key(k)]
        varying = set(_differing(group, global_keys)) | protocol
        # dataset keys: compared between runs of one dataset whose other settings are equal (a
        # subset of another size has another test-set hash by nature)
        per_ds: Dict[Tuple[str, str], set] = {}
        by_ds: Dict[Tuple[str, str], List[Run]] = {}
        for r in group:
            by_ds.setdefault(_sub_key(r, varying), []).append(r)
        for sub, rs in by_ds.items():
            per_ds[sub] = set(_differing(rs, [k for k in all_keys if is_dataset_key(k)]))
        shown = {k: _shown_value(k, [r.settings.get(k) for r in group])
                 for k in varying | set().union(*per_ds.values())}
        for r in group:
            keys = sorted(varying | per_ds[_sub_key(r, varying)],
                          key=lambda k: (k not in PROTOCOL_KEYS, k))
            r.variant = tuple(
                (k, shown[k][canonical({"v": r.settings.get(k)})]) for k in keys
                if not same_value(r.settings.get(k), r.default(k)))
    # the safety net: one label + dataset = one set of settings
    cells: Dict[Tuple[str, str], Dict[str, List[Run]]] = {}
    for r in runs:
        cells.setdefault((r.label, r.dataset_key), {}).setdefault(r.identity, []).append(r)
    for ids in cells.values():
        if len(ids) > 1:
            for ident, rs in ids.items():
                for r in rs:
                    r.variant = r.variant + (("settings", f"#{short_hash(ident)}"),)


def _value_key(v: Any):
    """Numbers (also as label text, e.g. "8") in numeric order, before other values."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            pass
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else (1, 0.0, str(v))


@functools.lru_cache(maxsize=1)
def declared_methods() -> Dict[str, Dict[str, Any]]:
    """method key -> its declaration (label, family, rank in table order), read from the installed
    trainers (argtca/trainers/catalogue.py) only where a summary does not say (its row order, and
    summaries written before they carried the family); empty where the trainers cannot load."""
    try:
        from ..trainers.catalogue import catalogue
    except ImportError:    # pragma: no cover - a report without torch: rows keep the summaries'
        return {}
    return {m.method: {"label": m.label, "family": m.family, "rank": i}
            for i, m in enumerate(catalogue())}


def _method_sort_key(run: Run):
    families = list(FAMILIES)
    fam = families.index(run.family) if run.family in families else len(families)
    mr = (fam, declared_methods().get(run.method, {}).get("rank", len(declared_methods())))
    s = run.selector or ""
    # a method's plain row first, then its rows with attributes chosen by a selector
    sr = -1 if not s else (SELECTOR_ORDER.index(s) if s in SELECTOR_ORDER
                           else len(SELECTOR_ORDER))
    return (mr, sr, s, run.base_label, tuple((k, _value_key(v)) for k, v in run.variant))


def _same(a: Any, b: Any) -> bool:
    return same_value(a, b)
