"""--model_ema: the averaged weights' arithmetic (exact resume with EMA: test_recipes.py)."""

import torch
import torchvision

from utils.models.ema import build_ema, update_ema


def test_ema_follows_the_weights_and_buffers_with_timms_warmup():
    model = torchvision.models.resnet18(num_classes=3)
    ema = build_ema(model, "cpu", decay=0.9, warmup=True)
    start = model.fc.weight.detach().clone()
    update_ema(ema, model, 2, every=2)  # the first update copies
    assert torch.equal(ema.module.fc.weight, start)
    with torch.no_grad():
        model.fc.weight.add_(1.0)
        model.bn1.running_mean.add_(2.0)
        model.bn1.num_batches_tracked += 5
    update_ema(ema, model, 3, every=2)  # not a multiple of 2: no update
    assert torch.equal(ema.module.fc.weight, start)
    update_ema(ema, model, 4, every=2)  # 1 update so far: decay min(0.9, 2 / 11)
    d = 2 / 11
    assert torch.allclose(ema.module.fc.weight, d * start + (1 - d) * (start + 1))
    assert torch.allclose(ema.module.bn1.running_mean, torch.full((64,), (1 - d) * 2.0))  # BatchNorm statistics too
    assert int(ema.module.bn1.num_batches_tracked) == 5  # a counter is copied, not averaged
