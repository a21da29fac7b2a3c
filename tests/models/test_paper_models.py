"""Output shapes and parameter counts of the papers' models, against counts computed by hand from the layer sizes
of the papers' code, which each model's docstring in fedrun/models/ names (conv: cin*cout*k*k + bias; GN/BN: 2 per
channel; FC: a*b + b)."""

from __future__ import annotations

import pytest
import torch

from fedrun.config.registry import MODELS, build_params
from fedrun.core.errors import ConfigError
from fedrun.models.base import FunctionalModel


def conv(cin: int, cout: int, k: int, bias: bool = True) -> int:
    return cin * cout * k * k + (cout if bias else 0)


def fc(a: int, b: int) -> int:
    return a * b + b


def norm(c: int) -> int:
    return 2 * c


def build(name: str, input_shape: tuple[int, ...], num_classes: int, **params: object) -> torch.nn.Module:
    entry = MODELS.get(name)
    return entry.obj(build_params(entry.params, params, "model"), input_shape, num_classes)


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def resnet_cifar_count(n: int, k: int, c: int) -> int:
    total = conv(3, 16 * k, 3, False) + norm(16 * k)
    cin = 16 * k
    for stage, cout in enumerate((16 * k, 32 * k, 64 * k)):
        for j in range(n):
            total += conv(cin, cout, 3, False) + norm(cout) + conv(cout, cout, 3, False) + norm(cout)
            if stage > 0 and j == 0:
                total += conv(cin, cout, 1, False) + norm(cout)
            cin = cout
    return total + fc(64 * k, c)


def resnet18_gn_count(c: int, projector: bool) -> int:
    total = conv(3, 64, 3, False) + norm(64)
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for j in range(2):
            total += conv(cin, cout, 3, False) + conv(cout, cout, 3, False) + 2 * norm(cout)
            if stage > 0 and j == 0:
                total += conv(cin, cout, 1, False) + norm(cout)
            cin = cout
    return total + (fc(512, 128) + fc(128, c) if projector else fc(512, c))


def densenet121_count(c: int, growth: int = 32) -> int:
    planes, total = 2 * growth, conv(3, 2 * growth, 3, False)
    for i, blocks in enumerate((6, 12, 24, 16)):
        for _ in range(blocks):
            total += norm(planes) + conv(planes, 4 * growth, 1, False) + norm(4 * growth)
            total += conv(4 * growth, growth, 3, False)
            planes += growth
        if i < 3:
            total += norm(planes) + conv(planes, planes // 2, 1, False)
            planes //= 2
    return total + norm(planes) + fc(planes, c)


VGG_CONVS = [(3, 64), (64, 128), (128, 256), (256, 256), (256, 512), (512, 512), (512, 512), (512, 512)]
ALEX_CONVS = [(3, 64, 11), (64, 192, 5), (192, 384, 3), (384, 256, 3), (256, 256, 3)]

CASES = [
    # name, input shape, classes, params, expected count
    (
        "ima_cnn",
        (1, 28, 28),
        10,
        {},
        conv(1, 32, 5) + conv(32, 32, 5) + fc(512, 384) + fc(384, 128) + fc(128, 10),
    ),
    (
        "ima_cnn",
        (3, 32, 32),
        10,
        {},
        conv(3, 64, 5) + conv(64, 64, 5) + fc(1600, 384) + fc(384, 128) + fc(128, 10),
    ),
    (
        "digit5_cnn",
        (3, 28, 28),
        10,
        {},
        conv(3, 64, 5)
        + conv(64, 64, 5)
        + conv(64, 128, 5)
        + norm(64 + 64 + 128)
        + fc(1152, 384)
        + fc(384, 128)
        + fc(128, 10),
    ),
    (
        "vgg11",
        (3, 32, 32),
        100,
        {},
        sum(conv(a, b, 3) + norm(b) for a, b in VGG_CONVS) + fc(512, 128) + fc(128, 100),
    ),
    (
        "alexnet",
        (3, 224, 224),
        7,
        {},
        sum(conv(a, b, k) + norm(b) for a, b, k in ALEX_CONVS) + fc(9216, 1024) + fc(1024, 128) + fc(128, 7),
    ),
    (
        "alexnet_cifar",
        (3, 32, 32),
        10,
        {},
        sum(conv(a, b, k) for a, b, k in ALEX_CONVS) + fc(256, 10),
    ),
    ("resnet18", (3, 32, 32), 10, {"projector": True}, resnet18_gn_count(10, True)),
    ("resnet8", (3, 32, 32), 10, {}, resnet_cifar_count(1, 1, 10)),
    ("resnet20", (3, 32, 32), 10, {}, resnet_cifar_count(3, 1, 10)),
    ("resnet56", (3, 32, 32), 100, {}, resnet_cifar_count(9, 1, 100)),
    ("resnet110", (3, 32, 32), 10, {}, resnet_cifar_count(18, 1, 10)),
    ("wrn56_4", (3, 32, 32), 10, {}, resnet_cifar_count(9, 4, 10)),
    ("densenet121", (3, 32, 32), 10, {}, densenet121_count(10)),
    ("emnist_cnn", (1, 28, 28), 62, {}, conv(1, 32, 3) + conv(32, 64, 3) + fc(9216, 128) + fc(128, 62)),
    ("fedcos_mlp", (1, 28, 28), 10, {}, fc(784, 200) + fc(200, 10)),
    ("fedcos_cnn", (3, 32, 32), 10, {}, conv(3, 6, 5) + conv(6, 16, 5) + fc(400, 120) + fc(120, 84) + fc(84, 10)),
    (
        "lstm",
        (80,),
        80,
        {},
        80 * 8 + (4 * 100 * (8 + 100) + 8 * 100) + (4 * 100 * (100 + 100) + 8 * 100) + fc(100, 80),
    ),
]


@pytest.mark.parametrize(("name", "shape", "classes", "params", "expected"), CASES, ids=[c[0] for c in CASES])
def test_output_shape_and_param_count(name: str, shape: tuple, classes: int, params: dict, expected: int) -> None:
    torch.manual_seed(0)
    model = build(name, shape, classes, **params)
    assert n_params(model) == expected
    x = torch.randint(0, classes, (1, *shape)) if name == "lstm" else torch.randn(1, *shape)
    model.eval()
    with torch.no_grad():
        assert model(x).shape == (1, classes)


def test_known_totals() -> None:
    """Cross-checks of the hand formulas against published totals."""
    assert resnet_cifar_count(3, 1, 10) == 272_474  # ResNet20 with 1x1-conv shortcuts (0.27M in He et al.)
    assert densenet121_count(10) == 6_956_298  # kuangliu/pytorch-cifar DenseNet121


BN = {"resnet20", "wrn56_4", "densenet121"}


@pytest.mark.parametrize("name", ["resnet20", "wrn56_4", "densenet121", "vgg11", "digit5_cnn", "lstm"])
def test_models_are_pure_functions(name: str) -> None:
    """No buffers (BatchNorm by batch statistics when asked), so every engine, vmap included, can run them."""
    shape = (3, 28, 28) if name == "digit5_cnn" else (80,) if name == "lstm" else (3, 32, 32)
    extra = {"running_stats": False} if name in BN else {}
    model = FunctionalModel(build(name, shape, 10 if name != "lstm" else 80, **extra))
    assert model.buffers == {} and model.vmap_safe


@pytest.mark.parametrize("name", sorted(BN))
def test_batchnorm_running_stats_are_buffers_for_the_sequential_engine(name: str) -> None:
    model = FunctionalModel(build(name, (3, 32, 32), 10))  # running_stats defaults to FedLAW's true
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.module.modules())
    assert len(model.buffers) == 3 * n_bn and not model.vmap_safe


