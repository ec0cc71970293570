"""The batch's way to the model on the device: normalisation, erasing, MixUp/CutMix, memory format."""

import pytest
import torch

from utils.config.settings import typed_options

from utils.config.options import parse_args
from utils.config.settings import input_for
from utils.data.transforms.batch import BatchInput

CLASSES = 10


def inputs(*extra, rank=0):
    args = parse_args(["--train_dir", "x", "--image_size", "16", *map(str, extra)])
    typed = typed_options(args)
    return BatchInput.for_training(typed["batch"], CLASSES, rank, input_for(args).mean_std,
                                   channels_last=typed["model"].channels_last)


def batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(n) % CLASSES


def test_without_switches_the_batch_is_only_normalised():
    pixels, labels = batch()
    plain = inputs()
    x = plain(pixels)
    assert x.dtype == torch.float32 and x.shape == pixels.shape
    out, targets = plain.augment(x, labels, epoch=0, batch=0)
    assert out is x and targets is labels  # the default job: nothing drawn, nothing changed
    clip = torch.randint(0, 256, (2, 3, 4, 16, 16), dtype=torch.uint8)  # video (N, C, T, H, W): per channel too
    assert torch.equal(plain(clip)[:, :, 1], plain(clip[:, :, 1]))
    synthetic = torch.randn(2, 3, 16, 16)  # float input (synthetic data) is left as it is
    assert plain(synthetic) is synthetic


def test_random_erase_zeroes_one_patch_per_image_drawn_per_batch_and_rank():
    pixels, labels = batch()
    erase = inputs("--random_erase", 1)
    x = erase(pixels)
    out, targets = erase.augment(x.clone(), labels, epoch=0, batch=3)
    assert torch.equal(targets, labels)
    changed = (out != x).any(dim=1)  # (N, H, W)
    for image, mask in zip(out, changed):
        assert mask.any() and not mask.all() and (image[:, mask] == 0).all()  # 0 after normalisation: the mean
    rows, cols = changed.any(dim=2), changed.any(dim=1)
    assert len({(tuple(r.tolist()), tuple(c.tolist())) for r, c in zip(rows, cols)}) > 1  # each image its own patch
    again, _ = erase.augment(x.clone(), labels, epoch=0, batch=3)
    assert torch.equal(again, out)  # a function of (seed, epoch, batch, rank): a resumed run draws the same
    for other, epoch, step in ((erase, 0, 4), (erase, 1, 3), (inputs("--random_erase", 1, rank=1), 0, 3)):
        assert not torch.equal(other.augment(x.clone(), labels, epoch=epoch, batch=step)[0], out)
    state = torch.get_rng_state()
    erase.augment(x.clone(), labels, epoch=0, batch=3)
    assert torch.equal(torch.get_rng_state(), state)  # the global stream is left where it was


def test_mixup_mixes_pixels_and_targets_by_the_same_weight():
    pixels, labels = batch()
    mix = inputs("--mixup_alpha", 0.4)
    x = mix(pixels)
    out, targets = mix.augment(x.clone(), labels, epoch=0, batch=0)
    assert targets.shape == (8, CLASSES) and torch.allclose(targets.sum(dim=1), torch.ones(8))
    lam = targets[0, labels[0]].item()  # each image is paired with the one before it (torchvision's roll)
    assert 0 < lam < 1
    assert torch.allclose(out, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)
    assert torch.allclose(targets[0, labels[-1]], torch.tensor(1 - lam))


def test_cutmix_pastes_a_box_whose_area_is_the_target_weight():
    pixels, labels = batch()
    mix = inputs("--cutmix_alpha", 1.0)
    x = mix(pixels)
    for step in range(5):
        out, targets = mix.augment(x.clone(), labels, epoch=0, batch=step)
        pasted = (out != x).any(dim=1)[0]  # where image 0 shows image 7
        assert torch.equal(out[0][:, pasted], x[7][:, pasted]) and torch.equal(out[0][:, ~pasted], x[0][:, ~pasted])
        assert targets[0, labels[7]].item() == pytest.approx(pasted.float().mean().item(), abs=1e-6)


def test_both_alphas_choose_one_mix_per_batch_and_mix_prob_leaves_some_batches_alone():
    pixels, labels = batch()

    def kinds(*extra):
        mix, found = inputs(*extra), []
        x = mix(pixels)
        for step in range(40):
            out, targets = mix.augment(x.clone(), labels, epoch=0, batch=step)
            if targets.dim() == 1:
                found.append("none")
            else:  # CutMix takes each pixel from one of the two images; MixUp blends them
                found.append("cutmix" if ((out == x) | (out == x.roll(1, 0))).all() else "mixup")
        return found

    both = kinds("--mixup_alpha", 0.2, "--cutmix_alpha", 1.0)
    assert 10 <= both.count("mixup") <= 30 and both.count("mixup") + both.count("cutmix") == 40
    some = kinds("--mixup_alpha", 0.2, "--mix_prob", 0.5)
    assert 10 <= some.count("none") <= 30 and set(some) == {"none", "mixup"}
    assert set(kinds("--mixup_alpha", 0.2, "--mix_prob", 0)) == {"none"}


def test_soft_targets_go_through_the_loss_with_label_smoothing():
    logits = torch.randn(4, CLASSES)
    labels = torch.tensor([1, 2, 3, 4])
    loss = torch.nn.CrossEntropyLoss(label_smoothing=0.1, reduction="none")
    one_hot = torch.nn.functional.one_hot(labels, CLASSES).float()
    assert torch.allclose(loss(logits, one_hot), loss(logits, labels))  # hard and soft agree when unmixed


def test_channels_last_formats_images_and_clips():
    fast = inputs("--channels_last")
    assert fast(batch()[0]).is_contiguous(memory_format=torch.channels_last)
    clip = torch.randint(0, 256, (2, 3, 4, 16, 16), dtype=torch.uint8)
    assert fast(clip).is_contiguous(memory_format=torch.channels_last_3d)
    out, _ = inputs("--channels_last", "--cutmix_alpha", 1).augment(fast(batch()[0]), batch()[1], 0, 0)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert inputs()(batch()[0]).is_contiguous()
