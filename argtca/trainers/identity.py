"""A run's identity: the files it reads (by content), the code that provides it, its fingerprint
(``config.json``) and the folder that fingerprint names.

:class:`RunIdentity` is the part of :class:`argtca.trainers.base.TestTimeTrainer` that answers
"which experiment is this run, and where does it live"; the loop is in base.py.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Tuple

from argtca.config import get_cfg_default
from argtca.run_folder import (INPUT_HASH_PREFIX, compatible_folder, experiment_hash,
                               flatten_cfg, run_fingerprint)

__all__ = ["RunIdentity", "default_output_dir", "readable_settings", "input_hashes"]


def default_output_dir(method: str, dataset_key: str, fingerprint: Dict[str, object],
                       root: str = "output") -> str:
    """``<root>/<method>/<dataset>/<hash8>/seed<N>``: ``hash8`` names every setting that can
    change a number (the run fingerprint without the seed: config keys, test set, device type,
    input file contents), so runs of other settings never share a folder and the same settings
    always find theirs (to resume or re-read). The seeds of one experiment are siblings. A run
    an earlier version fingerprinted under another ``hash8`` is found there
    (:func:`argtca.run_folder.compatible_folder`)."""
    seed = fingerprint.get("SEED", 1)
    exp_root = os.path.join(root, method, dataset_key)
    out = os.path.join(exp_root, experiment_hash(fingerprint), f"seed{seed}")
    if not os.path.isfile(os.path.join(out, "config.json")) and os.path.isdir(exp_root):
        return compatible_folder(exp_root, seed, fingerprint) or out
    return out


def readable_settings(cfg, fingerprint: Dict[str, object], paths: Dict[str, str]) -> dict:
    """What an experiment folder ``<hash8>/`` stands for, for people: the keys of its
    fingerprint that differ from the defaults (the seed aside; another method's node is none
    of them) and the input files with their sha256."""
    default = flatten_cfg(get_cfg_default())
    flat = flatten_cfg(cfg)
    return {"experiment": experiment_hash(fingerprint),
            "overrides": {k: v for k, v in sorted(flat.items())
                          if default.get(k) != v and k != "SEED" and k in fingerprint},
            "inputs": {role: {"path": paths.get(role, ""), "sha256": v}
                       for role, v in input_hashes(fingerprint).items()},
            "test_set": {k: v for k, v in fingerprint.items() if k.startswith("TEST_SET.")},
            "device_type": fingerprint.get("RUN.DEVICE_TYPE")}


def input_hashes(fingerprint: Dict[str, object]) -> Dict[str, str]:
    """role -> sha256 of the input files of a fingerprint."""
    n = len(INPUT_HASH_PREFIX)
    return {k[n:]: str(v) for k, v in fingerprint.items() if k.startswith(INPUT_HASH_PREFIX)}


class RunIdentity:
    """Mixin of the trainer: expects ``cfg``, ``dataset``, ``device`` and ``method``."""

    # files given on the command line that the run reads (``--plugin`` modules): role -> path
    plugin_files: Dict[str, str] = {}
    # the method nodes (TRAINER.<NODE>) this trainer reads besides its own (config_nodes)
    reads_nodes: Tuple[str, ...] = ()

    @classmethod
    def config_nodes(cls, cfg) -> Tuple[str, ...]:
        """The method nodes a run of this trainer under ``cfg`` reads, the only ones its
        fingerprint holds (so a new method's node moves no other method's folder): the node its
        prompts and objective read (its own, ``TRAINER.<NODE>`` as declared, or ``base_node``:
        the base method's, e.g. a temperature-scaled variant's), its own, and ``reads_nodes``. A
        trainer that reads another node only under some settings adds it here for those
        (zoo.py: ``TTA.PROMPTS attributes``)."""
        from argtca.config.methods import node_of
        own = node_of(cls)
        return tuple(dict.fromkeys((str(getattr(cls, "base_node", "") or own), own,
                                    *cls.reads_nodes)))

    def more_weights(self) -> List[Tuple[str, str, str]]:
        """Model weights this run loads besides ``MODEL.PRETRAINED``, as (key prefix, backbone,
        pretrained): the preflight checks they can be had before the first run starts, and names
        ``<prefix>_BACKBONE`` / ``<prefix>_PRETRAINED`` in its message (RLCF's reward model)."""
        return []

    def input_files(self) -> Dict[str, str]:
        """role -> path of every file this run reads that can change a number: the weights file,
        CoOp's context checkpoint, the split and class-name files, the attribute file (methods
        that read one expose ``attribute_file``) and plug-in modules. Each enters the fingerprint
        by its sha256 (argtca/utils/hashing.py)."""
        cfg = self.cfg
        files: Dict[str, str] = {}
        weights = os.path.expanduser(str(cfg.MODEL.PRETRAINED))
        if os.path.isfile(weights):
            files["MODEL.PRETRAINED"] = weights
        coop = getattr(self, "coop_context", None)
        if coop is not None:
            files["TTA.CTX_CHECKPOINT"] = str(coop["file"])
        split = getattr(self.dataset, "split_path", "")
        if split and os.path.isfile(split):
            files["SPLIT_FILE"] = str(split)
        node = cfg.DATASET.get("IMAGEFOLDER", None)
        root = getattr(self.dataset, "root", "") or ""
        for key in ("SPLIT_FILE", "CLASSNAMES"):
            value = os.path.expanduser(str(node.get(key, "") if node is not None else "").strip())
            path = value if os.path.isabs(value) else os.path.join(root, value)
            if value and os.path.isfile(path):
                files[f"DATASET.IMAGEFOLDER.{key}"] = path
        try:
            attributes = getattr(self, "attribute_file", None)
        except Exception:   # noqa: BLE001 (resolved and reported by the method at load time)
            attributes = None
        if attributes and os.path.isfile(str(attributes)):
            files["DATASET.ATTRIBUTE_FILE"] = str(attributes)
        files.update(self.plugin_code_files())
        return files

    def plugin_code_files(self) -> Dict[str, str]:
        """role -> file of the plug-in code this run runs: of each provider of its method,
        selector, adapter, objective or engine that is not argtca's own, the module's whole
        closure (argtca/utils/code.py: its package's files and what it imported). A
        ``--plugin`` that provides none of them is not read by this run and stays out of its
        fingerprint. A role is the ``--plugin`` name of its file, else its module's name."""
        from argtca.utils.code import module_closure
        providers = self.providers()
        if not providers:   # argtca's own code only: no module to name (most runs)
            return {}
        by_file = {os.path.realpath(p): n for n, p in sorted(self.plugin_files.items())}
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None)
            if f and os.path.realpath(f) not in by_file:
                by_file[os.path.realpath(f)] = name
        files: Dict[str, str] = {}
        seen = set()
        for kind, (module, file) in sorted(providers.items()):
            for path in module_closure(module, file):
                real = os.path.realpath(path)
                if real in seen:
                    continue
                seen.add(real)
                files[f"PLUGIN.{by_file.get(real, path)}"] = path
        return files

    def providers(self) -> Dict[str, Tuple[str, str]]:
        """kind -> (module, source file) of this run's code that is not argtca's own
        (argtca/trainers/providers.py): it enters the fingerprint as ``PROVIDER.<kind>`` and its
        file as ``FILE_SHA256.PLUGIN.<module>``."""
        from argtca.trainers.providers import run_providers
        return run_providers(self)

    def fingerprint(self) -> Dict[str, object]:
        """The run fingerprint (config.json): result-defining keys, the test set, the device
        type and the sha256 of each input file; computed once (the inputs are hashed then)."""
        if getattr(self, "_fingerprint", None) is None:
            from argtca.utils.hashing import file_sha256
            paths = self.input_files()
            hashes = {}
            for role, path in paths.items():
                try:
                    hashes[role] = file_sha256(path)
                except OSError as e:
                    raise OSError(e.errno, f"cannot read {role} ({e.strerror})", path) from None
            # the files read at load time hold what was read (argtca/utils/hashing.py)
            from argtca.utils.hashing import check_read
            check_read(paths, hashes)
            self.input_paths = paths
            fp = run_fingerprint(self.cfg, self.dataset, self.device.type, hashes,
                                 nodes=type(self).config_nodes(self.cfg),
                                 tunes=bool(getattr(self, "tunes", True)))
            from argtca.trainers.providers import provider_keys
            fp.update(provider_keys(self.providers()))
            # the code that computes it: recorded, checked on resume, not in the folder's hash
            from argtca.utils.code import code_keys
            fp.update(code_keys())
            fp.update(self.fingerprint_extra())
            self._fingerprint = dict(sorted(fp.items()))
        return self._fingerprint

    def fingerprint_extra(self) -> Dict[str, object]:
        """Keys a trainer adds to its run's fingerprint (an online method: its stream order's
        hash, argtca/trainers/stream.py); none by default."""
        return {}

    def check_providers(self, out_dir: str) -> None:
        """Records made by another provider of a selector, method, adapter or objective: one line
        naming it and both providers (argtca/trainers/providers.py)."""
        from argtca.trainers.providers import check_providers
        check_providers(self, out_dir)

    def output_dir(self) -> str:
        """``--output-dir`` when given (another run's settings there are refused); otherwise
        ``<OUTPUT_ROOT>/<method>/<dataset>/<hash8>/seed<N>`` (:func:`default_output_dir`)."""
        if self.cfg.OUTPUT_DIR and self.cfg.OUTPUT_DIR != get_cfg_default().OUTPUT_DIR:
            return self.cfg.OUTPUT_DIR
        return default_output_dir(self.method, self.dataset.key or self.dataset.name,
                                  self.fingerprint(), str(self.cfg.get("OUTPUT_ROOT", "output")
                                                          or "output"))

    @property
    def explicit_output_dir(self) -> bool:
        return bool(self.cfg.OUTPUT_DIR) and self.cfg.OUTPUT_DIR != get_cfg_default().OUTPUT_DIR

    def run_session(self, out_dir: str, **how):
        """The run's life in ``out_dir`` (:class:`argtca.run_folder.RunSession`): what this run
        is, as the session takes it; ``how``: how it executes (torchrun's ``rank``,
        ``rank_files``, ``agree``)."""
        from argtca.run_folder import RunSession
        return RunSession(
            out_dir, self.dataset, self.fingerprint, input_paths=lambda: self.input_paths,
            # what <hash8>/ stands for, where the folder is named by the run's hash
            settings=(None if self.explicit_output_dir else
                      lambda: readable_settings(self.cfg, self.fingerprint(), self.input_paths)),
            checks=(self.check_providers,),
            allow_code_change=str(self.cfg.RUN.get("CODE_CHANGE", "refuse")) == "allow", **how)
