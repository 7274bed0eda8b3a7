"""Registries with Dassl's API (``Registry(name)``, ``@REG.register()``, ``REG.get``,
``REG.registered_names()``).

Differences from Dassl: ``register`` accepts an optional explicit name (so a selector function
``div`` or a trainer class ``ArgTCA`` is looked up by the name users type), lookups are
case-insensitive, and an unknown name raises ``KeyError`` listing every registered name. A name
registered twice is an error naming both owners unless the second asks for it (``override=True``,
Dassl's ``force``). Other keyword arguments of ``register`` are traits kept with the entry
(``REG.traits(name)``), e.g. a selector's ``needs_graph``.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional

__all__ = ["Registry", "TRAINER_REGISTRY", "DATASET_REGISTRY", "SELECTOR_REGISTRY",
           "OBJECTIVE_REGISTRY", "ENGINE_REGISTRY", "ADAPTER_REGISTRY"]


class Registry:
    def __init__(self, name: str):
        self._name = name
        self._obj_map: Dict[str, Any] = {}
        self._names: Dict[str, str] = {}  # lower-cased key -> name as registered
        self._traits: Dict[str, Dict[str, Any]] = {}  # lower-cased key -> register()'s traits

    def _do_register(self, name: str, obj: Any, force: bool = False,
                     traits: Optional[Dict[str, Any]] = None) -> None:
        key = name.lower()
        if key in self._obj_map and not force and self._obj_map[key] is not obj:
            raise KeyError(f'An object named "{name}" was already registered in the '
                           f'"{self._name}" registry by {owner(self._obj_map[key])}; '
                           f'{owner(obj)} registers it again: choose another name, or pass '
                           f'override=True to register() to replace it')
        self._obj_map[key] = obj
        self._names[key] = name
        self._traits[key] = dict(traits or {})

    def register(self, obj: Any = None, name: Optional[str] = None, force: bool = False,
                 override: bool = False, **traits: Any):
        """``@REG.register()``, ``@REG.register(name="div")`` or ``REG.register(obj)``;
        ``override=True`` replaces an entry of that name on purpose; ``**traits`` are kept."""
        force = force or override
        if obj is None or isinstance(obj, str):
            if isinstance(obj, str):
                name = obj

            def deco(o: Any) -> Any:
                self._do_register(name or o.__name__, o, force=force, traits=traits)
                return o
            return deco
        self._do_register(name or obj.__name__, obj, force=force, traits=traits)
        return obj

    def traits(self, name: str) -> Dict[str, Any]:
        """The keyword arguments ``register`` was given for ``name`` besides its name."""
        self.get(name)
        return dict(self._traits.get(str(name).lower(), {}))

    def get(self, name: str) -> Any:
        key = str(name).lower()
        if key not in self._obj_map:
            raise KeyError(f'"{name}" is not in the {self._name} registry; registered: '
                           f'{", ".join(self.registered_names()) or "(none)"}')
        return self._obj_map[key]

    def __contains__(self, name: str) -> bool:
        return str(name).lower() in self._obj_map

    def registered_names(self) -> List[str]:
        return sorted(self._names.values(), key=str.lower)

    def registered_objects(self) -> List[Any]:
        """The registered objects in the order they were first registered (the order a
        catalogue of them lists them in)."""
        return list(self._obj_map.values())

    def __repr__(self) -> str:
        return f"Registry({self._name!r}, {self.registered_names()})"


def owner(obj: Any) -> str:
    """``module.name (file)`` of a registered object, to name it in errors and records."""
    try:
        where = inspect.getsourcefile(obj) or "?"
    except TypeError:
        where = "?"
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)} ({where})"


TRAINER_REGISTRY = Registry("TRAINER")
DATASET_REGISTRY = Registry("DATASET")
SELECTOR_REGISTRY = Registry("SELECTOR")
OBJECTIVE_REGISTRY = Registry("OBJECTIVE")
# test-time engines (``TTA.ENGINE``): classes built as ``cls(model, text_encoder, objective, cfg,
# device, n_images=...)``; a class attribute ``batched`` says whether the loader feeds it
# ``TTA.BATCH_IMAGES`` images at a time (else one)
ENGINE_REGISTRY = Registry("ENGINE")
# feature-level test-time rules of the training-free and online methods (argtca/adapters):
# classes built as ``cls(node, cfg, text [K, E], logit_scale)``; the trait ``online`` says whether
# one carries state from image to image (the stream engine)
ADAPTER_REGISTRY = Registry("ADAPTER")
