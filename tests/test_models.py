"""Models: any torchvision classifier by name, num_classes from the data, helpful unknown-name errors."""

import pytest
import torch
import torchvision

from utils.config.options import parse_args
from utils.models.libraries import build_model, check_model_name


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
def test_classifier_has_num_classes_outputs(name):
    import torch

    model = build_model(name, num_classes=7).eval()
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 7)


def test_unknown_name_suggests_close_ones():
    with pytest.raises(ValueError, match=r"'resnet19' is not a torchvision classification or video model; did you mean "
                                          r"resnet18"):
        check_model_name("resnet19")
    with pytest.raises(ValueError, match="see torchvision.models.list_models"):
        check_model_name("qqqqqqqq")
    with pytest.raises(ValueError):
        check_model_name("fasterrcnn_resnet50_fpn")  # a detection model is not a classifier


def torchvision_pretrained_layout(name, num_classes=1000):
    """A model laid out as torchvision builds it for its pretrained weights: auxiliary heads, input transform."""
    import torchvision

    return torchvision.models.get_model(name, weights=None, num_classes=num_classes, aux_logits=True,
                                        transform_input=True, init_weights=False)


@pytest.mark.parametrize("name, size", [("googlenet", 32), ("inception_v3", 75)])
def test_auxiliary_head_models_train_on_plain_logits(name, size):
    import torch

    torch.manual_seed(0)
    model = build_model(name, num_classes=5).train()
    logits = model(torch.randn(2, 3, size, size))
    assert type(logits) is torch.Tensor and logits.shape == (2, 5)  # not a namedtuple with aux logits
    torch.nn.functional.cross_entropy(logits, torch.tensor([1, 4])).backward()
    first_conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert model.fc.weight.grad.abs().sum() > 0 and first_conv.weight.grad.abs().sum() > 0
    assert not [k for k in model.state_dict() if k.split(".")[0] in ("aux1", "aux2", "AuxLogits")]


def test_every_torchvision_model_with_auxiliary_heads_is_built_without_them():
    import inspect

    import torch
    import torchvision

    from utils.models.torchvision_library import _BUILD_OPTIONS

    with_aux = sorted(c.__name__ for c in vars(torchvision.models).values() if isinstance(c, type)
                      and issubclass(c, torch.nn.Module) and "aux_logits" in inspect.signature(c).parameters)
    assert with_aux == ["GoogLeNet", "Inception3"]
    assert {name: opts["aux_logits"] for name, opts in _BUILD_OPTIONS.items()} == \
        {"googlenet": False, "inception_v3": False}


@pytest.mark.parametrize("name, size, heads", [("googlenet", 32, {"aux1", "aux2"}),
                                               ("inception_v3", 75, {"AuxLogits"})])
def test_pretrained_state_with_auxiliary_heads_loads_and_computes_the_same(name, size, heads):
    import torch

    from utils.models.errors import ModelError
    from utils.models.weights import load_matching

    reference = torchvision_pretrained_layout(name).eval()
    state = reference.state_dict()
    assert heads <= {k.split(".")[0] for k in state}
    model = build_model(name, num_classes=1000).eval()
    assert load_matching(model, state, "pretrained") == []
    own = model.state_dict()
    assert all(torch.equal(own[k], state[k]) for k in own)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))  # same weights and the same input transform
    with pytest.raises(ModelError, match=r"unexpected \['bogus.weight'\] \(0 and 1 in all\)"):
        load_matching(model, {**state, "bogus.weight": torch.zeros(1)}, "pretrained")  # only aux keys go


def test_init_from_a_state_with_auxiliary_heads_says_they_are_not_used(tmp_path):
    import torch

    from utils.config.options import parse
    from utils.models.libraries import initialise

    reference = torchvision_pretrained_layout("googlenet", num_classes=1000)
    torch.save(reference.state_dict(), tmp_path / "googlenet.pth")
    model, lines = build_model("googlenet", num_classes=4), []
    initialise(model, parse(["--model", "googlenet", "--init_from", str(tmp_path / "googlenet.pth")]).model,
               log=lines.append)
    assert lines == ["init_from: weights loaded; re-initialised (other shape): fc.bias, fc.weight; "
                     "auxiliary classifiers not used: aux1, aux2"]
    assert torch.equal(model.conv1.conv.weight, reference.conv1.conv.weight)


@pytest.mark.parametrize("name, least", [("googlenet", 15), ("inception_v3", 75), ("squeezenet1_1", 17)])
def test_minimum_image_size_is_the_real_limit(name, least):
    import torch

    from utils.models.errors import ModelError
    from utils.models.libraries import check_image_size

    model = build_model(name, num_classes=3).eval()
    with torch.no_grad():
        assert model(torch.zeros(1, 3, least, least)).shape == (1, 3)
        with pytest.raises(RuntimeError):
            model(torch.zeros(1, 3, least - 1, least - 1))
    check_image_size(name, least)
    with pytest.raises(ModelError, match=f"{name} needs --image_size {least} or more, got {least - 1}"):
        check_image_size(name, least - 1)


