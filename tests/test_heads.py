"""Sequential heads: the Markov bias reads only x_{k-1}; the RNN state restarts at zero per
block."""

import torch

from draft_models import ConfidenceHead, MarkovHead, RNNHead

V, R, H = 50, 6, 12


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_markov_bias_depends_only_on_the_previous_token():
    torch.manual_seed(0)
    head = MarkovHead(V, R, H)
    torch.nn.init.normal_(head.markov_w2.weight)
    prev = torch.tensor([[3, 7, 3, 9], [9, 3, 7, 7]])
    z = head.latents(prev, rand(2, 4, H))
    # hidden ignored
    torch.testing.assert_close(z, head.latents(prev, rand(2, 4, H, seed=1) * 100), rtol=0, atol=0)
    bias = head.markov_w2(z)
    for token in (3, 7, 9):
        rows = bias[prev == token]
        # same token, same bias
        torch.testing.assert_close(rows, rows[:1].expand_as(rows), rtol=0, atol=0)
    assert not torch.allclose(bias[0, 0], bias[0, 1])
    step_z, state = head.step(None, prev[:, 2], rand(2, H))
    torch.testing.assert_close(step_z, z[:, 2], rtol=0, atol=0)
    assert state is None


def test_rnn_state_starts_at_zero_for_every_block():
    torch.manual_seed(0)
    head = RNNHead(V, R, H)
    prev = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(1))
    hidden = rand(3, 5, H)
    z = head.latents(prev, hidden)
    # Slot 0 of every block equals one step from a zero state...
    first, _ = head.step(torch.zeros(3, R), prev[:, 0], hidden[:, 0])
    torch.testing.assert_close(z[:, 0], first, rtol=0, atol=0)
    # ...a block computed alone equals the same block in a batch (no state carried between
    # blocks)...
    torch.testing.assert_close(head.latents(prev[2:], hidden[2:]), z[2:], rtol=1e-6, atol=1e-7)
    # ...and slot k does depend on earlier slots of its own block (it is recurrent).
    changed = prev.clone()
    changed[:, 1] = (changed[:, 1] + 1) % V
    z2 = head.latents(changed, hidden)
    torch.testing.assert_close(z2[:, :2][:, :1], z[:, :1], rtol=0, atol=0)
    assert not torch.allclose(z2[:, 3], z[:, 3])


def test_rnn_is_causal_within_a_block():
    torch.manual_seed(0)
    head = RNNHead(V, R, H)
    prev = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(2))
    hidden = rand(2, 5, H)
    z = head.latents(prev, hidden)
    later = hidden.clone()
    later[:, 3:] += 5.0
    torch.testing.assert_close(head.latents(prev, later)[:, :3], z[:, :3], rtol=0, atol=0)


def test_confidence_head_reads_hidden_and_previous_token_embedding():
    torch.manual_seed(0)
    markov = MarkovHead(V, R, H)
    conf = ConfidenceHead(H, R)
    hidden, prev = rand(4, H), torch.tensor([1, 2, 3, 4])
    logit = conf(hidden, markov.prev_embedding(prev))
    expected = (
        torch.cat((hidden, markov.markov_w1.weight[prev]), -1) @ conf.proj.weight.T + conf.proj.bias
    )
    torch.testing.assert_close(logit, expected.squeeze(-1))
    assert conf.proj.in_features == H + R and ConfidenceHead(H, 0).proj.in_features == H


def test_gated_head_is_sglangs_gated_markov_bias():
    """SGLang's "gated" head: z_k = sigmoid(gate_proj([h_k ; W1[x]])) * W1[x], bias W2 z_k; its
    parameters are named as SGLang loads them (markov_head.gate_proj, hidden first)."""
    from draft_models import GatedMarkovHead

    torch.manual_seed(0)
    head = GatedMarkovHead(V, R, H)
    assert head.gate_proj.weight.shape == (R, H + R) and head.gate_proj.bias.shape == (R,)
    prev, hidden = torch.tensor([[3, 7, 9]]), rand(1, 3, H)
    emb = head.markov_w1.weight[prev]
    gate = torch.sigmoid(
        torch.cat((hidden, emb), -1) @ head.gate_proj.weight.T + head.gate_proj.bias
    )
    torch.testing.assert_close(head.latents(prev, hidden), gate * emb)
    z1, state = head.step(None, prev[:, 1], hidden[:, 1])
    torch.testing.assert_close(z1, (gate * emb)[:, 1])
    assert state is None
    # unlike the vanilla head, the bias depends on the slot's hidden state
    assert not torch.allclose(head.latents(prev, hidden * 3), head.latents(prev, hidden))


def test_every_weight_starts_normal_as_in_deepspec():
    """markov_w2 included (it used to start at zero): N(0, 0.02) for every Linear / Embedding."""
    from conftest import tiny_draft

    for variant in ("dspark", "dspark_rnn"):
        draft = tiny_draft(variant, markov_rank=64)
        w2 = draft.markov_head.markov_w2.weight.detach()
        assert 0.015 < float(w2.std()) < 0.025 and abs(float(w2.mean())) < 0.005
