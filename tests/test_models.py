"""Models: any torchvision classifier by name, num_classes from the data, helpful unknown-name errors."""

import pytest

from utils.models import build_model, check_model_name


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
def test_classifier_has_num_classes_outputs(name):
    import torch

    model = build_model(name, num_classes=7).eval()
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 7)


def test_unknown_name_suggests_close_ones():
    with pytest.raises(ValueError, match=r"'resnet19' is not a torchvision classification model; did you mean "
                                          r"resnet18"):
        check_model_name("resnet19")
    with pytest.raises(ValueError, match="see torchvision.models.list_models"):
        check_model_name("qqqqqqqq")
    with pytest.raises(ValueError):
        check_model_name("fasterrcnn_resnet50_fpn")  # a detection model is not a classifier
