"""The paper's experiments, one command each (README "The paper's experiments").

    python -m argtca.experiments table1 [DATASET ...] [--seeds 1,2,3] [--baseline-config F]
                                        [KEY VALUE ...]
    python -m argtca.experiments table2 [DATASET ...]   # ablations (caltech101 oxford_pets dtd)
    python -m argtca.experiments sweep  [DATASET ...]   # alpha / beta sensitivity figures
    python -m argtca.experiments table3 [DATASET ...] [--class [DATASET:]NAME ...]
    python -m argtca.experiments tune   [DATASET]       # baselines re-tuned on the val split

Each command lists the datasets that are absent (and what is missing) first and runs the rest,
starts every run (a finished folder of the same settings is only re-read, an interrupted one
resumes, one of other settings is refused naming the keys), goes on when a run fails (listed at
the end, exit status 1), and ends with its report under ``<out-root>/report/``.
"""
from .plan import (ABLATION_DATASETS, BASELINES, METHODS, TABLE1_DATASETS, ExperimentError,
                   RunSpec, check_presence, load_baseline_config)
from .tables import plan_ablation, plan_sweep, plan_table1, sweep, table1, table2, table3
from .tune import DEFAULT_GRID, choose, parse_grid, tune

__all__ = ["ABLATION_DATASETS", "BASELINES", "METHODS", "TABLE1_DATASETS", "ExperimentError",
           "RunSpec", "check_presence", "load_baseline_config", "plan_ablation", "plan_sweep",
           "plan_table1", "sweep", "table1", "table2", "table3", "DEFAULT_GRID", "choose",
           "parse_grid", "tune"]
