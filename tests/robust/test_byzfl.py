"""Every aggregator, pre-aggregator and attack that ByzFL (EPFL and INRIA, ``byzfl`` on PyPI) also implements
equals ByzFL's on the same inputs: Average, Median, TrMean, Krum, MultiKrum, GeometricMedian, CenteredClipping,
the NNM and Bucketing pre-aggregators, Clipping (norm bounding without noise), and the SignFlipping,
InnerProductManipulation, ALittleIsEnough and Gaussian attacks, and its clients' label flipping.

ByzFL is an optional test extra (``robust-test`` in pyproject.toml; ``pip install --no-deps byzfl==0.0.11``).
``import byzfl`` runs its ``__init__``, which imports its benchmark module and so torchvision (which does not
import beside the CPU torch here); its aggregators, attacks and utils need only numpy, torch and scipy, so the
package's folder is registered as a module without running that ``__init__``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fedrun.robust.attacks.alie import ALIE, ALIEParams
from fedrun.robust.attacks.gaussian import Gaussian, GaussianParams
from fedrun.robust.attacks.ipm import IPM, IPMParams
from fedrun.robust.attacks.label_flip import flip_labels
from fedrun.robust.attacks.sign_flip import SignFlip, SignFlipParams
from fedrun.robust.base import AttackView, ServerView
from fedrun.robust.defences.centered_clipping import CenteredClipping, CenteredClippingParams
from fedrun.robust.defences.geomed import GeoMed, GeoMedParams
from fedrun.robust.defences.krum import Krum, KrumParams, MultiKrum, MultiKrumParams
from fedrun.robust.defences.mean import Mean, MeanParams
from fedrun.robust.defences.median import Median, MedianParams
from fedrun.robust.defences.norm_bound import NormBound, NormBoundParams
from fedrun.robust.defences.trimmed_mean import TrimmedMean, TrimmedMeanParams
from fedrun.robust.preagg.bucketing import Bucketing, BucketingParams
from fedrun.robust.preagg.nnm import NNM, NNMParams


def _byzfl() -> types.SimpleNamespace:
    try:
        spec = importlib.util.find_spec("byzfl")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("byzfl is not installed (pip install --no-deps byzfl==0.0.11)", allow_module_level=True)
    if "byzfl" not in sys.modules:  # the package's folder, without its __init__ (which imports torchvision)
        pkg = types.ModuleType("byzfl")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = pkg
    return types.SimpleNamespace(
        agg=importlib.import_module("byzfl.aggregators"), att=importlib.import_module("byzfl.attacks")
    )


BYZ = _byzfl()
N, F, D = 15, 3, 40


@pytest.fixture
def x() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    honest = torch.randn(N - F, D, generator=g)
    return torch.cat([honest, 5.0 + 3.0 * torch.randn(F, D, generator=g)])


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a.to(torch.float64), torch.as_tensor(b).to(torch.float64), rtol=1e-5, atol=1e-5)


def test_average_median_trimmed_mean(x: torch.Tensor) -> None:
    close(Mean(MeanParams())(x, ServerView()).value, BYZ.agg.Average()(x))
    for m in (N, N - 1):  # odd and even counts: ByzFL's median averages the middle two
        close(Median(MedianParams())(x[:m], ServerView()).value, BYZ.agg.Median()(x[:m]))
    for f in (0, 1, F):
        close(TrimmedMean(TrimmedMeanParams())(x, ServerView(f=f)).value, BYZ.agg.TrMean(f=f)(x))


def test_krum_and_multi_krum_with_byzfls_neighbour_count(x: torch.Tensor) -> None:
    # ByzFL's scores sum the n - f - 1 nearest: the neighbours="n-f-1" option
    view = ServerView(f=F)
    close(Krum(KrumParams(neighbours="n-f-1"))(x, view).value, BYZ.agg.Krum(f=F)(x))
    close(MultiKrum(MultiKrumParams(neighbours="n-f-1"))(x, view).value, BYZ.agg.MultiKrum(f=F)(x))


def test_geometric_median_from_zeros_without_early_stop(x: torch.Tensor) -> None:
    for nu, steps in ((0.1, 3), (1e-3, 8)):
        hp = GeoMedParams(iterations=steps, nu=nu, init="zeros", ftol=0.0)
        close(GeoMed(hp)(x, ServerView()).value, BYZ.agg.GeometricMedian(nu=nu, T=steps)(x))


def test_centered_clipping_from_zero(x: torch.Tensor) -> None:
    for tau, steps in ((1.0, 1), (3.0, 3), (100.0, 1)):
        ours = CenteredClipping(CenteredClippingParams(tau=tau, clip_iterations=steps))(x, ServerView())
        close(ours.value, BYZ.agg.CenteredClipping(L=steps, tau=tau)(x))


def test_norm_bounding_without_noise_is_clipping_then_the_mean(x: torch.Tensor) -> None:
    ours = NormBound(NormBoundParams(bound=4.0, sigma=0.0))(x, ServerView())
    close(ours.value, BYZ.agg.Average()(BYZ.agg.Clipping(c=4.0)(x.clone())))


def test_nnm(x: torch.Tensor) -> None:
    out = NNM(NNMParams())(x, ServerView(f=F))
    close(out.y, BYZ.agg.NNM(f=F)(x))


def test_bucketing_draws_the_same_shuffle_from_the_same_seed(x: torch.Tensor) -> None:
    # ByzFL shuffles with the global generator; ours with the round's keyed one: seeded alike, the same permutation
    for s in (2, 4):
        torch.manual_seed(7)
        theirs = BYZ.agg.Bucketing(s=s)(x)
        out = Bucketing(BucketingParams(s=s))(x, ServerView(generator=torch.Generator().manual_seed(7)))
        close(out.y, theirs)


def test_sign_flip_ipm_alie_on_the_honest_updates(x: torch.Tensor) -> None:
    honest, own = x[: N - F], x[N - F :]
    view = AttackView(n=N)
    close(SignFlip(SignFlipParams(knowledge="omniscient"))(own, honest, view)[0], BYZ.att.SignFlipping()(honest))
    ipm = IPM(IPMParams(epsilon=2.0))(own, honest, view)
    close(ipm[0], BYZ.att.InnerProductManipulation(tau=2.0)(honest))
    alie = ALIE(ALIEParams(knowledge="omniscient", z=1.5))(own, honest, view)
    close(alie[0], BYZ.att.ALittleIsEnough(tau=1.5)(honest))
    assert torch.equal(alie[0], alie[-1])  # every attacker sends the same vector


def test_gaussian_draws_the_same_vector_from_the_same_seed(x: torch.Tensor) -> None:
    # ByzFL draws torch.randn(d) * sigma + mu from the global generator; ours from the round's keyed one
    honest, own = x[: N - F], x[N - F : N - F + 1]
    torch.manual_seed(3)
    theirs = BYZ.att.Gaussian(mu=0.5, sigma=2.0)(honest)
    view = AttackView(n=N, generator=torch.Generator().manual_seed(3))
    ours = Gaussian(GaussianParams(mean=0.5, sigma=2.0))(own, honest, view)
    assert ours.shape == own.shape
    close(ours[0], theirs)


def test_label_flipping_trains_on_the_labels_byzfls_client_flips() -> None:
    # ByzFL's honest-client code computes the label-flipping attacker's gradient (LabelFlipping=True): the same
    # gradient as one computed on our flipped labels, at the same model and batch
    framework = importlib.import_module("byzfl.fed_framework")
    torch.manual_seed(0)
    x, y = torch.rand(16, 784), torch.randint(0, 10, (16,))
    client = framework.Client(
        {
            "model_name": "logreg_mnist",
            "device": "cpu",
            "loss_name": "CrossEntropyLoss",
            "LabelFlipping": True,
            "nb_labels": 10,
            "momentum": 0.0,
            "training_dataloader": DataLoader(TensorDataset(x, y), batch_size=16),
            "store_per_client_metrics": False,
            **dict.fromkeys(("learning_rate", "weight_decay", "milestones", "learning_rate_decay", "optimizer_name")),
        }
    )
    client.compute_gradients()
    params = dict(client.model.named_parameters())
    loss = torch.nn.functional.cross_entropy(torch.func.functional_call(client.model, params, (x,)), flip_labels(y, 10))
    ours = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(params.values()))])
    torch.testing.assert_close(ours, client.get_flat_flipped_gradients())
