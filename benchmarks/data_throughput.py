"""Images/s of the project's input pipeline against torchvision's ImageFolder + DataLoader.

    python benchmarks/data_throughput.py                   # 400 generated 500x375 JPEGs, 1 and 2 workers
    python benchmarks/data_throughput.py --workers 4 8 --data_dir /path/to/imagefolder/train
    python benchmarks/data_throughput.py --streaming       # the same JPEGs as parquet shards, streamed
    python benchmarks/data_throughput.py --decoders        # also: the image decoders alone, one thread

The loaders read the same folder with the same train transforms (RandomResizedCrop 224, flip, float,
ImageNet normalisation), batch size and worker count, and persistent workers. The baseline decodes with
PIL and transforms PIL images (what torchvision's ImageFolder does); the project's goes through a
`datasets.Dataset` of the listed files, decodes with libjpeg-turbo into uint8 tensors and transforms
those. The project is timed twice: "float" converts and normalises in the workers (how it did before),
"uint8" hands uint8 batches over (a quarter of the bytes through worker IPC and, on a GPU, the
host-to-device copy) and normalises each batch in the main process, as training does on its device
(here the CPU: that cost is inside the figure).

--streaming adds the --streaming path (utils/data/streaming/, utils/data/sources/streamed.py): the same JPEG bytes
written into 8 parquet shards, read as a stream by the training loader (shards split among workers, blocks shuffled, the
same transforms and uint8 hand-over), against the map-style folder path on the same files.

Every figure is the median of whole epochs after an untimed first one (images_per_second says why).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def generate_folder(root, classes=10, per_class=40, size=(500, 375), seed=0):
    """Deterministic photo-like JPEGs (gradients, shapes, blur, noise) in root/<class>/<n>.jpg."""
    rng = np.random.default_rng(seed)
    w, h = size
    for c in range(classes):
        folder = Path(root) / f"class_{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            ramp = np.linspace(0, 255, w, dtype=np.float32)[None, :, None] * rng.random(3)[None, None, :]
            img = Image.fromarray(np.broadcast_to(ramp, (h, w, 3)).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            for _ in range(12):
                x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
                box = [x0, y0, x0 + int(rng.integers(20, 200)), y0 + int(rng.integers(20, 200))]
                fill = tuple(int(v) for v in rng.integers(0, 255, 3))
                (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
            pixels = np.asarray(img.filter(ImageFilter.GaussianBlur(1)), dtype=np.float32)
            pixels = np.clip(pixels + rng.normal(0, 12, pixels.shape), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)


def epoch_rate(loader, prepare=None):
    """Images/s of one whole epoch, timed from asking for its batches to its last. Whole epochs, because what an
    epoch's start costs differs between loaders (workers kept or started again, a stream's first block read) and
    belongs in the figure; and because a window that starts at an epoch's first batch misleads: Accelerate's
    loader holds each batch until the next one has arrived (it looks one ahead to know the last), so its first
    batch comes a batch late and its last at once, and such a window credits it with a batch it made before the
    clock started."""
    start, n = time.perf_counter(), 0
    for batch in loader:
        if prepare is not None:
            prepare(batch["pixel_values"])
        n += len(batch["labels"] if isinstance(batch, dict) else batch[1])
    return n / (time.perf_counter() - start)


def images_per_second(loader, epochs, prepare=None):
    """The median over `epochs` whole epochs after one untimed epoch (the workers' first start, imports, caches)."""
    return statistics.median([epoch_rate(loader, prepare) for _ in range(epochs + 1)][1:])


def paired_rates(first, second, epochs):
    """(first's img/s, second's, the median of second / first over `epochs` pairs of epochs): the two loaders'
    epochs taken in turn, after an untimed one each, so that the machine's changes of speed (which moved one
    loader's figure by 15 % from run to run here) fall on both alike. Both loaders keep their workers; the idle
    ones wait without using a core."""
    pairs = [(epoch_rate(*first), epoch_rate(*second)) for _ in range(epochs + 1)][1:]
    return (statistics.median(x for x, _ in pairs), statistics.median(y for _, y in pairs),
            statistics.median(y / x for x, y in pairs))


def baseline_loader(folder, batch_size, workers):
    import torchvision
    from torchvision.transforms import v2

    from utils.data.sources.protocol import IMAGENET_MEAN, IMAGENET_STD

    transform = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dataset = torchvision.datasets.ImageFolder(folder, transform=transform)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                                       persistent_workers=workers > 0)


