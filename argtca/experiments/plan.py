"""What the experiment commands share: run specifications, their run folders, which datasets
are present, and running a list of runs (in this process, one after the other).

Every run goes to ``argtca.run``'s own folder under the out-root,
``<out-root>/<method>/<dataset>/<hash8>/seed<N>``, ``hash8`` naming every setting that can change
a number (the run fingerprint without the seed). The folder is known before anything runs: the
run's configuration, dataset (image list only) and trainer are built without the model and its
fingerprint taken (:func:`resolve_run_dirs`), exactly as the run will. So runs of other settings
(another subset, another override) never meet, a finished run (its ``summary.json`` there) is
skipped, an interrupted one resumes, and a command can be repeated after a crash.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..config.paths import configs_dir, repo_dir
from ..datasets.catalogue import ablation_datasets, table1_datasets
from ..trainers.catalogue import method_config_args, method_names, method_sets

REPO = repo_dir()
CONFIGS = configs_dir()

# Table 1's rows in the report's order of families, from the trainers' declarations
# (argtca/trainers/catalogue.py): the paper's rows, then the field's training-free and online
# methods; the names that stand for a list in --methods
METHOD_SETS = method_sets()
PAPER_METHODS, ZOO_METHODS, METHODS = (METHOD_SETS[k] for k in ("paper", "zoo", "all"))
BASELINES = METHOD_SETS["baselines"]
# the ArgTCA paper's Table 1: nine fine-grained sets (configs/datasets keys), in its order; the
# sets table1 --extended adds (C-TPT's and TCA's tables have them); the ablations' defaults: each
# as the dataset classes declare it (argtca/datasets/catalogue.py)
TABLE1_DATASETS = table1_datasets()
TABLE1_EXTENSION = [d for d in table1_datasets(extended=True) if d not in TABLE1_DATASETS]
ABLATION_DATASETS = ablation_datasets()
# methods reading an attribute file (DATASET.ATTRIBUTE_FILE or the dataset's TCA file)
NEEDS_ATTRIBUTES = ("tca", "argtca")


class ExperimentError(ValueError):
    """Bad input to an experiment command: one line naming the value and the fix."""


def split_method(name: str) -> Tuple[str, Optional[str]]:
    """``argtca-div`` -> ("argtca", "div"); ``tpt`` -> ("tpt", None)."""
    name = name.strip().lower()
    if name.startswith("argtca-") or name.startswith("argtca:"):
        return "argtca", name[7:]
    if name in BASELINES or (name and (CONFIGS / "trainers" / f"{name}.yaml").is_file()
                             and name != "argtca"):
        return name, None   # also e.g. zeroshot_ts / tpt_ts (configs/trainers/<name>.yaml)
    declared = [m for m in method_names() if m != "argtca"]   # plug-ins (--plugin) too
    if name in declared:
        return name, None
    known = sorted(set(f.stem for f in (CONFIGS / "trainers").glob("*.yaml") if f.stem != "argtca")
                   | set(declared))
    raise ExperimentError(f"unknown method {name!r}; choose from {', '.join(known)} or "
                          f"argtca-SELECTOR (e.g. {', '.join(METHODS[-2:])})")


def expand_methods(names: Sequence[str], plugins: Sequence[str] = (),
                   default: Optional[Sequence[str]] = None) -> List[str]:
    """``--methods`` as run keys: a set's name (``all``, ``paper``, ``zoo``, ``baselines``) stands
    for its rows as the registry holds them once the ``--plugin`` modules are imported (so
    ``all`` includes a loaded plug-in's method); no name: ``default``, or ``all``."""
    if plugins:
        from ..plugins import load_plugins
        load_plugins(plugins)
    sets = method_sets()
    out = [m for name in names for m in sets.get(str(name).strip().lower(), [name])]
    return list(dict.fromkeys(out)) or list(default if default is not None else sets["all"])


def dataset_yaml(ds: str) -> Path:
    p = CONFIGS / "datasets" / f"{ds}.yaml"
    if not p.is_file():
        known = sorted(f.stem for f in (CONFIGS / "datasets").glob("*.yaml"))
        raise ExperimentError(f"no configs/datasets/{ds}.yaml; available: {', '.join(known)}")
    return p


def check_opts(opts: Sequence[str], what: str = "overrides") -> List[str]:
    """KEY VALUE pairs, each key known to argtca/config/defaults.py (checked now, not after
    hours)."""
    opts = list(opts)
    if opts and opts[0] == "--":
        opts = opts[1:]
    if len(opts) % 2:
        raise ExperimentError(f"{what} must be KEY VALUE pairs, got: {' '.join(opts)}")
    from ..config import get_cfg_default
    default = get_cfg_default()
    for k in opts[::2]:
        node = default
        for part in k.split("."):
            if not hasattr(node, "get") or part not in node:
                raise ExperimentError(f"{what}: unknown config key {k}; every key and its "
                                      f"default is in argtca/config/defaults.py")
            node = node[part]
    return opts


@dataclass
class RunSpec:
    """One run of ``python -m argtca.run``. With ``out_root`` the run picks its own folder under
    it (``<out_root>/<method>/<dataset>/<hash8>/seed<N>``; ``out`` is that folder once
    :func:`resolve_run_dirs` has worked it out); otherwise ``out`` is passed as ``--output-dir``
    (a folder of other settings is then refused)."""
    method: str                  # zeroshot | tpt | ctpt | otpt | atpt | tca | argtca
    dataset: str                 # configs/datasets key
    seed: int
    out: Optional[Path] = None
    selector: Optional[str] = None
    overrides: List[str] = field(default_factory=list)
    label: str = ""
    out_root: Optional[Path] = None

    def argv(self, root: str, plugins: Sequence[str] = ()) -> List[str]:
        a: List[str] = []
        for p in plugins:
            a += ["--plugin", p]
        # the demo reads no data root: "" keeps its command the same whatever --root is
        a += ["--root", "" if self.dataset == "demo" else (root or ""), "--seed", str(self.seed),
              "--dataset-config-file", str(dataset_yaml(self.dataset))]
        a += method_config_args(self.method)
        a += (["--output-root", str(self.out_root)] if self.out_root is not None
              else ["--output-dir", str(self.out)])
        if self.method == "argtca":
            a += ["TRAINER.ARGTCA.SELECTOR", str(self.selector)]
        return a + [str(x) for x in self.overrides]

    @property
    def name(self) -> str:
        m = f"argtca-{self.selector}" if self.method == "argtca" else self.method
        return self.label or f"{m} on {self.dataset}, seed {self.seed}"

    @property
    def where(self) -> str:
        """The run folder, or where it will be when it could not be worked out beforehand."""
        if self.out is not None:
            return str(self.out)
        return f"{self.out_root}/{self.method}/{self.dataset}/<hash8>/seed{self.seed}"


def _resolve_one(spec: RunSpec, root: str, plugins: Sequence[str],
                 datasets: Dict[str, object]) -> Path:
    """The folder ``argtca.run`` will pick for ``spec``: the trainer's own ``output_dir()``
    (:func:`build_run_trainer`), so the fingerprint is the run's by construction."""
    return Path(build_run_trainer(spec, root, plugins, datasets).output_dir())


def build_run_trainer(spec: RunSpec, root: str, plugins: Sequence[str],
                      datasets: Dict[str, object], device: Optional[str] = None):
    """``spec``'s configuration and trainer built as ``argtca.run`` builds them, without the
    model: its ``output_dir()``, ``fingerprint()`` (config, test set, device, input file
    contents) and test set are the run's. Datasets are built once per DATASET node (cached in
    ``datasets``), without the image check (the run does it). ``device``: the device type of
    the machine the run will run on ("cuda": a cluster's GPU node; the run still computes on
    the CPU where ``USE_CUDA`` is off), None for this machine's."""
    from ..datasets import build_dataset
    from ..run_folder import flatten_cfg
    from ..registry import TRAINER_REGISTRY
    from ..run import build_parser, plugin_files, setup_cfg
    import argtca.trainers  # noqa: F401  (registration)
    cfg = setup_cfg(build_parser().parse_args(spec.argv(root, plugins)))
    node = {k: v for k, v in flatten_cfg(cfg.DATASET).items() if k != "CHECK_IMAGES"}
    key = json.dumps(node, sort_keys=True, default=str)
    if key not in datasets:
        dcfg = cfg.clone()
        dcfg.defrost()
        dcfg.DATASET.CHECK_IMAGES = "off"
        dcfg.freeze()
        datasets[key] = build_dataset(dcfg)
    if device is not None:
        device = "cuda" if device == "cuda" and cfg.USE_CUDA else "cpu"
    trainer = TRAINER_REGISTRY.get(cfg.TRAINER.NAME)(cfg, dataset=datasets[key], device=device)
    trainer.plugin_files = plugin_files(plugins)
    return trainer


def resolve_run_dirs(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = ()) -> None:
    """Set ``out`` of every spec with an ``out_root`` to the folder its run will use. A spec
    whose run cannot even be set up (missing weights or data, a bad value) keeps ``out`` None:
    the run is started anyway and prints its own one-line error, like any failed run."""
    todo = [s for s in specs if s.out_root is not None and s.out is None]
    if not todo:
        return
    if plugins:
        from ..plugins import load_plugins
        load_plugins(plugins)
    datasets: Dict[str, object] = {}
    for s in todo:
        # the run prints its own notes (engine choice, a CPU-time warning) when it starts
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                s.out = _resolve_one(s, root, plugins, datasets)
            except (Exception, SystemExit):   # noqa: BLE001 (reported by the run itself)
                s.out = None


# ----------------------------------------------------------------------------- presence
@dataclass
class Presence:
    dataset: str
    present: bool
    why: str = ""                       # what is missing and the fix (absent datasets)
    attributes: Optional[str] = None    # the attribute file, when it can be had
    attributes_problem: str = ""        # why TCA/ArgTCA cannot run (present datasets)


def check_presence(datasets: Sequence[str], root: str, split: str = "test",
                   opts: Sequence[str] = (), need_attributes: bool = True) -> List[Presence]:
    """Per dataset: is its data under ``root`` (the data doctor's check, without opening the
    images; the run checks them at load), and can its attribute file be had (given, cached, or
    fetched now)? The demo is always present."""
    from ..data.doctor import PRESENT, check_dataset
    from ..datasets import resolve_dataset_class
    out = []
    for ds in datasets:
        dataset_yaml(ds)
        if ds == "demo":
            pr = Presence(ds, True)
        elif not root:
            pr = Presence(ds, False, "no data root: set $DATA or pass --root /path/to/data "
                                     "(python -m argtca.data check shows what is there)")
        elif not os.path.isdir(root):
            pr = Presence(ds, False, f"data root {root} does not exist")
        else:
            from .select_attributes import build_cfg
            name = str(build_cfg(ds, []).DATASET.NAME)
            rep = check_dataset(resolve_dataset_class(name), root, split=split,
                                open_images=False)
            pr = Presence(ds, rep.status == PRESENT,
                          "; ".join(rep.notes + [f"fix: {f}" for f in rep.fixes]))
        if pr.present and need_attributes:
            from ..attributes.files import attribute_file_for
            from .select_attributes import build_cfg
            try:
                pr.attributes = attribute_file_for(build_cfg(ds, list(opts)))
            except (ValueError, OSError) as e:   # AttributeFileError / FetchError are ValueErrors
                pr.attributes_problem = str(e).replace("\n", " ")
        out.append(pr)
    return out


def presence_lines(pres: Sequence[Presence], methods_need_attributes: bool,
                   names: str = "TCA and ArgTCA") -> List[str]:
    """The first lines of a command: the absent datasets (with what is missing) and, per present
    dataset without an attribute file, the methods ``names`` left out there and why."""
    lines = []
    absent = [p for p in pres if not p.present]
    if absent:
        lines.append(f"absent ({len(absent)} of {len(pres)} datasets; not run):")
        lines += [f"  {p.dataset}: {p.why}" for p in absent]
    if methods_need_attributes:
        for p in pres:
            if p.present and p.attributes_problem:
                lines.append(f"  {p.dataset}: {names} not run: {p.attributes_problem}")
    here = [p.dataset for p in pres if p.present]
    lines.append(f"present: {', '.join(here) if here else 'none'}")
    return lines


# ----------------------------------------------------------------------------- running
@dataclass
class Outcome:
    spec: RunSpec
    rc: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.spec.out is not None and \
            (self.spec.out / "summary.json").is_file()


def finished(spec: RunSpec) -> bool:
    """A hash-keyed run folder with its summary: these settings already ran to the end."""
    return spec.out_root is not None and spec.out is not None and \
        (spec.out / "summary.json").is_file() and (spec.out / "config.json").is_file()


def holds_run(out: Optional[Path], fp) -> bool:
    """An explicit run folder (``--output-dir``) holding the summary of exactly the run whose
    fingerprint is ``fp`` (its ``config.json``)."""
    if out is None or fp is None or not (out / "summary.json").is_file():
        return False
    from ..utils.code import without_code   # a finished run is re-read under any code
    try:
        return without_code(json.loads((out / "config.json").read_text())) == \
            without_code(json.loads(json.dumps(fp, default=str)))
    except (OSError, ValueError, AttributeError):
        return False


def finished_runs(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = ()
                  ) -> List[RunSpec]:
    """The specs that already ran to the end (the run only re-reads them): a hash-keyed folder
    with its summary (:func:`finished`), or an explicit folder (tune's grid points) holding the
    summary of exactly this run, its trainer built as the run will build it."""
    done, datasets = [], {}
    for s in specs:
        if s.out_root is None and s.out is not None and (s.out / "summary.json").is_file():
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                try:
                    fp = build_run_trainer(s, root, plugins, datasets).fingerprint()
                except (Exception, SystemExit):   # noqa: BLE001 (the run reports it)
                    fp = None
            if holds_run(s.out, fp):
                done.append(s)
        elif finished(s):
            done.append(s)
    return done


def failure_lines(outcomes: Sequence[Outcome], tag: str) -> List[str]:
    bad = [o for o in outcomes if not o.ok]
    if not bad:
        return []
    return [f"[{tag}] {len(bad)} of {len(outcomes)} run(s) failed and are not in the report "
            f"(run the same command again after fixing them; finished runs are only re-read):"
            ] + [f"  {o.spec.name}: exit {o.rc}, {o.spec.where}" for o in bad]


def as_float(v) -> str:
    """yacs refuses an int for a float key: 5 -> '5.0' (as sweep.sh does)."""
    s = str(v)
    return s if any(c in s for c in ".eE") else f"{s}.0"


def value_for(key: str, v) -> str:
    """A value as ``KEY VALUE`` text in the type of the key's default (5 -> '5.0' for a float
    key, since yacs refuses an int there)."""
    from ..report.identity import config_default
    d = config_default(key)
    if (isinstance(d, float) or d is None) and not isinstance(v, bool):
        try:   # a None default ("auto", e.g. TRAINER.TCA.ALPHA) takes a float when numeric
            float(v)
        except (TypeError, ValueError):
            return str(v)
        return as_float(v)
    return str(v)


def load_baseline_config(path) -> Dict[str, List[str]]:
    """``tuned.yaml`` written by ``python -m argtca.experiments tune``: ``method: {KEY: value}``
    -> {method: [KEY, value, ...]}; every method and key is checked now."""
    import yaml
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ExperimentError(f"--baseline-config {p}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ExperimentError(f"--baseline-config {p}: malformed YAML ({e}); fix the file or "
                              f"write it again with python -m argtca.experiments tune") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"--baseline-config {p}: expected a mapping method -> "
                              f"{{KEY: value}}, got {type(data).__name__}")
    out: Dict[str, List[str]] = {}
    for m, kv in data.items():
        if str(m).lower() not in BASELINES:
            raise ExperimentError(f"--baseline-config {p}: unknown method {m!r}; methods are "
                                  f"{', '.join(BASELINES)}")
        if not isinstance(kv, dict):
            raise ExperimentError(f"--baseline-config {p}: {m}: expected {{KEY: value}}, got "
                                  f"{kv!r}")
        flat: List[str] = []
        for k, v in kv.items():
            flat += [str(k), value_for(str(k), v)]
        out[str(m).lower()] = check_opts(flat, f"--baseline-config {p}: {m}")
    return out
