"""SharedSlice: where an operand or result lies in a registered shared-memory region."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np

from ._types import NP_TO_PB


@dataclass(frozen=True)
class SharedSlice:
    """An operand or result in a registered region: the request names it, no bytes."""

    region_id: str
    offset: int
    dtype: np.dtype  # type: ignore[type-arg]
    shape: Tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def fill(self, message: Any, with_type: bool = True) -> None:
        message.region_id = self.region_id
        message.offset = self.offset
        if with_type:
            message.dtype = NP_TO_PB[self.dtype]
            message.shape.extend(self.shape)
