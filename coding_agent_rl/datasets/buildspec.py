"""Where a row's image comes from: a Docker build context and Dockerfile on the host."""

from __future__ import annotations

import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """How to build a row's image: ``docker build -f dockerfile context``."""

    context: pathlib.Path
    dockerfile: pathlib.Path
