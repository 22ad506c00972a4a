"""The measured direction beside the reasoning (``cot.measured``) comes from the timing that
decided the step's role: the interleaved re-timing when the step has one. Night 20261210 held
47 improving steps out of SFT as 'prediction_disagrees' because their first timing in the
search said neutral or slower, while the re-timing that made them improving said faster."""

from __future__ import annotations

from cot_steps import KERNELS, step
from steptp.cot import TemplateWriter, facts, measured_side
from steptp.cot.facts import GENERIC
from steptp.records import Timing

NLL = KERNELS["nll"]


def _t(s: float) -> Timing:
    return Timing(median_s=s, min_s=s * 0.98, spread=0.02, repeats=7, number=10)


def _measured(paired: tuple[float, float] | None) -> dict:
    st = step("nll", "logsimp", {"path": [0, 2], "loops": ["i"]}, {}, speedup=0.8, before=NLL,
              trajectory="t-nll")          # the search timed it at 0.8x
    if paired is not None:
        st = st.model_copy(update={"paired_before": _t(paired[0]), "paired_after": _t(paired[1])})
    f = facts(st, GENERIC)
    cot = TemplateWriter(seed=1, hardware=GENERIC).write(st, f)
    assert cot.expected_effect.direction == "faster"
    return measured_side(st, f, cot)


def test_the_re_timing_decides_the_measured_direction():
    m = _measured((2.0e-5, 1.3e-5))        # re-timed interleaved at 1.54x
    assert m["direction"] == "faster" and m["prediction_agrees"] is True
    assert m["step_speedup"] == 0.8        # the search's own figure stays as it was recorded


def test_without_a_re_timing_the_search_timing_decides():
    m = _measured(None)
    assert m["direction"] == "slower" and m["prediction_agrees"] is False
    # re-timed and slower still disagrees: the re-timing is believed either way
    m = _measured((2.0e-5, 2.6e-5))
    assert m["direction"] == "slower" and m["prediction_agrees"] is False