def project_loader(folder, batch_size, workers, float_in_workers=False):
    """The project's train loader and what the training loop does to each batch before the model."""
    from torchvision.transforms import v2

    from utils.config.options import parse
    from utils.data.loading.loaders import build_dataloaders
    from utils.data.sources.protocol import IMAGENET_MEAN, IMAGENET_STD
    from utils.data.transforms.batch import BatchInput
    from utils.data.transforms.images import Fixed
    from utils.run.accelerator import build_accelerator

    settings = parse(["--train_dir", str(folder), "--image_size", "224", "--batch_size", str(batch_size),
                      "--num_workers", str(workers), "--val_fraction", "0.1"])
    train, val, _, _ = settings.source.datasets(settings.data, settings.input, 0, 1)
    prepare = BatchInput.for_training(settings.batch, 10, 0, settings.input.mean_std)
    if float_in_workers:  # the former pipeline: float32 normalised in the workers, nothing left to do after
        rows = train.dataset
        transform, size = rows.preset(0)
        rows.preset = Fixed(v2.Compose([transform, v2.ToDtype(torch.float32, scale=True),
                                        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]), size)
        prepare = None
    loader, _ = build_dataloaders(build_accelerator(settings), train, val, batch_size, workers)
    return Epochs(loader), prepare


def write_shards(folder, root, shards=8):
    """The folder's JPEGs (their bytes, as they are) into train-*.parquet shards, and a validation file."""
    import datasets

    files = sorted(Path(folder).rglob("*.jpg"))
    classes = sorted({f.parent.name for f in files})
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=classes))
    Path(root).mkdir(parents=True)
    table = datasets.Dataset.from_dict({"image": [{"bytes": f.read_bytes(), "path": None} for f in files],
                                        "label": [classes.index(f.parent.name) for f in files]}, features=features)
    for s in range(shards):
        table.shard(shards, s).to_parquet(Path(root) / f"train-{s:05d}-of-{shards:05d}.parquet")
    table.select(range(len(classes))).to_parquet(Path(root) / "validation-00000-of-00001.parquet")
    return root


class Epochs:
    """A training loader (map-style or streamed) seen as a loader whose every iteration is the next epoch,
    read as training reads it (`batches(epoch)`)."""

    def __init__(self, loader):
        self.loader, self.epoch = loader, 0

    def __iter__(self):
        self.epoch += 1
        return iter(self.loader.batches(self.epoch - 1))


def stream_loader(shards, batch_size, workers):
    from utils.config.options import parse
    from utils.data.transforms.batch import BatchInput
    from utils.run.accelerator import build_accelerator

    settings = parse(["--dataset", str(shards), "--streaming", "--image_size", "224", "--batch_size", str(batch_size),
                      "--num_workers", str(workers)])
    train, val, names, _ = settings.source.datasets(settings.data, settings.input, 0, 1)
    loader, _ = settings.source.loaders(build_accelerator(settings), train, val, batch_size, workers)
    return Epochs(loader), BatchInput.for_training(settings.batch, len(names), 0, settings.input.mean_std)


def stream_read_rate(shards, repeats=3):
    """Rows a second of one process's pass over the shards (epoch 1), read as a streaming worker reads them and
    not decoded: `datasets` and parquet alone. The best of `repeats` passes."""
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    rows = datasets_for(parse_args(["--dataset", str(shards), "--streaming", "--image_size", "224"]))[0]
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        n = sum(1 for _ in rows.share(1))
        best = max(best, n / (time.perf_counter() - start))
    return best


