"""Command-line flags generated from a settings model: one default and one help text each.

``@settings_flags(SchedulerSettings)`` adds one option per field of the model to a typer
command (``round_s`` becomes ``--round-s``, a bool ``mixed_gangs`` becomes
``--mixed-gangs/--no-mixed-gangs``), collects them, validates them with the model, and calls
the command with ``settings=<model instance>``. The defaults and help texts are the model's
own, so ``tessera simulate`` and ``tessera serve`` can never disagree with each other or with
the code about what a setting means. A value the model rejects is a usage error (exit 2).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

F = TypeVar("F", bound=Callable[..., Any])


def _flag_type(annotation: Any) -> type:
    """The CLI type of a field (a Literal field is a string the model then validates)."""
    if typing.get_origin(annotation) is typing.Literal:
        return str
    if annotation in (bool, int, float, str):
        return annotation
    raise TypeError(f"no command-line flag for a field of type {annotation!r}")


def _options(model: type[BaseModel], panel: str) -> list[inspect.Parameter]:
    params = []
    for name, field in model.model_fields.items():
        kind = _flag_type(field.annotation)
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if kind is bool else [flag]
        option = typer.Option(field.default, *decls, help=field.description,
                               rich_help_panel=panel, show_default=True)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                        default=option, annotation=kind))
    return params


def settings_flags(model: type[BaseModel], panel: str = "Scheduler") -> Callable[[F], F]:
    """Decorate a typer command taking ``settings: <model>`` (see the module docstring)."""

    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        own = [p.replace(annotation=hints.get(p.name, p.annotation))
               for p in sig.parameters.values() if p.name != "settings"]
        clash = {p.name for p in own} & set(model.model_fields)
        if clash:
            raise TypeError(f"{fn.__name__} already has options {sorted(clash)}")

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {k: kwargs.pop(k) for k in model.model_fields}
            try:
                settings = model.model_validate(values)
            except ValidationError as e:
                first = e.errors()[0]
                where = "--" + str(first["loc"][0]).replace("_", "-")
                raise typer.BadParameter(f"{first['msg']} (got {first['input']!r})",
                                         param_hint=where) from None
            return fn(settings=settings, **kwargs)

        del command.__wrapped__  # typer must see the generated signature, not fn's
        params = own + _options(model, panel)
        command.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return wrap
