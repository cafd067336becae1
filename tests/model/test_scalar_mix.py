"""The task-weighted sum of layers: the plain layer when one weight dominates, the mean at the
start, the formula by hand, and gradients that reach the weights and the scale."""
from __future__ import annotations

import pytest
import torch

from bertkit.model.scalar_mix import ScalarMix


def layers(n: int = 3, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 5, 4, generator=g) for _ in range(n)]


@pytest.mark.parametrize("chosen", [0, 1, 2])
def test_one_dominating_weight_gives_that_plain_layer(chosen):
    hs = layers()
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.fill_(0.0)
        mix.weights[chosen] = 40.0  # softmax puts e^-40 on the others
    torch.testing.assert_close(mix(hs), hs[chosen], rtol=0, atol=1e-12)


def test_a_fresh_mix_is_the_mean_of_the_layers():
    hs = layers()
    torch.testing.assert_close(ScalarMix(3)(hs), torch.stack(hs).mean(0))


def test_the_weighted_sum_by_hand():
    hs = [torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]])]
    mix = ScalarMix(2)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, torch.log(torch.tensor(3.0))]))  # weights 1/4, 3/4
        mix.gamma.fill_(2.0)
    expected = 2.0 * (0.25 * hs[0] + 0.75 * hs[1])  # [[5.0, 2.5]]
    torch.testing.assert_close(mix(hs), expected)
    torch.testing.assert_close(mix.layer_weights(), torch.tensor([0.25, 0.75]))


def test_gradients_reach_the_weights_and_the_scale():
    hs = layers()
    mix = ScalarMix(3)
    target = hs[2].clone()
    loss = ((mix(hs) - target) ** 2).mean()
    loss.backward()
    assert mix.weights.grad is not None and mix.weights.grad.abs().sum() > 0
    assert mix.gamma.grad is not None and mix.gamma.grad.abs() > 0
    # a few steps of descent move the weight toward the layer that is the target
    opt = torch.optim.SGD(mix.parameters(), lr=1.0)
    for _ in range(50):
        opt.zero_grad()
        ((mix(hs) - target) ** 2).mean().backward()
        opt.step()
    assert int(mix.layer_weights().argmax()) == 2


def test_the_number_of_layers_must_match():
    with pytest.raises(ValueError, match="3 weights, got 2"):
        ScalarMix(3)(layers(2))
    with pytest.raises(ValueError):
        ScalarMix(0)
