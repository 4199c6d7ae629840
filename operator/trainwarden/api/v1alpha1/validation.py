"""Turn a raw spec into a model, or into messages a human can act on."""

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

SpecT = TypeVar("SpecT", bound=BaseModel)


def parse_spec(model: type[SpecT], raw: Mapping[str, Any]) -> SpecT | list[str]:
    """The parsed spec, or one "spec.<path>: <problem>" line per problem.

    The CRD schema rejects most mistakes at admission; this catches what it cannot (an
    unknown time zone) and objects stored before a rule existed.
    """
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        return [
            f"spec.{'.'.join(str(part) for part in e['loc'])}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in error.errors(include_url=False)
        ]
    except Exception as error:
        # A validator that raised past pydantic (an overflow it does not convert, an
        # OSError of a lookup): still an invalid spec with a reason, never an exception out
        # of a reconciler, the webhook's informer or a Kueue check pass.
        return [f"spec: {type(error).__name__}: {str(error)[:300]}"]
