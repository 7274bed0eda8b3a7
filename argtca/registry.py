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

import importlib
import inspect
import sys
from typing import Any, Dict, List, Optional

__all__ = ["PluginError", "PLUGIN_PACKAGE", "METHODS_GROUP", "BUILTIN_METHOD_PACKAGES",
           "load_entry_points", "load_builtin_methods", "builtin_package_loaded",
           "declare_method", "set_method_factory", "flush_declared_methods", "Registry",
           "TRAINER_REGISTRY", "DATASET_REGISTRY", "SELECTOR_REGISTRY", "OBJECTIVE_REGISTRY",
           "ENGINE_REGISTRY", "ADAPTER_REGISTRY"]


# plug-in files are imported as submodules of this package name, so a file called random.py or
# json.py registers its code without replacing the standard library's module of that name
PLUGIN_PACKAGE = "_argtca_plugins"
METHODS_GROUP = "argtca.methods"


class PluginError(RuntimeError):
    """A plug-in that cannot be loaded or declared: the message names it and the fix."""


def _dist(ep) -> str:
    return getattr(getattr(ep, "dist", None), "name", "?")


def load_entry_points(group: str, registry=None, kind: str = "plug-in") -> List[str]:
    """Load every installed entry point of ``group``: a module is imported (its decorators
    register); with a ``registry``, a function is registered under the entry point's name
    unless it registered itself. Returns the entry points' names."""
    from importlib.metadata import entry_points
    try:
        eps = entry_points(group=group)
    except TypeError:  # Python < 3.10
        eps = entry_points().get(group, [])
    names = []
    for ep in eps:
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 (any failure of third-party code: one clear line)
            raise PluginError(
                f"{kind} entry point {ep.name} = {ep.value} (group {group}, package {_dist(ep)}) "
                f"failed to load ({type(e).__name__}: {e}); fix or uninstall that package") from e
        if registry is not None and callable(obj) and not inspect.ismodule(obj) \
                and not inspect.isclass(obj):
            registered = {id(registry.get(n)) for n in registry.registered_names()}
            if id(obj) not in registered:
                if ep.name in registry:   # a taken name is replaced only on purpose
                    raise PluginError(
                        f"{kind} entry point {ep.name} = {ep.value} (group {group}, package "
                        f"{_dist(ep)}) takes the name of the registered {kind} {ep.name!r}; "
                        f"rename the entry point, or register the function in its module with "
                        f"@{registry._name}_REGISTRY.register(name={ep.name!r}, override=True) "
                        f"to replace it on purpose (runs then record the package as its "
                        f"provider)")
                registry.register(obj, name=ep.name)
        names.append(ep.name)
    return names


# argtca's own methods: each module of these packages declares its methods on import
# (``argtca.plugins.method`` beside the class: a trainer in argtca/trainers, an adapter in
# argtca/adapters). They are imported by name, as Dassl's and timm's registries fill on import,
# so that the configuration, which sits below them, gets every built-in method's node
# (``get_cfg_default``) without importing upwards.
BUILTIN_METHOD_PACKAGES = ("argtca.trainers", "argtca.adapters")
_LOADED: set = set()


# Declaring a method (argtca.plugins.method) makes a trainer for it; the trainers package, which
# knows how, installs that factory when it loads. A declaration made before (an adapter module
# imported first) waits here, in order, and is made when the factory arrives, so that the
# declaration stays on the lowest floor and no module imports up into the trainers
_METHOD_FACTORY: List[Any] = []
_PENDING_METHODS: List[tuple] = []


def declare_method(cls: Any, spec: Dict[str, Any]) -> None:
    """Hand the declaration ``spec`` of the method class ``cls`` to the trainers' factory (now,
    or once it is installed)."""
    if _METHOD_FACTORY:
        _METHOD_FACTORY[0](cls, **spec)
    else:
        _PENDING_METHODS.append((cls, spec))


def set_method_factory(factory) -> None:
    """Install the trainers' factory; the declarations that waited for it are made by
    :func:`flush_declared_methods` (the trainers package calls it once its own methods are in,
    so that the registration order is the same whichever package is imported first)."""
    _METHOD_FACTORY[:] = [factory]


def flush_declared_methods() -> None:
    """Make the declarations that waited for the factory, in the order they were made."""
    while _METHOD_FACTORY and _PENDING_METHODS:
        cls, spec = _PENDING_METHODS.pop(0)
        _METHOD_FACTORY[0](cls, **spec)


def load_builtin_methods() -> None:
    """Register argtca's own methods (and then the installed packages' ones, entry-point group
    ``argtca.methods``); once per process."""
    for name in BUILTIN_METHOD_PACKAGES:
        if name not in _LOADED:
            importlib.import_module(name)


def builtin_package_loaded(name: str) -> None:
    """Called at the end of each of :data:`BUILTIN_METHOD_PACKAGES`' ``__init__``: each imports
    the other (whichever is imported first, a method of one declares itself with a class of the
    other), and once both are in, the installed packages' methods are loaded, after argtca's own
    (so that one registering over a built-in with ``override=True`` replaces it)."""
    _LOADED.add(name)
    for other in BUILTIN_METHOD_PACKAGES:
        if other not in _LOADED and other not in sys.modules:   # in sys.modules: under way
            importlib.import_module(other)
    if _LOADED.issuperset(BUILTIN_METHOD_PACKAGES) and "entry points" not in _LOADED:
        load_entry_points(METHODS_GROUP, kind="method")   # a failure: the next import retries
        _LOADED.add("entry points")


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
# ``TTA.BATCH_IMAGES`` images at a time (else one), ``compiles`` whether ``TTA.COMPILE`` compiles
# its towers, ``method_only`` that it runs only the method built for it
ENGINE_REGISTRY = Registry("ENGINE")
# feature-level test-time rules of the training-free and online methods (argtca/adapters):
# classes built as ``cls(node, cfg, text [K, E], logit_scale)``; the trait ``online`` says whether
# one carries state from image to image (the stream engine)
ADAPTER_REGISTRY = Registry("ADAPTER")
