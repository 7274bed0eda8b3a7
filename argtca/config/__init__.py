"""argtca's configuration (yacs): every default in ``defaults.py``, the value checks in
``checks.py``. ``configs/trainers/<method>.yaml`` and ``configs/datasets/<name>.yaml`` are merged
on top of the defaults; unknown keys are errors."""
from argtca.config.checks import (CFG_CHOICES, ConfigError,  # noqa: F401
                                  check_cfg_values)
from argtca.config.defaults import SWITCH_KEYS, get_cfg_default  # noqa: F401
