"""Float functions the fake-quant form writes as a composite of Relax ops: the constants every
frontend writes (``frontends._base``) and the lookup-table rule recognises (``rewrites.lut``),
defined once."""

from __future__ import annotations

import numpy as np

# Hard swish is x * HardSigmoid(x) = x * clip(x * f32(1/6) + 1/2, 0, 1).
HARD_SWISH_SLOPE, HARD_SWISH_OFFSET = float(np.float32(1.0 / 6.0)), 0.5
