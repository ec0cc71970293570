"""The data, video and augmentation options (options.py builds the parser): each declared once, with its
default, its help and whether a resume must keep it."""


def stat_value(text):
    """A value of --mean/--std: a number, or auto."""
    return text if text == "auto" else float(text)


def add_data_options(p):
    """Where the data comes from, how video is read, how samples are augmented."""
    g = p.add_argument_group("data")
    g.add_argument("--dataset", resume_key=False, type=str, default="digits",
                   help="digits (embedded 8x8 scans, offline), multi_digits (embedded tiles of 2-4 digits, labelled "
                        "with every digit shown: multi-label, offline), spectral_digits (embedded 6-band 16-bit "
                        "images: the digit in bands 3-5, a decoy in 0-2; offline), moving_digits (embedded video clips "
                        "labelled by "
                        "direction of motion, offline), synthetic (random tensors, no I/O), imagefolder "
                        "(with --data_dir), a folder written by save_to_disk, or a Hub dataset name (e.g. cifar10)")
    g.add_argument("--dataset_config", resume_key=False, type=str, default=None, help="Hub dataset configuration name")
    g.add_argument("--train_split", resume_key=False, type=str, default="train", help="split to train on")
    g.add_argument("--val_split", resume_key=False, type=str, default=None,
                   help="split to validate on (default: validation, val, valid or test, whichever exists)")
    g.add_argument("--val_fraction", resume_key=False, type=float, default=0.1,
                   help="without a validation split: this fraction of train, stratified, fixed seed")
    g.add_argument("--image_column", resume_key=False,
                   type=str, default=None, help="image column (default: image, img, ...)")
    g.add_argument("--label_column", resume_key=False,
                   type=str, default=None, help="label column (default: label, labels, ...)")
    g.add_argument("--train_dir", resume_key=False, type=str, default=None,
                   help="folder of <class>/<image> (or <class>/<video>) files to train on")
    g.add_argument("--val_dir", resume_key=False, type=str, default=None,
                   help="folder of <class>/<image> (or <class>/<video>) files to validate on")
    g.add_argument("--data_dir", resume_key=False, type=str, default=None,
                   help="with --dataset imagefolder: a folder holding train/ and val/ (or validation/)")
    g.add_argument("--streaming", resume_key=True, action="store_true",
                   help="read the training split of --dataset (a Hub name, or a local folder of parquet/arrow/"
                        "webdataset shards) as a stream: each process reads its own shards, nothing cached ahead; "
                        "the validation split is read whole")
    g.add_argument("--steps_per_epoch", resume_key=True, type=int, default=None,
                   help="--streaming or --sampler balanced: optimizer steps per epoch (default: the split's size "
                        "(a stream's from its metadata) over the global batch)")
    g.add_argument("--shuffle_buffer", resume_key=True, type=int, default=1000,
                   help="--streaming: samples are shuffled in blocks of this many read in a row (the shard order "
                        "is shuffled too); each worker holds two blocks of undecoded samples (the next one is read "
                        "while the current one is used)")
    g.add_argument("--max_train_samples", resume_key=False,
                   type=int, default=None, help="train on a seeded subset of this size")
    g.add_argument("--max_val_samples", resume_key=False,
                   type=int, default=None, help="validate on a seeded subset of this size")
    g.add_argument("--folds", resume_key=True, type=int, default=None,
                   help="k-fold cross-validation: cut the training split into K folds, stratified by class, and hold "
                        "out fold --fold as the validation (the split's own validation is left aside); crossval.py "
                        "runs all K")
    g.add_argument("--fold", resume_key=True, type=int, default=None, help="with --folds K: the held-out fold, 0..K-1")
    g.add_argument("--fold_seed", resume_key=True, type=int, default=0,
                   help="with --folds: the seed the folds are drawn with (not --seed: every training seed sees the "
                        "same folds)")
    g.add_argument("--group_column", resume_key=True, type=str, default=None,
                   help="with --folds: a column of --train_csv or of the dataset naming each sample's group (a "
                        "patient, a site): a group's samples stay in one fold")
    g.add_argument("--groups", resume_key=True, type=str, default=None,
                   help="with --folds: a CSV of 'sample,group' lines (samples named by path, or by index in the "
                        "training split): a group's samples stay in one fold")
    g.add_argument("--exclude", resume_key=True, type=str, default=None,
                   help="a CSV naming training samples to leave out (its 'sample' column, else its first; by path, or "
                        "by index in the training split): crossval.py's label_issues.csv, for one")
    g.add_argument("--audit", resume_key=False, type=str, default=None, metavar="DIR",
                   help="a folder audit.py wrote of this data: results.json also gives the validation figures without "
                        "the validation samples it found leaked (its leaked.csv), beside the whole split's")
    g.add_argument("--flip_labels", resume_key=True, type=float, default=None,
                   help="flip this fraction of the training labels to another class at random (a fixed seed, the "
                        "same samples in every run; listed in flipped_labels.csv): an experiment's label noise")
    g.add_argument("--skip_bad_images", "--skip_bad_videos", resume_key=False,
                   dest="skip_bad_images", action="store_true",
                   help="skip images or videos that cannot be decoded (listed in bad_images.txt) instead of stopping")
    g.add_argument("--image_size", resume_key=False, type=int, default=None,
                   help="side of the square input images (default: 32 for digits and synthetic, 24 for moving "
                        "digits, a timm/hf model's own, 112 for video, else 224)")
    g.add_argument("--num_classes", resume_key=False, type=int, default=10, help="class count of --dataset synthetic")
    g.add_argument("--synthetic_train_samples", resume_key=False,
                   type=int, default=1024, help="train size of --dataset synthetic")
    g.add_argument("--synthetic_val_samples", resume_key=False,
                   type=int, default=256, help="val size of --dataset synthetic")
    g.add_argument("--num_workers", resume_key=False, type=int, default=None,
                   help="data-loading worker processes per process (default: chosen from the cores per process)")
    g.add_argument("--decode_on_device", resume_key=False, action="store_true",
                   help="image files: the workers read JPEG bytes and draw each sample's crop and flip; the batch is "
                        "decoded (torchcodec: nvJPEG on CUDA), cropped, resized and flipped on the device (other "
                        "files are decoded in the workers; not with --auto_augment/--rand_augment). Video files, "
                        "with --video_decoder torchcodec: the workers choose each clip's frames and draws, the "
                        "device decodes them (NVDEC on CUDA)")
    g = p.add_argument_group("list and label files, video (<class>/<video> folders, moving digits)")
    g.add_argument("--train_list", resume_key=False, type=str, default=None,
                   help="list file of training videos: 'path label' or 'path num_frames label' per line; a path "
                        "is a video file or a folder of frame images")
    g.add_argument("--val_list", resume_key=False,
                   type=str, default=None, help="list file of validation videos (same format)")
    g.add_argument("--train_csv", resume_key=False, type=str, default=None,
                   help="multi-label CSV of training images or videos: a header, then 'path,labels' per file, the "
                        "labels class names separated by spaces or '|' (none: an all-negative sample)")
    g.add_argument("--val_csv", resume_key=False, type=str, default=None,
                   help="the validation CSV (same layout; images without it: --val_fraction of --train_csv)")
    g.add_argument("--csv_path_column", resume_key=False, type=str, default=None,
                   help="the CSVs' path column (default: path, image, image_name, 'Image Index', ... or the first)")
    g.add_argument("--csv_labels_column", resume_key=False, type=str, default=None,
                   help="the CSVs' labels column (default: labels, tags, 'Finding Labels', ... or the second)")
    g.add_argument("--data_root", resume_key=False, type=str, default=None,
                   help="folder the list and CSV files' paths are relative to (default: each file's folder)")
    g.add_argument("--class_names", resume_key=False, type=str, default=None,
                   help="file with one class name per line: the integer labels of list files, or the order of a "
                        "CSV's classes")
    g.add_argument("--clip_len", resume_key=True, type=int, default=16, help="frames per clip (per segment)")
    g.add_argument("--frame_interval", resume_key=True,
                   type=int, default=2, help="take every N-th frame of the video in a clip")
    g.add_argument("--num_segments", resume_key=True, type=int, default=1,
                   help="cut each video into N segments and take a clip in each (TSN); a model sees them all")
    g.add_argument("--video_decoder", resume_key=False, type=str, default="pyav", choices=("pyav", "torchcodec"),
                   help="who decodes video files: PyAV (its wheels bring FFmpeg), or torchcodec's VideoDecoder (needs "
                        "FFmpeg's shared libraries on the machine); the same frames")
    g.add_argument("--test_clips", resume_key=False, type=int, default=None,
                   help="after training (and with --eval_only): test on N clips per video, spread evenly")
    g.add_argument("--test_crops", resume_key=False, type=int, default=None,
                   help="... and M crops per clip (3: left, centre, right); softmax averaged over a video's views")
    g = p.add_argument_group("augmentation (images and videos from files; digits keep their own recipes)")
    g.add_argument("--no_hflip", resume_key=True, action="store_true", help="no random horizontal flip")
    g.add_argument("--auto_augment", resume_key=True,
                   type=str, default=None, choices=("imagenet", "cifar10", "svhn", "ta_wide"),
                   help="AutoAugment policy")
    g.add_argument("--rand_augment", resume_key=True,
                   type=int, default=None, help="RandAugment with this magnitude (0-30)")
    g.add_argument("--random_erase", resume_key=True, type=float, default=0.0,
                   help="random erasing probability, after normalisation (torchvision's recipe: 0.1)")
    g.add_argument("--interpolation", resume_key=False, type=str, default=None, choices=("bilinear", "bicubic"),
                   help="resampling of the train crop and the eval resize (default: the timm/hf model's, else "
                        "bilinear)")
    g.add_argument("--crop_pct", resume_key=False, type=float, default=None,
                   help="eval: resize to the val crop size / crop_pct, then centre-crop (default: the timm/hf "
                        "model's, else 0.875)")
    g.add_argument("--train_crop_size", resume_key=True, type=int, default=None,
                   help="images: side of the random train crop (default: --image_size; torchvision's recipe: 176)")
    g.add_argument("--train_crop_scale", resume_key=True, type=float, nargs=2, default=None, metavar=("MIN", "MAX"),
                   help="images: the random train crop's share of the image's area, drawn in [MIN, MAX] (default: "
                        "0.08 1 as timm's and torchvision's ImageNet recipes for single-label images of 128 px and "
                        "more; 0.85 1 for smaller ones and for multi-label data, whose labelled objects a smaller "
                        "crop cuts out: docs/recipes.md)")
    g.add_argument("--train_crop_ratio", resume_key=True, type=float, nargs=2, default=None, metavar=("MIN", "MAX"),
                   help="images: the random train crop's aspect ratio (width / height), drawn log-uniformly in "
                        "[MIN, MAX] (default: 0.75 1.3333, timm's and torchvision's)")
    g.add_argument("--progressive_resize", resume_key=True,
                   type=int, nargs=4, default=None, metavar=("LOW", "HIGH", "START", "END"),
                   help="images: FFCV's progressive resizing: train crops of side LOW up to epoch START (0-based), "
                        "HIGH from epoch END, in between growing linearly in steps of --progressive_resize_step "
                        "(FFCV's 16-epoch ResNet-50: 160 192 11 13); instead of --train_crop_size")
    g.add_argument("--progressive_resize_step", resume_key=True, type=int, default=32,
                   help="progressive resizing: sides are multiples of this (FFCV: 32)")
    g.add_argument("--val_crop_size", resume_key=False,
                   type=int, default=None, help="images: side of the eval centre crop "
                   "(default: --image_size)")
    g.add_argument("--val_resize_size", resume_key=False, type=int, default=None,
                   help="images: eval resize of the shorter side before the crop (default: val crop / crop_pct; "
                        "torchvision's recipe: 232 for 224)")
    g.add_argument("--mixup_alpha", resume_key=True,
                   type=float, default=0.0, help="MixUp with this Beta(alpha, alpha) (0: off)")
    g.add_argument("--cutmix_alpha", resume_key=True, type=float, default=0.0,
                   help="CutMix with this Beta(alpha, alpha) (0: off); with both alphas, each batch takes one of "
                        "the two at random")
    g.add_argument("--mix_prob", resume_key=True,
                   type=float, default=1.0, help="probability that a batch is mixed at all")
    g.add_argument("--ra_reps", resume_key=True, type=int, default=1,
                   help="repeated augmentation: each sample N times per epoch, differently augmented, its copies on "
                        "different processes; the epoch keeps its length (torchvision's recipe: 4)")
    g.add_argument("--mean", resume_key=False, type=stat_value, nargs="+", default=None,
                   help="normalisation mean, one value a channel, or auto: computed over the training split (the "
                        "default for data of other than 3 channels; else a timm/hf model's, Kinetics' for video, "
                        "ImageNet's)")
    g.add_argument("--std", resume_key=False, type=stat_value, nargs="+", default=None,
                   help="normalisation std (default: as --mean)")
    g = p.add_argument_group(
        "channels and bit depth (multispectral, 16-bit, grayscale image files; docs/multispectral.md)")
    g.add_argument("--bands", resume_key=True, type=int, nargs="+", default=None,
                   help="the files' channels the model sees, in this order, e.g. 3 2 1 7 (default: all of them)")
    g.add_argument("--pixel_max", resume_key=True, type=float, default=None,
                   help="what a pixel value is divided by before the normalisation, e.g. 10000 for Sentinel-2 "
                        "reflectances (default: its type's largest, 65535 for 16 bits; 1 for float data)")
