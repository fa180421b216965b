"""Sequential Temperature Scaling (STS) of the confidence head.

Held-out data gives, per drafted block, the raw confidence logits l_1..l_gamma and how many
drafted tokens were accepted. The prefix-survival label of position k is "the first k drafts were
all accepted", and the calibrated prediction of it is a_k = prod_{i<=k} sigmoid(l_i / T_i).
Left to right, T_k is grid-searched to minimise the expected calibration error of a_k with
T_1..T_{k-1} fixed. Dividing a logit by T > 0 is monotone, so each c_k keeps its order.
The result is the JSON SGLang reads from `--speculative-dspark-confidence-sts-path`
({"temperatures": [...], "ece_before": [...], "ece_after": [...], ...}).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config_io import read_json


def default_grid() -> torch.Tensor:
    """Log-spaced temperatures from 0.25 to 8, including exactly 1.0."""
    return torch.cat((torch.logspace(-2, 3, 51, base=2.0), torch.ones(1))).unique()


def expected_calibration_error(
    prob: torch.Tensor, label: torch.Tensor, num_bins: int = 15
) -> float:
    """Equal-width-bin ECE: sum_b |B_b|/N * |mean(prob in b) - mean(label in b)|."""
    prob, label = prob.double().flatten(), label.double().flatten()
    if prob.numel() == 0:
        return 0.0
    bins = (prob * num_bins).long().clamp(max=num_bins - 1)
    p_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, prob)
    y_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bins, label)
    return float((p_sum - y_sum).abs().sum() / prob.numel())


def roc_auc(score: torch.Tensor, label: torch.Tensor) -> float:
    """Area under the ROC curve via the rank statistic (ties get average ranks); nan if one
    class."""
    score, label = score.double().flatten(), label.bool().flatten()
    pos, neg = int(label.sum()), int((~label).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = torch.argsort(score)
    sorted_scores = score[order]
    ranks = torch.empty_like(score)
    ranks[order] = torch.arange(1, score.numel() + 1, dtype=torch.float64)
    uniq, inverse = torch.unique(sorted_scores, return_inverse=True)
    avg = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, ranks[order])
    avg /= torch.bincount(inverse, minlength=uniq.numel()).double()
    ranks[order] = avg[inverse]
    return float((ranks[label].sum() - pos * (pos + 1) / 2) / (pos * neg))


def prefix_labels(num_accepted: torch.Tensor, gamma: int) -> torch.Tensor:
    """[N] accepted-draft counts -> [N, gamma] prefix-survival labels (k < accepted)."""
    return (torch.arange(gamma)[None, :] < num_accepted.long()[:, None]).float()


@dataclass
class StsResult:
    temperatures: list[float]
    ece_before: list[float]
    ece_after: list[float]
    auc_before: list[float]
    auc_after: list[float]
    num_samples: int
    dataset: str = ""
    # per position: "fitted", or why the temperature stayed 1.0 (too few accepted or rejected)
    notes: list[str] = field(default_factory=list)

    def sglang_json(self) -> dict:
        """The fields SGLang 0.5.23's DSparkStsCalibration accepts."""
        d = asdict(self)
        return {
            k: d[k] for k in ("temperatures", "dataset", "num_samples", "ece_before", "ece_after")
        }


