"""Privacy events dp-accounting has no class for, in its DpEvent hierarchy.

dp-accounting's accountants do not support these (``supports`` is False); fedray prices them with
the composition theorems of ``fedray.privacy.composition`` through ``ComposedAccountant``.
"""

from __future__ import annotations

import attr
import dp_accounting


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_accounting.DpEvent):
    """A release that a theorem (not an accountant) shows (epsilon, delta)-DP, e.g. one shuffled
    P_vec invocation (seed-000 Thm 3.2)."""

    epsilon: float
    delta: float
