"""The paper's experiments, one command each (docs/workflows.md#the-papers-experiments).

    python -m argtca.experiments table1 [DATASET ...] [--seeds 1,2,3] [--baseline-config F]
                                        [KEY VALUE ...]
    python -m argtca.experiments table2 [DATASET ...]   # ablations (default: ABLATION_DATASETS)
    python -m argtca.experiments sweep  [DATASET ...]   # alpha / beta sensitivity figures
    python -m argtca.experiments table3 [DATASET ...] [--class [DATASET:]NAME ...]
    python -m argtca.experiments tune   [DATASET]       # baselines re-tuned on the val split
    python -m argtca.experiments ood DATASET --ood OOD_DATASET  # OOD detection (AUROC, FPR95)
    python -m argtca.experiments shift [--plan]  # TPT's table: ImageNet, -A, -V2, -R, -Sketch

Each command lists the datasets that are absent (and what is missing) first and runs the rest,
each run in its own experiment folder ``<out-root>/<method>/<dataset>/<hash8>/seed<N>`` (the
hash names every setting that can change a number: other settings never share a folder; a
finished run is skipped, an interrupted one resumes), goes on when a run fails (listed at the
end, exit status 1), and ends with its report under ``<out-root>/report/``. Before the first run,
what the runs share (weights, data, attribute files, CUDA) is checked once: any problem stops
every run with one message naming each problem and its fix (exit status 2, nothing written).
"""
from .plan import (ABLATION_DATASETS, BASELINES, METHODS, TABLE1_DATASETS, ExperimentError,
                   RunSpec, check_presence, load_baseline_config)
from .tables import plan_ablation, plan_sweep, plan_table1, sweep, table1, table2, table3
from .tune import DEFAULT_GRID, choose, parse_grid, tune

__all__ = ["ABLATION_DATASETS", "BASELINES", "METHODS", "TABLE1_DATASETS", "ExperimentError",
           "RunSpec", "check_presence", "load_baseline_config", "plan_ablation", "plan_sweep",
           "plan_table1", "sweep", "table1", "table2", "table3", "DEFAULT_GRID", "choose",
           "parse_grid", "tune"]
