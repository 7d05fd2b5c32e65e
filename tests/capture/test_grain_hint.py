"""A script that calls a Grain dataset method on the wrong kind of dataset gets told, from the
installed Grain, which kind has it and how to get there."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from capture_helpers import capture, read_sidecar

from traceinspect.capture._child.grain_patches import grain_method_hint

grain = pytest.importorskip("grain")


def test_hint_names_the_kind_that_has_the_method() -> None:
    from importlib import metadata

    ds = grain.MapDataset.range(8).batch(2)
    with pytest.raises(AttributeError) as info:
        ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    assert grain_method_hint(info.value) == (
        f"'BatchMapDataset' (a MapDataset) has no 'mp_prefetch' in grain "
        f"{metadata.version('grain')}; IterDataset has it: call .to_iter_dataset(...) first, "
        "then .mp_prefetch(...)."
    )


def test_no_hint_for_other_errors() -> None:
    class Plain:
        pass

    with pytest.raises(AttributeError) as info:
        Plain().mp_prefetch  # type: ignore[attr-defined]  # noqa: B018
    assert grain_method_hint(info.value) is None
    assert grain_method_hint(ValueError("x")) is None
    with pytest.raises(AttributeError) as missing:
        grain.MapDataset.range(8).no_such_method  # noqa: B018
    assert grain_method_hint(missing.value) == (
        f"'RangeMapDataset' (a MapDataset) has no 'no_such_method' in grain "
        f"{__import__('importlib').metadata.version('grain')}, nor has any Grain dataset kind."
    )


@pytest.mark.slow
@pytest.mark.stack
def test_capture_of_a_script_with_mp_prefetch_in_the_wrong_place(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "bad_order.py"
    script.write_text(
        textwrap.dedent(
            """
            import grain
            from absl import flags

            if __name__ == "__main__":
                flags.FLAGS.mark_as_parsed()
                ds = grain.MapDataset.range(64).batch(8)
                it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1)))
            """
        )
    )
    result = capture(tmp_path / "logs", [sys.executable, str(script)])
    assert result.exit_code == 1
    err = capfd.readouterr().err
    assert "AttributeError: 'BatchMapDataset' object has no attribute 'mp_prefetch'" in err
    hint = next(line for line in err.splitlines() if "IterDataset has it" in line)
    assert hint.startswith("traceinspect: 'BatchMapDataset' (a MapDataset) has no 'mp_prefetch'")
    assert hint.endswith("call .to_iter_dataset(...) first, then .mp_prefetch(...).")
    assert hint.removeprefix("traceinspect: ") in read_sidecar(result)["notes"]
