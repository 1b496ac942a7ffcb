"""The untimed steps after the warm-up (harness.heat): a GPU idle during the compiles raises its clocks again."""

from benchmarks.harness import Case, heat, no_sync, time_case


def _counting_case() -> tuple[Case, list[int]]:
    calls = [0]

    def step() -> int:
        calls[0] += 1
        return calls[0]

    return Case(step, no_sync, dict), calls


def test_heat_stops_at_its_step_cap_and_runs_nothing_for_zero_seconds():
    case, calls = _counting_case()
    assert heat(case, 0.0) == 0 and calls[0] == 0
    assert heat(case, 3600.0, max_steps=7) == 7 and calls[0] == 7


def test_time_case_heats_between_the_warm_up_and_the_timed_steps():
    case, calls = _counting_case()
    times = time_case(case, warmup=2, iters=4)
    assert len(times) == 4 and calls[0] == 6  # no heat asked: warm-up and timed steps only
    case, calls = _counting_case()
    times = time_case(case, warmup=2, iters=4, heat_s=0.05)
    assert len(times) == 4 and calls[0] > 6  # the heat ran steps of its own, none of them timed
