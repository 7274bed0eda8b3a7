"""Who provides the code a run runs, as part of the run's identity.

A selector, method (trainer), adapter or objective may come from outside argtca: a ``--plugin``
module, an installed package's entry point (group ``argtca.selectors``), or a registration over a
built-in's name with ``override=True``. Such a run computes other numbers under the same name, so
its provider is part of the run fingerprint: ``PROVIDER.<KIND>`` = "<module> (<file>)" (KIND:
SELECTOR, METHOD, ADAPTER, OBJECTIVE; absent for argtca's own code, so built-in runs keep their
fingerprints) and the provider's source file by content, ``FILE_SHA256.PLUGIN.<module>``
(:meth:`TestTimeTrainer.input_files`). A resume with another provider is refused in one line
naming the name and both providers (:func:`check_providers`); a default run folder of another
provider is another experiment folder.
"""
from __future__ import annotations

import inspect
import json
import os
from typing import Dict, Tuple

__all__ = ["PROVIDER_PREFIX", "run_providers", "provider_keys", "check_providers"]

PROVIDER_PREFIX = "PROVIDER."


def builtin_module(module: str) -> bool:
    return module == "argtca" or module.startswith("argtca.")


def source_of(obj) -> Tuple[str, str]:
    """(module, absolute source file or "") of a registered function or class."""
    try:
        file = inspect.getsourcefile(obj) or ""
    except TypeError:
        file = ""
    return str(getattr(obj, "__module__", "") or ""), os.path.abspath(file) if file else ""


def run_providers(trainer) -> Dict[str, Tuple[str, str]]:
    """kind -> (module, file) of each of ``trainer``'s pieces of code that is not argtca's:
    METHOD (its class), SELECTOR (``selector_impl``, resolved at load time, when the run uses a
    selector), ADAPTER (``adapter_cls`` of the training-free and online methods), OBJECTIVE,
    ENGINE (``TTA.ENGINE`` as resolved)."""
    from argtca.registry import OBJECTIVE_REGISTRY
    found: Dict[str, object] = {"METHOD": type(trainer)}
    if getattr(trainer, "selector", None) is not None:
        sel = getattr(trainer, "selector_impl", None)
        if sel is not None:
            found["SELECTOR"] = (sel.module, os.path.abspath(sel.file) if sel.file else "")
    if getattr(trainer, "adapter_name", ""):
        found["ADAPTER"] = trainer.adapter_cls
    try:
        found["OBJECTIVE"] = OBJECTIVE_REGISTRY.get(trainer.objective_name)
    except KeyError:   # reported when the model is built
        pass
    from argtca.registry import ENGINE_REGISTRY
    engine = str(trainer.cfg.TTA.get("ENGINE", "") or "")
    if engine and engine != "auto" and engine in ENGINE_REGISTRY:
        found["ENGINE"] = ENGINE_REGISTRY.get(engine)
    out: Dict[str, Tuple[str, str]] = {}
    for kind, obj in found.items():
        module, file = obj if isinstance(obj, tuple) else source_of(obj)
        if not builtin_module(module):
            out[kind] = (module, file)
    return out


def provider_keys(providers: Dict[str, Tuple[str, str]]) -> Dict[str, str]:
    """The fingerprint keys of :func:`run_providers`' answer."""
    return {f"{PROVIDER_PREFIX}{kind}": f"{module} ({file or '?'})"
            for kind, (module, file) in providers.items()}


def check_providers(trainer, out_dir: str) -> None:
    """Refuse (ConfigMismatchError, one line) records in ``out_dir`` made while another provider
    supplied one of ``trainer``'s selector, method, adapter or objective."""
    from argtca.run_folder import ConfigMismatchError, has_records
    path = os.path.join(out_dir, "config.json")
    if not has_records(out_dir) or not os.path.isfile(path):
        return
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):   # check_or_write_fingerprint names a damaged file
        return
    if not isinstance(old, dict):
        return
    fp = trainer.fingerprint()
    names = {"SELECTOR": f'selector "{trainer.selector}"',
             "METHOD": f"method {trainer.method} (trainer {type(trainer).__name__})",
             "ADAPTER": f'adapter "{getattr(trainer, "adapter_name", "")}"',
             "OBJECTIVE": f'objective "{trainer.objective_name}"',
             "ENGINE": f'engine "{trainer.cfg.TTA.get("ENGINE", "")}"'}
    kinds = sorted({k[len(PROVIDER_PREFIX):] for k in list(old) + list(fp)
                    if k.startswith(PROVIDER_PREFIX)})
    for kind in kinds:
        then, now = old.get(PROVIDER_PREFIX + kind), fp.get(PROVIDER_PREFIX + kind)
        if then != now:
            what = names.get(kind, kind.lower())
            raise ConfigMismatchError(
                f"{out_dir} holds records made with {what} provided by "
                f"{then or 'argtca (built-in)'}, but this run's {what} is provided by "
                f"{now or 'argtca (built-in)'} (a --plugin, or an installed package whose entry "
                f"point registers it with override=True): remove or uninstall that provider to "
                f"resume these records, or use another --output-dir (or delete {out_dir}) to "
                f"start over")
