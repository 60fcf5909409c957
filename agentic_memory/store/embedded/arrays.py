"""Array types shared by the embedded store's modules."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
FloatArray64 = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
NO_HITS: tuple[IntArray, FloatArray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
