"""Executors by name: each executor brings its options model and how it is built.

``tessera serve --executor NAME`` looks ``NAME`` up in :data:`EXECUTORS`. An entry is an
:class:`ExecutorPlugin`: a pydantic model of the executor's own options (``extra="forbid"``,
so an option another executor takes is refused with the executor's name), whether it can run
two jobs on one GPU set (a packing policy's co-location), a check to run before any state is
written (:meth:`ExecutorPlugin.connect`: Ray connects to ``--ray-address`` there), and how to
build the executor from its options and the service's layout (:meth:`ExecutorPlugin.build`).

Adding an executor touches one package: a sub-package of ``tessera.live.executors`` (the
built-in ``local/`` and ``ray/``) whose ``__init__`` registers a plugin::

    class MyOptions(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        endpoint: str = "http://127.0.0.1:9000"

    @EXECUTORS.register("mine", "Runs jobs on my cluster.")
    class MyPlugin(ExecutorPlugin[MyOptions]):
        options_model = MyOptions

        def build(self, options: MyOptions, site: ExecutorSite) -> Executor:
            return MyExecutor(options.endpoint, site.runs_dir)

No list names the executors: :func:`load_executors` imports every sub-package of this package
(:mod:`pkgutil`), so a new built-in one is found by being there. A package outside Tessera
adds an executor through the entry-point group ``tessera.executors`` of its own
``pyproject.toml`` (``mine = "my_package.tessera_executor"``: a module that registers as above,
or ``mine = "my_package:MyPlugin"``: a plugin class, registered under the entry point's name
with its docstring's first line as summary). Why both: a directory walk needs no install step,
so the built-in executors are found the same way in a fresh clone, an editable install and a
wheel, and cannot go missing when a package's metadata is stale; entry points are how an
installed package extends another, and only they reach code outside Tessera's directory.

Nothing is imported until an executor is asked for by name or listed (``serve``, its
``--help``), and an executor's package imports nothing heavy (the Ray executor imports Ray only
when it is built). On the command line an executor's options are flags
``--<executor>-<option>`` (``--ray-address``), so every option's type must have a flag
(:func:`option_flag_types`: ``bool``, ``int``, ``float``, ``str``, ``Path``, a ``Literal``, or
one of these ``| None``). Each executor's options model is checked when it is loaded: a
built-in one that fails is our bug and raises :class:`TypeError`; an outside one is skipped
with one warning naming its package and the field, so that it cannot break every ``tessera``
command (the CLI builds ``serve``'s flags from the registry whenever it starts).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import pkgutil
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from tessera.errors import SpecError
from tessera.live.executors.base import Executor
from tessera.live.executors.logs import DEFAULT_LOGS, LogSettings
from tessera.model.cluster import ClusterSpec
from tessera.registry import Registry

O = TypeVar("O", bound=BaseModel)  # noqa: E741 -- the options model

#: The entry-point group through which an installed package adds executors.
ENTRY_POINT_GROUP = "tessera.executors"

log = logging.getLogger("tessera.live")


@dataclass(frozen=True, slots=True)
class ExecutorSite:
    """What every executor is built with, whatever its options: the service's side.

    Attributes:
        cluster: the cluster the service schedules.
        state_dir: the service's private state dir (an executor may keep its own state there:
            the embedded Ray head's files).
        runs_dir: where runs' directories go (logs, exit records), under the work root.
        checkpoints_dir: the default checkpoints' root, under the work root.
        grace_s: how long a stopped run may take to checkpoint before it is killed.
        logs: how ranks' logs are capped and how long they are kept.
    """

    cluster: ClusterSpec
    state_dir: Path
    runs_dir: Path
    checkpoints_dir: Path
    grace_s: float = 10.0
    logs: LogSettings = DEFAULT_LOGS


class ExecutorPlugin(Generic[O]):
    """One executor as ``serve`` sees it (the module docstring has an example).

    Subclasses set :attr:`options_model` and implement :meth:`build`; the rest has defaults.
    """

    options_model: ClassVar[type[BaseModel]]
    #: Whether the executor can run two jobs on one GPU set (packing policies need it).
    shares_gpus: ClassVar[bool] = False

    def connect(self, options: O) -> None:
        """Check or open what the executor needs before the service writes any state (a
        wrong address must change nothing); raises :class:`SpecError` in one line."""

    def build(self, options: O, site: ExecutorSite) -> Executor:
        """The executor, started (it may raise anything: ``serve`` reports it in one line)."""
        raise NotImplementedError

    def where(self, options: O) -> str:
        """Where the executor runs jobs, for error messages (``" at HOST:PORT"``, or "")."""
        return ""


#: Executor name → plugin class.
EXECUTORS = Registry[type[ExecutorPlugin[Any]]]("executor")


#: Executor name → the installed package (distribution) it came from, for the executors
#: added through entry points; the built-in ones are not here.
_OUTSIDE: dict[str, str] = {}


def option_flag_type(annotation: Any) -> type:
    """The command-line type of an option field: ``X | None`` is ``X``; a ``Literal`` is a
    string the options model then checks.

    Raises:
        TypeError: a type no flag can carry (``list[str]``, a model ...).
    """
    if typing.get_origin(annotation) is typing.Literal:
        return str
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return option_flag_type(args[0])
    if annotation in (bool, int, float, str, Path):
        return typing.cast(type, annotation)
    raise TypeError(f"no command-line flag for an executor option of type {annotation!r}")


def option_flag_types(plugin: type[ExecutorPlugin[Any]]) -> dict[str, type]:
    """Each option of ``plugin``'s options model → its command-line type.

    Raises:
        TypeError: the plugin has no pydantic options model, or an option's type has no flag
            (naming the option and its type).
    """
    model = getattr(plugin, "options_model", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"options_model is {model!r}, not a pydantic model class")
    kinds: dict[str, type] = {}
    for option, field in model.model_fields.items():
        try:
            kinds[option] = option_flag_type(field.annotation)
        except TypeError:
            raise TypeError(f"option {option!r} has type {field.annotation!r}, which no "
                            "command-line flag can carry (use bool, int, float, str, Path, a "
                            "Literal, or one of these | None)") from None
    return kinds


def outside_package(name: str) -> str | None:
    """The installed package executor ``name`` came from (None for a built-in one)."""
    return _OUTSIDE.get(name)


@functools.cache
def load_executors() -> Registry[type[ExecutorPlugin[Any]]]:
    """:data:`EXECUTORS`, with every executor imported (once per process; the module
    docstring says how they are found).

    The built-in sub-packages are imported first, in name order; an error in one of them (an
    option of a type no flag carries included) is a bug and propagates. An entry point that
    fails to load, that names something that is no plugin, whose name is taken, or whose
    options model has an option no flag carries is skipped with a warning: a broken package
    outside Tessera must not stop ``tessera serve --help`` (nor any other command).
    """
    here = importlib.import_module(__package__ or "tessera.live.executors")
    for info in sorted(pkgutil.iter_modules(here.__path__, here.__name__ + "."),
                       key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(info.name)
    for entry in EXECUTORS:
        if entry.name not in _OUTSIDE:
            try:
                option_flag_types(entry.obj)
            except TypeError as e:
                raise TypeError(f"built-in executor {entry.name!r} "
                                f"({entry.obj.__module__}): {e}") from None
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        _load_entry_point(ep)
    return EXECUTORS


def _load_entry_point(ep: importlib.metadata.EntryPoint) -> None:
    """Import one ``tessera.executors`` entry point; register it if it names a plugin class;
    drop (with a warning) every executor it added whose options model fails the check."""
    before = EXECUTORS.names()
    package = ep.dist.name if ep.dist is not None else ep.value
    where = f"{ep.name!r} (package {package}, {ep.value})"
    try:
        obj = ep.load()
    except Exception as e:  # whatever a third-party package raises on import
        log.warning("executor %s was skipped: it failed to load: %s", where, e)
        return
    if isinstance(obj, type) and issubclass(obj, ExecutorPlugin):
        if ep.name in EXECUTORS and EXECUTORS.get(ep.name) is not obj:
            log.warning("executor %s was skipped: the name is taken", where)
            return
        if ep.name not in EXECUTORS:
            summary = (obj.__doc__ or "").strip().split("\n")[0] or f"From {ep.value}."
            EXECUTORS.register(ep.name, summary)(obj)
    elif ep.name not in EXECUTORS.names() and EXECUTORS.names() == before:
        log.warning("executor %s was skipped: it registered no executor", where)
    for name in EXECUTORS.names():
        if name in before:
            continue
        try:
            option_flag_types(EXECUTORS.get(name))
        except Exception as e:  # a third-party plugin may fail in any way when inspected
            EXECUTORS.discard(name)
            shown = where if name == ep.name else f"{name!r} (package {package}, {ep.value})"
            log.warning("executor %s was skipped: %s", shown, e)
            continue
        _OUTSIDE[name] = package


def executor_plugin(name: str) -> ExecutorPlugin[Any]:
    """The plugin called ``name`` (:class:`SpecError` naming the registered ones otherwise)."""
    return load_executors().get(name)()


def executors_help() -> str:
    """The registered executors in one line, for ``--executor``'s help: ``local: Subprocesses
    on this machine (no Ray); ray: ...``."""
    return "; ".join(f"{e.name}: {e.summary.rstrip('.')}" for e in load_executors())


def flag_of(executor: str, option: str) -> str:
    """The command-line flag of one of an executor's options: ``--ray-address``."""
    return f"--{executor}-{option}".replace("_", "-")


