"""Registering into Dassl's registries: a name that is already taken is an error naming both owners
(the one already there and the newcomer), whichever of the two was imported first."""
from __future__ import annotations

import inspect


def owner(obj) -> str:
    """``module.Class (file)`` of a registered object."""
    try:
        where = inspect.getsourcefile(obj) or "?"
    except TypeError:
        where = "?"
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)} ({where})"


class NameCollisionError(KeyError):
    """Two objects registered under one name in a Dassl registry."""

    def __init__(self, registry_name: str, name: str, old, new):
        msg = (f'Dassl\'s {registry_name} registry: "{name}" is registered by {owner(old)} and '
               f'again by {owner(new)}; one of the two must use another name')
        if any(str(getattr(o, "__module__", "")).startswith("argtca") for o in (old, new)):
            msg += " (argtca's Dassl names: argtca.dassl_plugin.DASSL_TRAINER_NAMES)"
        super().__init__(msg)

    def __str__(self) -> str:
        return self.args[0]


def guard(registry) -> None:
    """Make ``registry`` (a Dassl Registry) raise NameCollisionError, naming both owners, on a
    duplicate name; everything else about it is unchanged."""
    if getattr(registry, "_argtca_guarded", False):
        return
    plain = registry._do_register

    def _do_register(name, obj, force=False):
        old = registry._obj_map.get(name)
        if old is not None and old is not obj and not force:
            raise NameCollisionError(registry._name, name, old, obj)
        plain(name, obj, force=force)

    registry._do_register = _do_register
    registry._argtca_guarded = True


def register(registry, obj) -> None:
    """``registry.register(obj)`` under ``obj.__name__``; re-registering the same object is a
    no-op."""
    guard(registry)
    if registry._obj_map.get(obj.__name__) is obj:
        return
    registry.register(obj)
