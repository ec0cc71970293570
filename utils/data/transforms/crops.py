"""The random train crop of images: its area share and aspect ratio by default, for each kind of data, and the line
that says which applies and where it came from."""

# The random-resized crop's defaults. timm's and torchvision's ImageNet recipes draw 8-100 % of the area at aspect
# ratios 3/4-4/3 (Inception's crop): right for single-label photos of 128 px and more (every ImageNet recipe trains at
# 160 px or more), where a crop of a twelfth of the image still shows enough of its one object. Two kinds of data lose
# their labels to it (benchmarks/crop_scale.py, measured in docs/recipes.md): multi-label images, whose labelled
# objects lie apart, so that a small crop cuts out some of them while their labels stay on, and small images, which
# are mostly their object (a 32 px digit cropped to a twelfth is a 9 px smudge). Both keep 85-100 % of the image: a
# shift and a slight zoom, as CIFAR's padded random crop is; no crop at all overfits (measured too).
CROP_RATIO = (3 / 4, 4 / 3)
IMAGENET_CROP_SCALE = (0.08, 1.0)
WHOLE_OBJECTS_CROP_SCALE = (0.85, 1.0)  # multi-label images of any size, single-label images under SMALL_SIDE
SMALL_SIDE = 128


def crop_note(asked, inp, targets):
    """The start-up line of the random train crop of Input `inp` (before with_crop_box) for data of `targets`
    (utils/data/datasets/label_kinds.py): its area share and aspect ratio, and where they came from (`asked`: the
    InputOptions it was resolved from)."""
    (low, high), (narrow, wide) = inp.crop_box(targets)
    origin = ("--train_crop_scale" if asked.train_crop_scale else "as the resumed checkpoint was made" if
              inp.train_crop_scale else targets.crop_origin(inp.image_size))
    return (f"train crops: {low:.0%}-{high:.0%} of each image's area ({origin}), aspect ratio {narrow:.3g}-{wide:.3g}"
            f"{' (--train_crop_ratio)' if asked.train_crop_ratio else ''}")
