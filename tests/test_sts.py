"""Sequential Temperature Scaling on synthetic over-confident scores."""

import pytest
import torch

from draft_models import fit_sts, score_sts
from draft_models.sts import expected_calibration_error, prefix_labels, roc_auc, survival


def synthetic(n=20000, gamma=4, overconfidence=3.0, seed=0):
    """True per-slot acceptance q ~ U(0.2, 0.95); the head reports logit(q) * overconfidence."""
    g = torch.Generator().manual_seed(seed)
    q = 0.2 + 0.75 * torch.rand(n, gamma, generator=g)
    accept = torch.rand(n, gamma, generator=g) < q
    num_accepted = torch.cumprod(accept.long(), 1).sum(1)
    return torch.logit(q) * overconfidence, num_accepted


def test_sts_lowers_ece_and_preserves_order():
    logits, accepted = synthetic()
    res = fit_sts(logits, accepted)
    assert len(res.temperatures) == 4
    for k in range(4):
        assert res.ece_after[k] < res.ece_before[k], k
        assert res.temperatures[k] > 1.0  # over-confident logits get softened
    assert max(res.ece_after) < 0.02 < min(res.ece_before)
    # order of every per-slot confidence is preserved, so is the AUC of the first position
    temps = torch.tensor(res.temperatures)
    for k in range(4):
        calibrated = torch.sigmoid(logits[:, k].double() / temps[k].double())
        assert torch.equal(
            torch.argsort(calibrated, stable=True), torch.argsort(logits[:, k], stable=True)
        )
    assert res.auc_after[0] == pytest.approx(res.auc_before[0], abs=1e-12)
    assert set(res.sglang_json()) == {
        "temperatures",
        "dataset",
        "num_samples",
        "ece_before",
        "ece_after",
    }


def test_temperatures_fitted_on_one_draw_calibrate_another():
    fit_logits, fit_accepted = synthetic(seed=0)
    res = fit_sts(fit_logits, fit_accepted)
    same = score_sts(fit_logits, fit_accepted, res.temperatures)
    assert same["ece_after"] == res.ece_after and same["auc_before"] == res.auc_before
    test = score_sts(*synthetic(seed=1), res.temperatures)  # blocks the fit never saw
    assert test["num_samples"] == 20000 and test["ece_after"] != res.ece_after
    assert max(test["ece_after"]) < 0.03 < min(test["ece_before"])
    # the raw head scored with T = 1 everywhere: before and after agree
    raw = score_sts(fit_logits, fit_accepted, [1.0] * 4)
    assert raw["ece_after"] == raw["ece_before"] == res.ece_before
    # over-confident: the mean predicted survival lies above the observed rate at every
    # position, and the fitted temperatures bring it to within half a point of it
    assert test["rate"] == prefix_labels(*synthetic(seed=1)[1:], 4).mean(0).tolist()
    for k in range(4):
        assert test["mean_before"][k] > test["rate"][k] + 0.015
        assert abs(test["mean_after"][k] - test["rate"][k]) < 0.005
    hand = score_sts(torch.zeros(2, 2), torch.tensor([0, 2]), [1.0, 1.0])  # sigmoid(0) = 0.5
    assert hand["rate"] == [0.5, 0.5] and hand["mean_before"] == [0.5, 0.25]
    with pytest.raises(ValueError, match="3 temperatures for 4 positions"):
        score_sts(fit_logits, fit_accepted, [1.0] * 3)
    with pytest.raises(ValueError, match="needs logits"):
        score_sts(fit_logits, fit_accepted[:5], res.temperatures)


def test_well_calibrated_scores_keep_temperature_near_one():
    logits, accepted = synthetic(overconfidence=1.0, seed=1)
    res = fit_sts(logits, accepted)
    assert all(0.8 < t < 1.25 for t in res.temperatures)


def test_metric_hand_cases():
    assert expected_calibration_error(
        torch.tensor([0.9, 0.9]), torch.tensor([1.0, 0.0]), 10
    ) == pytest.approx(0.4)
    assert roc_auc(
        torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])
    ) == pytest.approx(0.75)
    assert roc_auc(torch.tensor([0.5, 0.5]), torch.tensor([0, 1])) == pytest.approx(0.5)
    assert prefix_labels(torch.tensor([0, 2]), 3).tolist() == [[0, 0, 0], [1, 1, 0]]
    a = survival(torch.zeros(1, 3), torch.ones(3))
    torch.testing.assert_close(a, torch.tensor([[0.5, 0.25, 0.125]], dtype=torch.float64))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="logits"):
        fit_sts(torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError, match="num_accepted must lie"):
        fit_sts(torch.zeros(2, 3), torch.tensor([0, 4]))


def test_positions_without_both_classes_keep_temperature_one():
    """No accepted draft ever reached positions 3-4 here: fitting there would run T to the grid's
    bound on one class; those positions keep T = 1.0 and the result says why."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 4, generator=g, dtype=torch.float64) * 2
    accepted = torch.randint(0, 3, (200,), generator=g)  # 0, 1 or 2 drafts accepted, never 3 or 4
    res = fit_sts(logits, accepted, min_per_class=10)
    assert res.notes[:2] == ["fitted", "fitted"]
    assert res.temperatures[2:] == [1.0, 1.0]
    assert res.notes[2] == "kept T=1.0: 0 accepted, 200 rejected (fitting needs 10 of each)"
    few = fit_sts(logits, accepted, min_per_class=150)  # too few of either class anywhere
    assert few.temperatures == [1.0] * 4 and all(n.startswith("kept T=1.0") for n in few.notes)