def decoder_rates(folder, files=100, repeats=5):
    """Images/s of each decoder alone on the folder's first files, one thread, best of `repeats`: the project's
    (utils/data/decoding/images.decode_rgb: torchcodec), torchcodec's and torchvision's own (while torchvision has
    them), PIL's."""
    import io
    import warnings

    from utils.data.decoding.images import decode_rgb

    data = [f.read_bytes() for f in sorted(Path(folder).rglob("*.jpg"))[:files]]
    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
    decoders = {"project (decode_rgb)": lambda i: decode_rgb({"bytes": data[i], "path": None})}
    try:
        from torchcodec.decoders import decode_image as torchcodec_decode

        decoders["torchcodec decode_image"] = lambda i: torchcodec_decode(tensors[i], mode="RGB")
    except ImportError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's deprecation notice at every call
        try:
            from torchvision.io import ImageReadMode
            from torchvision.io import decode_image as torchvision_decode

            decoders["torchvision decode_image"] = lambda i: torchvision_decode(tensors[i], mode=ImageReadMode.RGB)
        except ImportError:
            pass
        decoders["PIL"] = lambda i: np.array(Image.open(io.BytesIO(data[i])).convert("RGB"))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        rates = {}
        for _ in range(repeats):  # interleaved, so that a slow moment of the machine hits each alike
            for name, decode in decoders.items():
                start = time.perf_counter()
                for i in range(len(data)):
                    decode(i)
                rates[name] = max(rates.get(name, 0), len(data) / (time.perf_counter() - start))
        torch.set_num_threads(threads)
    return rates


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", default=None, help="an image folder (default: generate 400 JPEGs)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per figure (median)")
    p.add_argument("--streaming", action="store_true",
                   help="streamed parquet shards of the same JPEGs against the map-style folder path")
    p.add_argument("--decoders", action="store_true", help="also time the image decoders alone, one thread")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.data_dir
        if folder is None:
            folder = Path(tmp) / "images"
            generate_folder(folder)
        n = sum(1 for _ in Path(folder).rglob("*.jpg"))
        print(f"{n} images in {folder}, batch {args.batch_size}, 224 px train transforms, "
              f"{torch.get_num_threads()} threads in the main process")
        if args.decoders:
            rates = decoder_rates(folder)
            print("decoders alone, one thread: "
                  + " | ".join(f"{name} {rate:.1f} img/s" for name, rate in rates.items()))
        if args.streaming:
            shards = write_shards(folder, Path(tmp) / "shards")
            rate = stream_read_rate(shards)
            print(f"the stream's rows read alone (not decoded): {rate:.0f} rows/s ({1e6 / rate:.1f} us a row)")
            for workers in args.workers:
                folder_rate, stream_rate, ratio = paired_rates(project_loader(folder, args.batch_size, workers),
                                                               stream_loader(shards, args.batch_size, workers),
                                                               args.epochs)
                print(f"workers {workers}: project folder (map-style) {folder_rate:7.1f} img/s | streaming parquet "
                      f"(8 shards) {stream_rate:7.1f} img/s | ratio {ratio:.2f} (median of {args.epochs} epoch pairs)")
            return
        for workers in args.workers:
            base = images_per_second(baseline_loader(folder, args.batch_size, workers), args.epochs)
            loader, prepare = project_loader(folder, args.batch_size, workers, float_in_workers=True)
            before = images_per_second(loader, args.epochs, prepare)
            loader, prepare = project_loader(folder, args.batch_size, workers)
            ours = images_per_second(loader, args.epochs, prepare)
            print(f"workers {workers}: ImageFolder+PIL {base:7.1f} img/s | project float {before:7.1f} img/s | "
                  f"project uint8 {ours:7.1f} img/s | ratio to ImageFolder {ours / base:.2f}, "
                  f"uint8 / float {ours / before:.2f}")


if __name__ == "__main__":
    main()