def parse_options(executor: str, raw: Mapping[str, Any] | BaseModel | None) -> BaseModel:
    """``raw`` checked against executor ``executor``'s options model.

    Raises:
        SpecError: an unknown executor, an option it does not take (naming the executor,
            the flag and the options it takes), or a value its model refuses.
    """
    plugin = executor_plugin(executor)
    model = plugin.options_model
    if isinstance(raw, model):
        return raw
    if isinstance(raw, BaseModel):
        raise SpecError(f"executor {executor!r} takes {model.__name__}, not "
                        f"{type(raw).__name__}")
    values = dict(raw or {})
    unknown = sorted(set(values) - set(model.model_fields))
    if unknown:
        takes = ", ".join(flag_of(executor, f) for f in model.model_fields) or "none"
        raise SpecError(f"executor {executor!r} has no option "
                        f"{', '.join(map(repr, unknown))}; its options: {takes}")
    try:
        return model.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise SpecError(f"executor {executor!r}: {flag_of(executor, field)}: "
                        f"{err['msg']}") from None


def options_from_flags(executor: str, given: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The options of ``executor`` among flags given per executor (``{"ray": {"address":
    …}}``: the flags ``--ray-*`` that were given).

    Raises:
        SpecError: a flag of another executor (``--ray-address`` with ``--executor local``),
            naming both.
    """
    for other, values in given.items():
        if other != executor and values:
            flags = ", ".join(flag_of(other, k) for k in values)
            raise SpecError(f"{flags}: option(s) of the {other!r} executor, but this service "
                            f"runs --executor {executor}")
    return dict(given.get(executor, {}))
