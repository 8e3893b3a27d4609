"""The output as it was when the call's window closed (drkernel.env.measure.capture)."""

import torch

from drkernel.env.measure.capture import make_capture


def test_the_copy_is_the_output_at_the_window_s_close():
    arm, commit, captured = make_capture(torch, "cpu")
    out = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    arm(out)
    commit()
    out.fill_(-1.0)  # what code running after the window would do to the output
    got = captured(out)
    assert torch.equal(got, torch.arange(12, dtype=torch.float32).reshape(3, 4))
    assert got.data_ptr() != out.data_ptr()


def test_outputs_that_are_not_plain_dense_tensors_are_not_copied():
    arm, commit, captured = make_capture(torch, "cpu")
    for out in (torch.ones(4, 3).t(), torch.empty(0), 3.0):
        arm(out)
        commit()
        assert captured(out) is None
    first = torch.ones(2)
    arm(first)
    commit()
    assert captured(torch.ones(2)) is None  # only the output that was armed


def test_a_mode_left_active_refuses_the_copy():
    from torch.overrides import TorchFunctionMode

    arm, commit, captured = make_capture(torch, "cpu")
    out = torch.ones(3)
    arm(out)
    commit()
    with TorchFunctionMode():
        try:
            captured(out)
        except RuntimeError as exc:
            assert "mode" in str(exc)
        else:
            raise AssertionError("a copy was made under an active mode")
