"""Go's ``%v`` of a float32, as the server prints scores in ``explain_score``."""

from __future__ import annotations

import numpy as np


def go_v_float32(value: float) -> str:
    """Return ``fmt.Sprintf("%v", float32(value))``.

    The shortest decimal that reads back as the same float32 (``strconv.FormatFloat(f, 'g',
    -1, 32)``), in exponent form (``1e-05``, ``1.5e+21``) when the exponent is below -4 or at
    least 21, as ``fmt`` prints ``%v``.
    """
    narrow = np.float32(value)
    if not np.isfinite(narrow):
        return "NaN" if np.isnan(narrow) else ("+Inf" if narrow > 0 else "-Inf")
    digits = np.format_float_scientific(narrow, unique=True, trim="-")
    mantissa, exponent = digits.split("e")
    exp = int(exponent)
    if exp < -4 or exp >= 21:
        return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return np.format_float_positional(narrow, unique=True, trim="-")