@pytest.mark.parametrize("name", ["efficientnet_v2_s", "swin_t"])
def test_no_limit_where_torchvision_meta_overstates_the_minimum(name):
    import torch
    import torchvision

    from utils.models.libraries import check_image_size

    assert torchvision.models.get_model_weights(name).DEFAULT.meta["min_size"][0] > 32
    check_image_size(name, 32)
    with torch.no_grad():
        assert build_model(name, num_classes=3).eval()(torch.zeros(1, 3, 32, 32)).shape == (1, 3)


@pytest.mark.parametrize("argv, message", [
    (["--model", "inception_v3"], "inception_v3 needs --image_size 75 or more, got 32 (the default for this data)"),
    (["--model", "inception_v3", "--dataset", "synthetic", "--image_size", "74"],
     "inception_v3 needs --image_size 75 or more, got 74"),
    (["--model", "vit_b_16", "--train_dir", "x", "--image_size", "256"],
     "vit_b_16 takes --image_size 224 only, got 256"),
    (["--model", "timm/test_vit", "--dataset", "synthetic", "--image_size", "60"],
     "timm/test_vit cuts images into 16 px patches: --image_size must be a multiple of 16 (its own is 160), got 60"),
    (["--model", "timm/test_vit", "--train_dir", "x", "--image_size", "56", "--train_crop_size", "48"],
     "timm/test_vit cuts images into 16 px patches: --image_size must be a multiple of 16 (its own is 160), got 56"),
])
def test_an_image_size_the_model_cannot_take_is_one_line_exit_2(argv, message, capsys):
    from utils.config.options import parse_args

    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"train_classification.py: error: image_size: {message}"]


@pytest.mark.parametrize("argv", [["--model", "inception_v3", "--image_size", "75"], ["--model", "googlenet"],
                                  ["--model", "efficientnet_v2_s"], ["--model", "swin_t"],
                                  ["--model", "vit_b_16", "--train_dir", "x"],
                                  ["--model", "timm/test_vit", "--dataset", "synthetic", "--image_size", "64"]])
def test_image_sizes_the_model_can_take_pass(argv):
    from utils.config.options import parse_args

    assert parse_args(argv).model == argv[1]


def test_image_resnets_start_with_identity_residual_blocks_unless_asked_not_to():
    model = build_model("resnet18", num_classes=3)
    blocks = [m for m in model.modules() if isinstance(m, torchvision.models.resnet.BasicBlock)]
    assert blocks and all(torch.count_nonzero(b.bn2.weight) == 0 for b in blocks)
    block = blocks[0].eval()  # no downsample: the block is relu(x + 0)
    x = torch.randn(2, 64, 8, 8)
    assert torch.equal(block(x), torch.relu(x))
    plain = build_model("resnet18", num_classes=3, zero_init_residual=False)
    assert all(torch.count_nonzero(m.bn2.weight) > 0 for m in plain.modules()
               if isinstance(m, torchvision.models.resnet.BasicBlock))
    assert not parse_args(["--no-zero_init_residual"]).zero_init_residual and parse_args([]).zero_init_residual


def test_drop_path_and_dropout_reach_the_builder_or_are_one_line(tmp_path, capsys, fresh_accelerate_state):
    import train_classification

    from utils.models.errors import ModelError

    model = build_model("efficientnet_b0", num_classes=3, drop_path=0.3, dropout=0.4)
    depths = [m.p for m in model.modules() if type(m).__name__ == "StochasticDepth"]
    assert depths[-1] == pytest.approx(0.3 * (len(depths) - 1) / len(depths))  # torchvision ramps it per block
    assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.4]
    default = build_model("efficientnet_b0", num_classes=3)
    assert [m.p for m in default.modules() if isinstance(m, torch.nn.Dropout)] == [0.2]  # the builder's own
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train_classification.main(["--dataset", "synthetic", "--dropout", "0.2", "--output_dir", str(out)])
    assert e.value.code == 2 and not out.exists()  # the folder this refused run made is gone
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "train_classification.py: error: --dropout: resnet18 has no dropout to set")
    # swin has stochastic depth, but torchvision's builder sets it: not "has none", and not "pick swin"
    with pytest.raises(ModelError, match=r"^--drop_path: torchvision's swin_t builder sets its own drop path \(it "
                       r"takes no stochastic_depth_prob argument\); "
                       r".*\(e\.g\. efficientnet, convnext, mvit, or a timm/"):
        build_model("swin_t", num_classes=3, drop_path=0.1)


def test_sync_bn_and_channels_last_reshape_the_model_and_sync_bn_is_refused_on_cpu_processes():
    from types import SimpleNamespace

    from utils.models.device import for_device
    from utils.models.errors import ModelError

    one_cpu = SimpleNamespace(num_processes=1, device=torch.device("cpu"))
    model = for_device(build_model("resnet18", 10), one_cpu, sync_bn=True, channels_last=True)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms and all(isinstance(m, torch.nn.SyncBatchNorm) for m in norms)  # statistics over all processes
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    plain = for_device(build_model("resnet18", 10), one_cpu)
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in plain.modules())
    assert plain.conv1.weight.is_contiguous()
    video = for_device(build_model("r3d_18", 2), one_cpu, channels_last=True)
    assert video.stem[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    # torch's SyncBatchNorm has no CPU implementation: 2 CPU processes get one line, before any training.
    with pytest.raises(ModelError, match="sync_bn: .*GPUs"):
        for_device(build_model("resnet18", 10), SimpleNamespace(num_processes=2, device=torch.device("cpu")),
                   sync_bn=True)
