"""What every config section shares: the base model that forbids unknown keys, the error
type, and the validators of paths, treebanks and store locations."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo


class ConfigError(ValueError):
    """A config file that cannot be run; the message names the key and the fix."""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (through ``X | None``, ``list[X]``, ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def keys_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str] | None:
    """The keys valid at ``loc`` (a key path into ``model``, as pydantic's errors give it; list
    indices skipped), or None where the path leaves the models."""
    cls = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part)
        sub = None if field is None else _model_in(field.annotation)
        if sub is None:
            return None
        cls = sub
    return list(cls.model_fields)


def unknown_key(key: str, valid: Sequence[str] | None) -> str:
    """``unknown key`` with the closest valid names (``did you mean restarts?``) and the list."""
    if not valid:
        return "unknown key; remove it or check its spelling against docs/config.md"
    close = difflib.get_close_matches(key, valid, n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"unknown key; {hint}the keys here (docs/config.md): {', '.join(valid)}"


def error_lines(err: ValidationError, model: type[BaseModel]) -> list[str]:
    """One ``key.path: what`` line per problem of ``err`` (a validation of ``model``); unknown keys
    get the closest valid names."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = unknown_key(str(e["loc"][-1]), keys_at(model, e["loc"][:-1]))
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "literal_error":
            msg = _not_a_choice(e, model) or msg
        lines.append(f"{loc}: {msg}")
    return lines


def _not_a_choice(error: Any, model: type[BaseModel]) -> str | None:
    """``'all' is not a choice; the choices are needed or null`` for a value outside a field's
    ``Literal`` (pydantic's ``Input should be 'needed'`` leaves out the null that ``X | None``
    allows), or None where ``error['loc']`` does not lead to a field of the models."""
    loc = list(error["loc"])
    element = bool(loc) and isinstance(loc[-1], int)  # an item of a list: null is no choice there
    while loc and isinstance(loc[-1], int):
        loc.pop()
    if not loc or keys_at(model, loc[:-1]) is None:
        return None
    cls: type[BaseModel] = model
    for part in loc[:-1]:
        if not isinstance(part, int):
            cls = _model_in(cls.model_fields[str(part)].annotation)  # type: ignore[assignment]  # keys_at checked it
    field = cls.model_fields.get(str(loc[-1]))
    if field is None:
        return None
    choices = [str(v) if isinstance(v, str) else repr(v) for v in _literals(field.annotation)]
    if not choices:
        return None
    if not element and type(None) in get_args(field.annotation):
        choices.append("null")
    listed = choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} or {choices[-1]}"
    return f"{error['input']!r} is not a choice; the choices are {listed}"


def _literals(annotation: Any) -> list[Any]:
    """The values of the ``Literal`` types in ``annotation`` (through ``X | None``, ``list[X]``)."""
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return [v for arg in get_args(annotation) for v in _literals(arg)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: keys added after cache keys were first written from this section: :meth:`keyed` leaves
    #: them out while they are null, so that the keys of configs that do not use them are unchanged
    added_later: ClassVar[tuple[str, ...]] = ()

    def keyed(self) -> dict[str, Any]:
        """The section as a JSON-compatible dict for a cache key (:attr:`added_later` left out while null)."""
        out = self.model_dump(mode="json")
        for key in self.added_later:
            if out.get(key, 0) is None:
                del out[key]
        return out


def _resolve(path: str | Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return p.resolve() if base is not None else p


#: Treebanks shipped with the package, by the name ``corpus.annotated`` accepts: the file under
#: ``evolution/data/ud-ewt/`` (:func:`evolution.corpus.conllu.resolve_treebank` reads it).
EMBEDDED = {"ud-ewt-dev": "en_ewt-ud-dev.conllu.gz", "ud-ewt-test": "en_ewt-ud-test.conllu.gz"}


def _treebank(v: Any, info: ValidationInfo, key: str) -> str | None:
    """An embedded treebank's name, or an existing CoNLL-U file's resolved path."""
    if v is None or str(v) in EMBEDDED:
        return v
    path = _resolve(v, info)
    if not path.is_file():
        raise ValueError(
            f"{key} {str(v)!r} is neither an embedded treebank ({', '.join(EMBEDDED)}) "
            "nor an existing CoNLL-U file (relative paths are resolved against the config "
            "file's directory)"
        )
    return str(path)


def _store_location(v: Any, info: ValidationInfo, key: str) -> str | None:
    """A store's location: an fsspec URL as given (credentials refused, its filesystem
    package required), or a local path resolved against the config file's directory."""
    from evolution import location

    if v is None:
        return None
    if location.is_url(v):
        location.check_url(str(v), key=key)
        return str(v)
    return str(_resolve(v, info))


def _must_exist(path: Path, what: str) -> Path:
    if not path.exists():
        raise ValueError(
            f"{what} {str(path)!r} does not exist; fix the path (relative paths are "
            "resolved against the config file's directory)"
        )
    return path