def survival(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """a_k = prod_{i<=k} sigmoid(l_i / T_i) for logits [N, gamma]."""
    return torch.cumprod(torch.sigmoid(logits.double() / temperatures.double()), dim=1)


def fit_sts(
    logits: torch.Tensor,
    num_accepted: torch.Tensor,
    grid: torch.Tensor | None = None,
    num_bins: int = 15,
    dataset: str = "",
    min_per_class: int = 10,
) -> StsResult:
    """Fit one temperature per block position on raw confidence logits [N, gamma].

    A position whose prefix-survival label has fewer than `min_per_class` positives (blocks that
    survived that far) or negatives keeps T = 1.0: a temperature fitted on one class only runs to
    the grid's bound and sharpens a confidence nothing supports, which would mislead the
    scheduler. The raw head is the honest answer there; `notes` says why, per position."""
    if logits.dim() != 2 or logits.shape[0] != num_accepted.shape[0]:
        raise ValueError(
            f"STS needs logits [N, gamma] and num_accepted [N]; got {tuple(logits.shape)} and "
            f"{tuple(num_accepted.shape)}"
        )
    if logits.shape[0] == 0:
        raise ValueError("STS needs at least one held-out block")
    n, gamma = logits.shape
    if int(num_accepted.min()) < 0 or int(num_accepted.max()) > gamma:
        raise ValueError(f"num_accepted must lie in [0, {gamma}]")
    grid = default_grid() if grid is None else grid
    labels = prefix_labels(num_accepted, gamma)
    temps = torch.ones(gamma, dtype=torch.float64)
    notes = []
    for k in range(gamma):
        positives = int(labels[:, k].sum())
        negatives = n - positives
        if min(positives, negatives) < min_per_class:
            notes.append(
                f"kept T=1.0: {positives} accepted, {negatives} rejected "
                f"(fitting needs {min_per_class} of each)"
            )
            continue
        notes.append("fitted")
        best_t, best_ece = 1.0, float("inf")
        for t in grid.tolist():
            temps[k] = t
            ece = expected_calibration_error(
                survival(logits[:, : k + 1], temps[: k + 1])[:, k], labels[:, k], num_bins
            )
            if ece < best_ece - 1e-12:
                best_t, best_ece = t, ece
        temps[k] = best_t
    scores = score_sts(logits, num_accepted, temps, num_bins)
    return StsResult(
        temperatures=temps.tolist(),
        **{k: scores[k] for k in ("ece_before", "ece_after", "auc_before", "auc_after")},
        num_samples=n,
        dataset=dataset,
        notes=notes,
    )


def score_sts(
    logits: torch.Tensor,
    num_accepted: torch.Tensor,
    temperatures: torch.Tensor | list[float],
    num_bins: int = 15,
) -> dict:
    """ECE and AUC per position of the raw head (T = 1) and with `temperatures`, on blocks that
    may be other than those the temperatures were fitted on (a held-out test split); with the
    observed prefix-survival rate and the mean predicted one before and after, which say
    whether the head is over- (mean above the rate) or under-confident."""
    temperatures = torch.as_tensor(temperatures, dtype=torch.float64)
    if logits.dim() != 2 or num_accepted.shape != logits.shape[:1]:
        raise ValueError(
            f"STS scoring needs logits [N, gamma] and num_accepted [N]; got "
            f"{tuple(logits.shape)} and {tuple(num_accepted.shape)}"
        )
    gamma = logits.shape[1]
    if temperatures.shape != (gamma,):
        raise ValueError(f"{temperatures.numel()} temperatures for {gamma} positions")
    labels = prefix_labels(num_accepted, gamma)
    before = survival(logits, torch.ones(gamma, dtype=torch.float64))
    after = survival(logits, temperatures)
    return {
        "num_samples": logits.shape[0],
        "rate": labels.mean(0).tolist(),
        "mean_before": before.mean(0).tolist(),
        "mean_after": after.mean(0).tolist(),
        "ece_before": [
            expected_calibration_error(before[:, k], labels[:, k], num_bins) for k in range(gamma)
        ],
        "ece_after": [
            expected_calibration_error(after[:, k], labels[:, k], num_bins) for k in range(gamma)
        ],
        "auc_before": [roc_auc(before[:, k], labels[:, k]) for k in range(gamma)],
        "auc_after": [roc_auc(after[:, k], labels[:, k]) for k in range(gamma)],
    }


def read_temperatures(path: str | Path, gamma: int) -> list[float]:
    """The per-position temperatures of an STS JSON file (ours or SGLang's), checked against
    gamma."""
    path = Path(path)
    data = read_json(path, "STS file")
    temps = data.get("temperatures") if isinstance(data, dict) else None
    if (
        not isinstance(temps, list)
        or len(temps) != gamma
        or not all(isinstance(t, (int, float)) and t > 0 for t in temps)
    ):
        raise ValueError(f"STS file {path}: expected 'temperatures', {gamma} numbers > 0")
    return [float(t) for t in temps]