def test_lstm_under_functional_call() -> None:
    model = FunctionalModel(build("lstm", (80,), 80))
    batch = {"x": torch.randint(0, 80, (3, 80)), "y": torch.randint(0, 80, (3,))}
    loss = model.loss(model.init_params(), batch)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(torch.log(torch.tensor(80.0)).item(), abs=0.3)


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("lstm", (1, 28, 28)),
        ("vgg11", (80,)),
        ("digit5_cnn", (1, 28, 28)),
        ("alexnet", (3, 32, 32)),
        ("alexnet_cifar", (1, 28, 28)),
    ],
)
def test_model_data_mismatch_is_a_config_error(name: str, shape: tuple) -> None:
    with pytest.raises(ConfigError) as e:
        build(name, shape, 10)
    assert e.value.field == "model.name" and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("ima_cnn", (1, 28, 28), 10),
        ("digit5_cnn", (3, 28, 28), 10),
        ("resnet8", (3, 32, 32), 10),
        ("alexnet_cifar", (3, 32, 32), 10),
        ("lstm", (10,), 80),
    ],
)
def test_vmap_over_clients_matches_a_loop(name: str, shape: tuple, classes: int) -> None:
    """What the vectorised engine relies on: per-client gradients under vmap equal a per-client loop."""
    from torch.func import grad, vmap

    torch.manual_seed(0)
    model = FunctionalModel(build(name, shape, classes, **({"running_stats": False} if name == "resnet8" else {})))
    params = model.init_params()
    x = torch.randint(0, classes, (2, 3, *shape)) if name == "lstm" else torch.randn(2, 3, *shape)
    y = torch.randint(0, classes, (2, 3))
    g = grad(lambda p, xb, yb: model.loss(p, {"x": xb, "y": yb}))
    stacked = {k: v.expand(2, *v.shape).clone() for k, v in params.items()}
    batched = vmap(g)(stacked, x, y)
    for c in range(2):
        single = g(params, x[c], y[c])
        for k in params:
            torch.testing.assert_close(batched[k][c], single[k], rtol=1e-4, atol=1e-5)
